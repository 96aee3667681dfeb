"""Export labels as TRL datasets: label kinds turned into training rows, then a writer.

Row kinds (TRL's column conventions, so the trainers in rlhf/ and TRL itself read them unchanged):
- preferences: `prompt`, `chosen`, `rejected` (+ `margin` when rating pairs are included). From rankings: every
  ordered pair across groups of an annotator's order (best to worst), ties dropped. With several rankings of
  an item, each response pair becomes ONE row in the majority direction; a pair without a strict majority
  (1 vs 1, or all tied) carries no preference and is dropped. agreement(pair) = majority votes / rankings
  that contain the pair (tied ones included), so a pair tied by one of three annotators has agreement 2/3.
- ratings: `prompt`, `completion`, `score` (mean over annotators), `n`, `std` (population std, 0 for n = 1).
  agreement(response) = 1 - std(raw scores) / (likert_max - likert_min): 1 when all agree, 0 at maximal spread.
- unpaired (KTO): `prompt`, `completion`, `label` = score >= threshold (default: the scale midpoint, or 0 with
  z-scoring).
Rating pairs: two responses to one prompt with different mean scores, the higher chosen, margin = difference.
Every preference row carries `source`, where its pair was judged (items.source, storage/preference_sources.py):
'rank' (the Rank queue), 'arena' (a vote), 'evaluation' (the `people` measure's blind pair, held-out: exported only
with `include_heldout`), a run's stage such as 'online-dpo' (the pairs a run sent to the Rank tab), 'import', 'chat';
a rating pair the sources of its two answers' rating items ('rate', or e.g. 'chat+rate'). An item is one row per
answer pair whoever ranked it, so a vote counts once. TRL's trainers ignore the extra column, as rlhf's do.

Standard form uses text; conversational form uses message lists: prompt = the stored conversation (or one
user turn), chosen/rejected/completion = [{"role": "assistant", "content": ...}]. Standard form of a
multi-turn prompt keeps only its last user message, so export such projects with conversational=True.
Gold items' labels are real labels and are exported; labels of other projects' items never are, nor labels of
held-out prompts (split 'test': evaluation's, the `people` measure's blind pairs) unless `include_heldout`.

The export is a view over the label tables: its reads join ratings or rankings with their items, prompts, answers
and annotators in one query each (and apply the trust rule on answers, `_TRUSTED_RESPONSE`, inside them), so
they stay here rather than in the modules that write those tables; prompt texts come from `prompts`.
"""
from __future__ import annotations

import csv
import json
import math
import os
import random
import re
import shutil
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from itertools import combinations
from pathlib import Path
from typing import Literal

import sqlite_utils

from labeler.services.labels.dataset_card import export_card
from labeler.errors import InputError
from labeler.services.settings.label_filters import filter_field
from labeler.services.data.label_kinds import majority_pairs
from labeler.services.data.projects import Project, get_project
from labeler.services.data.prompts import prompts_by_id
from storage import rows_by_ids

KINDS = ("preferences", "ratings", "unpaired")
FORMATS = ("jsonl", "parquet", "hf", "csv")
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")  # OWASP "CSV injection": cells a spreadsheet would execute


# Chat and arena responses carry text that came through the browser; only those the server generated itself
# (responses.server_generated) become training rows. Other sources (generate, imports, rollouts) are written
# by the server or an admin's file.
_TRUSTED_RESPONSE = "(r.source NOT IN ('chat', 'arena') OR r.server_generated = 1)"

# A preference row's `source` when its item has none recorded (items.source is filled by a trigger for every item;
# storage/preference_sources.py).
DEFAULT_SOURCE = "rank"


# The Hub's license ids: "apache-2.0", "cc-by-4.0", "odc-by", "other" ...
LICENSE_ID = re.compile(r"[a-z0-9][a-z0-9.\-]*")


def _help(default, text: str):
    return field(default=default, metadata={"help": text})


@dataclass(frozen=True)
class ExportOptions:
    annotators: tuple[str, ...] | None = filter_field("annotators")
    since: str | None = filter_field("since")
    until: str | None = filter_field("until")
    min_annotators: int = filter_field("min_annotators")
    min_agreement: float | None = filter_field("min_agreement")
    include_rating_pairs: bool = filter_field("include_rating_pairs")
    include_heldout: bool = _help(False, "also the labels of held-out prompts (split 'test'), which evaluation "
                                         "answers and people judge runs on: for evaluation only, never to train on")
    conversational: bool = _help(False, "message lists ({role, content}) instead of plain text")
    zscore: bool = _help(False, "z-score each annotator's ratings (over the project) before averaging")
    threshold: float | None = _help(None, "unpaired: label = score >= threshold (default: scale midpoint, 0 with zscore)")
    test_size: float = _help(0.1, "hf format: share of rows in the test split, split by prompt (0: no test split)")
    seed: int = _help(0, "hf format: seed of the train/test split")
    license: str | None = _help(None, "hf format: the dataset card's license, a Hub license id such as cc-by-4.0 (the data owner's choice: none when omitted)")

    def __post_init__(self):
        if self.annotators is not None:
            names = self.annotators.split(",") if isinstance(self.annotators, str) else self.annotators
            object.__setattr__(self, "annotators", tuple(str(a).strip() for a in names if str(a).strip()))
        # Dates may come as str, date or datetime; stored as canonical ISO text (UTC), parsed again at query time.
        for name in ("since", "until"):
            parsed = _parse_time(getattr(self, name), name)
            object.__setattr__(self, name, None if parsed is None else parsed.isoformat())
        if isinstance(self.min_annotators, bool) or not isinstance(self.min_annotators, int) or self.min_annotators < 1:
            raise InputError(f"must be an integer >= 1, got {self.min_annotators!r}", field="min_annotators")
        if self.min_agreement is not None and not 0.0 <= self.min_agreement <= 1.0:
            raise InputError(f"must be between 0 and 1, got {self.min_agreement!r}", field="min_agreement")
        if not 0.0 <= self.test_size < 1.0:
            raise InputError(f"must be in [0, 1), got {self.test_size!r}", field="test_size")
        if self.license is not None and not LICENSE_ID.fullmatch(self.license):
            raise InputError(f"must be a Hub license id such as cc-by-4.0, apache-2.0 or other (lowercase letters, "
                             f"digits, '.' and '-'), got {self.license!r}", field="license")


@dataclass(frozen=True)
class ExportResult:
    path: Path
    rows: int


def training_options(job, **overrides) -> ExportOptions:
    """The options of a training run's rows: its job's data filters (annotators, agreement, rating pairs) and seed,
    held-out prompts left out whatever `overrides` say (training_stages/ read their rows with these)."""
    annotators = tuple(a.strip() for a in job.annotators.split(",") if a.strip()) or None
    return ExportOptions(annotators=annotators, min_annotators=job.min_annotators, min_agreement=job.min_agreement,
                         include_rating_pairs=job.include_rating_pairs, seed=job.seed,
                         **{**overrides, "include_heldout": False})


def _parse_time(value, field: str) -> date | datetime | None:
    """A bare date stays a date (it means the whole day); anything else becomes an aware UTC datetime."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, date):
        return value
    else:
        text = str(value).strip()
        try:
            if len(text) == 10:
                return date.fromisoformat(text)
            parsed = datetime.fromisoformat(text)
        except ValueError:
            example = "e.g. 2025-01-31 or 2025-01-31T12:00"
            raise InputError(f"not an ISO date or datetime: {value!r} ({example})", field=field) from None
    # Naive times are UTC, like every timestamp in the database.
    return parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed.astimezone(timezone.utc)


def _stamp(moment: datetime) -> str:
    # The database's format: strftime('%Y-%m-%dT%H:%M:%fZ'), millisecond precision; compares as text.
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _time_filter(column: str, options: ExportOptions) -> tuple[str, list]:
    clauses, params = [], []
    since, until = _parse_time(options.since, "since"), _parse_time(options.until, "until")
    if since is not None:
        if not isinstance(since, datetime):
            since = datetime.combine(since, datetime.min.time(), timezone.utc)
        clauses.append(f"{column} >= ?")
        params.append(_stamp(since))
    if until is not None:
        if isinstance(until, datetime):
            clauses.append(f"{column} <= ?")
            params.append(_stamp(until))
        else:  # a date: everything before the next midnight
            clauses.append(f"{column} < ?")
            params.append(_stamp(datetime.combine(until + timedelta(days=1), datetime.min.time(), timezone.utc)))
    return "".join(f" AND {c}" for c in clauses), params


def _heldout_filter(options: ExportOptions) -> str:
    # A label on a held-out prompt in a dataset leaks the prompts runs are judged on into whatever is trained
    # from it: left out of every export unless asked for.
    # Retired prompts (prompts.RETIRED_SPLIT) are out of use: never exported, never trained on.
    return " AND p.split != 'retired'" if options.include_heldout else " AND p.split NOT IN ('test', 'retired')"


def _annotator_filter(options: ExportOptions) -> tuple[str, list]:
    if options.annotators is None:
        return "", []
    return f" AND u.username IN ({', '.join('?' * len(options.annotators))})", list(options.annotators)


# --- shaping prompts and answers ------------------------------------------------------------------------


def _prompt_value(text: str, messages_json: str | None, options: ExportOptions):
    if not options.conversational:
        return text
    return json.loads(messages_json) if messages_json else [{"role": "user", "content": text}]


def _answer_value(text: str, options: ExportOptions):
    return [{"role": "assistant", "content": text}] if options.conversational else text


# --- ratings -----------------------------------------------------------------------------------------------


@dataclass
class _RatedResponse:
    prompt_id: int
    response_id: int
    prompt: object
    completion: object
    raw: list[float]
    used: list[float]  # raw, or z-scored per annotator
    source: str = "rate"  # its rating item's origin (items.source)

    @property
    def score(self) -> float:
        return sum(self.used) / len(self.used)

    @property
    def std(self) -> float:
        return _pstd(self.used)


def _pstd(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def _annotator_moments(db: sqlite_utils.Database, project: Project) -> dict[int, tuple[float, float]]:
    """Each annotator's (mean, population std) over all their ratings in the project, for z-scoring."""
    scores = defaultdict(list)
    for user_id, score in db.execute(
        "SELECT ra.user_id, ra.score FROM ratings ra JOIN items i ON i.id = ra.item_id WHERE i.project_id = ?",
        [project.id],
    ).fetchall():
        scores[user_id].append(score)
    return {user_id: (sum(v) / len(v), _pstd(v)) for user_id, v in scores.items()}


def _rated_responses(db: sqlite_utils.Database, project: Project, options: ExportOptions) -> list[_RatedResponse]:
    who, who_params = _annotator_filter(options)
    when, when_params = _time_filter("ra.created_at", options)
    rows = db.execute(
        "SELECT ra.user_id, ra.score, r.id AS response_id, r.text AS completion, p.id AS prompt_id, p.text AS prompt,"
        " p.messages_json, i.source FROM ratings ra"
        " JOIN items i ON i.id = ra.item_id JOIN responses r ON r.id = ra.response_id"
        " JOIN prompts p ON p.id = r.prompt_id JOIN users u ON u.id = ra.user_id"
        f" WHERE i.project_id = ? AND p.project_id = ? AND {_TRUSTED_RESPONSE}{who}{when}{_heldout_filter(options)}"
        " ORDER BY p.id, r.id, ra.id",
        [project.id, project.id, *who_params, *when_params],
    ).fetchall()
    moments = _annotator_moments(db, project) if options.zscore else {}
    by_response: dict[int, _RatedResponse] = {}
    for row in rows:
        rated = by_response.get(row["response_id"])
        if rated is None:
            rated = by_response[row["response_id"]] = _RatedResponse(
                row["prompt_id"], row["response_id"], _prompt_value(row["prompt"], row["messages_json"], options),
                _answer_value(row["completion"], options), [], [], row["source"] or "rate",
            )
        rated.raw.append(row["score"])
        if options.zscore:
            mean, std = moments[row["user_id"]]
            # An annotator who always gives the same score says nothing about relative quality: z = 0.
            rated.used.append((row["score"] - mean) / std if std > 0 else 0.0)
        else:
            rated.used.append(row["score"])
    scale = project.likert_max - project.likert_min
    return [
        rated
        for rated in by_response.values()
        if len(rated.raw) >= options.min_annotators
        and (options.min_agreement is None or 1 - _pstd(rated.raw) / scale >= options.min_agreement)
    ]


def rating_rows(
    db: sqlite_utils.Database, project: str = "default", options: ExportOptions = ExportOptions()
) -> list[dict]:
    """One row per rated response: prompt, completion, score (mean), n, std. Ordered by prompt, response."""
    return [row for _, row in _rating_records(db, get_project(db, project), options)]


def _rating_records(db, project: Project, options: ExportOptions) -> list[tuple[int, dict]]:
    return [
        (r.prompt_id, {"prompt": r.prompt, "completion": r.completion, "score": r.score, "n": len(r.raw), "std": r.std})
        for r in _rated_responses(db, project, options)
    ]


def unpaired_rows(
    db: sqlite_utils.Database, project: str = "default", options: ExportOptions = ExportOptions()
) -> list[dict]:
    """One row per rated response: prompt, completion, label (bool: mean score >= threshold), for KTO."""
    return [row for _, row in _unpaired_records(db, get_project(db, project), options)]


def default_threshold(project: Project, zscore: bool = False) -> float:
    """The unpaired (KTO) threshold when none is given: the scale's midpoint, or 0 for z-scored ratings.

    The one default: the CLI leaves --threshold unset and the Data tab pre-fills its box with this.
    """
    return 0.0 if zscore else project.midpoint


def _unpaired_records(db, project: Project, options: ExportOptions) -> list[tuple[int, dict]]:
    threshold = default_threshold(project, options.zscore) if options.threshold is None else options.threshold
    return [
        (r.prompt_id, {"prompt": r.prompt, "completion": r.completion, "label": r.score >= threshold})
        for r in _rated_responses(db, project, options)
    ]


# --- preferences -------------------------------------------------------------------------------------------


def _ranking_records(db, project: Project, options: ExportOptions) -> list[tuple[int, dict]]:
    who, who_params = _annotator_filter(options)
    when, when_params = _time_filter("rk.created_at", options)
    rankings = db.execute(
        # CROSS JOIN fixes the loop order: one scan of rankings, each item looked up by primary key.
        "SELECT rk.item_id, rk.prompt_id, rk.order_json, i.source"
        " FROM rankings rk CROSS JOIN items i ON i.id = rk.item_id"
        " JOIN prompts p ON p.id = rk.prompt_id LEFT JOIN users u ON u.id = rk.user_id"
        f" WHERE i.project_id = ? AND p.project_id = ?{who}{when}{_heldout_filter(options)} ORDER BY rk.item_id, rk.id",
        [project.id, project.id, *who_params, *when_params],
    ).fetchall()
    orders: dict[int, list[list[list[int]]]] = defaultdict(list)  # item id -> its rankings, oldest first
    prompt_of: dict[int, int] = {}
    source_of: dict[int, str] = {}
    for ranking in rankings:
        prompt_of[ranking["item_id"]] = ranking["prompt_id"]
        source_of[ranking["item_id"]] = ranking["source"] or DEFAULT_SOURCE
        orders[ranking["item_id"]].append(json.loads(ranking["order_json"]))
    majorities = {item_id: majority_pairs(item_orders) for item_id, item_orders in sorted(orders.items())}
    texts = _texts(db, {i for pairs in majorities.values() for p in pairs for i in (p.chosen, p.rejected)})
    prompts = prompts_by_id(db, prompt_of.values())
    records = []
    for item_id, pairs in majorities.items():
        for pair in pairs:
            if pair.seen < options.min_annotators or (
                options.min_agreement is not None and pair.agreement < options.min_agreement
            ):
                continue
            if pair.chosen not in texts or pair.rejected not in texts:  # deleted since it was ranked, or client-written
                continue
            prompt_id = prompt_of[item_id]
            text, messages_json = prompts[prompt_id]
            records.append((prompt_id, {
                "prompt": _prompt_value(text, messages_json, options),
                "chosen": _answer_value(texts[pair.chosen], options),
                "rejected": _answer_value(texts[pair.rejected], options),
                "source": source_of[item_id],
            }))
    return records


def _rating_pair_records(db, project: Project, options: ExportOptions) -> list[tuple[int, dict]]:
    by_prompt = defaultdict(list)
    for rated in _rated_responses(db, project, options):
        by_prompt[rated.prompt_id].append(rated)
    records = []
    for prompt_id, rated in by_prompt.items():
        for a, b in combinations(rated, 2):  # already ordered by response id
            if a.score == b.score:
                continue
            better, worse = (a, b) if a.score > b.score else (b, a)
            records.append((prompt_id, {
                "prompt": a.prompt, "chosen": better.completion, "rejected": worse.completion,
                "source": "+".join(sorted({a.source, b.source})), "margin": better.score - worse.score,
            }))
    return records


def _preference_records(db, project: Project, options: ExportOptions) -> list[tuple[int, dict]]:
    records = _ranking_records(db, project, options)
    if options.include_rating_pairs:
        # One schema for the whole file: ranking pairs carry margin 0 (plain Bradley-Terry).
        records = _merge_rating_pairs([(p, {**row, "margin": 0.0}) for p, row in records],
                                      _rating_pair_records(db, project, options))
    return records


def _pair_key(prompt_id: int, row: dict) -> tuple:
    # Conversational rows hold message lists: compared as canonical JSON.
    return prompt_id, json.dumps(row["chosen"], sort_keys=True), json.dumps(row["rejected"], sort_keys=True)


def _merge_rating_pairs(ranked: list[tuple[int, dict]], rated: list[tuple[int, dict]]) -> list[tuple[int, dict]]:
    """Ranking pairs, then the rating pairs that no ranking already gives (a pair ranked and
    rated the same way was once written twice, margins 0.0 and 2.0). A pair both give keeps its ranking row with
    the ratings' margin: the same preference, and how strongly the ratings separate its answers. A rating pair
    that orders the answers the other way is not the same pair and stays, as annotators' disagreement does."""
    out = list(ranked)
    at = {_pair_key(p, row): index for index, (p, row) in enumerate(out)}
    for prompt_id, row in rated:
        key = _pair_key(prompt_id, row)
        if key in at:
            index = at[key]
            out[index] = (out[index][0], {**out[index][1], "margin": max(out[index][1]["margin"], row["margin"])})
        else:
            at[key] = len(out)
            out.append((prompt_id, row))
    return out


def preference_rows(
    db: sqlite_utils.Database, project: str = "default", options: ExportOptions = ExportOptions()
) -> list[dict]:
    """TRL preference rows: prompt, chosen, rejected[, margin]. Ranking pairs (by item, then response ids) first."""
    return [row for _, row in _preference_records(db, get_project(db, project), options)]


def _texts(db, ids: set[int]) -> dict[int, str]:
    """Texts of the responses among `ids` that may be trained on (a pair missing one is dropped)."""
    sql = f"SELECT r.id, r.text FROM responses r WHERE r.id IN ({{marks}}) AND {_TRUSTED_RESPONSE}"
    return {row[0]: row[1] for row in rows_by_ids(db, sql, ids)}


# --- writers -----------------------------------------------------------------------------------------------

_RECORDS = {"preferences": _preference_records, "ratings": _rating_records, "unpaired": _unpaired_records}


def rows_with_prompt_ids(
    db: sqlite_utils.Database, project: str, kind: Literal["preferences", "ratings", "unpaired"], options: ExportOptions
) -> list[tuple[int, dict]]:
    """(prompt id, row) for each row of `kind`: for splits by prompt (`split_by_prompt`) and data snapshots."""
    if kind not in KINDS:
        raise InputError(f"unknown kind {kind!r} (choose {', '.join(KINDS)})", field="kind")
    return _RECORDS[kind](db, get_project(db, project), options)


def export(
    db: sqlite_utils.Database,
    project: str,
    kind: Literal["preferences", "ratings", "unpaired"],
    fmt: Literal["jsonl", "parquet", "hf", "csv"],
    out: str | Path,
    options: ExportOptions = ExportOptions(),
) -> ExportResult:
    """Write `kind` rows as `fmt` to `out` (a file, or a folder for hf). Replaces `out` only once complete."""
    if kind not in KINDS:
        raise InputError(f"unknown kind {kind!r} (choose {', '.join(KINDS)})", field="kind")
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r} (choose {', '.join(FORMATS)})", field="format")
    records = rows_with_prompt_ids(db, project, kind, options)
    if not records:
        raise InputError(f"nothing to export: no {kind} rows match (label some items, or relax the filters)", field="kind")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = [row for _, row in records]
    if fmt == "hf":
        _write_hf(records, out, options, card=lambda splits: export_card(db, project, kind, options, splits))
    else:
        writer = {"jsonl": _write_jsonl, "parquet": _write_parquet, "csv": _write_csv}[fmt]
        _atomic_file(out, lambda tmp: writer(rows, tmp))
    return ExportResult(path=out, rows=len(rows))


def _atomic_file(out: Path, write) -> None:
    # Write beside the target and rename: a failed export never leaves half a file where the old one was.
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_jsonl(rows: list[dict], path: Path) -> None:
    with path.open("w", encoding="utf-8") as file:
        for row in rows:
            file.write(json.dumps(row, ensure_ascii=False) + "\n")


def _write_parquet(rows: list[dict], path: Path) -> None:
    import pyarrow as pa  # optional here: only --format parquet needs it
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


def neutralise_cell(value):
    """A string a spreadsheet would run as a formula gets a leading apostrophe; other values pass through."""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value


def _write_csv(rows: list[dict], path: Path) -> None:
    with path.open("w", encoding="utf-8", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            # Message lists become JSON text; every string cell is neutralised.
            writer.writerow({
                key: neutralise_cell(json.dumps(value, ensure_ascii=False) if isinstance(value, list) else value)
                for key, value in row.items()
            })


def split_by_prompt(records: list[tuple[int, dict]], test_size: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, test) rows; whole prompts go to test (no prompt in both), about test_size of the rows, seeded."""
    prompt_ids = sorted({prompt_id for prompt_id, _ in records})
    if test_size <= 0 or len(prompt_ids) < 2:
        return [row for _, row in records], []
    random.Random(seed).shuffle(prompt_ids)
    rows_per_prompt = defaultdict(int)
    for prompt_id, _ in records:
        rows_per_prompt[prompt_id] += 1
    target = max(1, round(test_size * len(records)))
    test_prompts, test_rows = set(), 0
    for prompt_id in prompt_ids[:-1]:  # the last shuffled prompt always stays in train
        if test_rows >= target:
            break
        test_prompts.add(prompt_id)
        test_rows += rows_per_prompt[prompt_id]
    train = [row for prompt_id, row in records if prompt_id not in test_prompts]
    test = [row for prompt_id, row in records if prompt_id in test_prompts]
    return train, test


def make_private(folder: Path) -> None:
    """Folders 0700 and files 0600 under `folder` (and itself), as the other exports' files are (mkstemp):
    `datasets` writes its splits with the umask's modes (0755 folders, 0644 files), readable by every local
    user, and the web app's zip of them kept those modes in Gradio's cache for up to an hour."""
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o700 if path.is_dir() else 0o600)


def _write_hf(records: list[tuple[int, dict]], out: Path, options: ExportOptions, card=None) -> None:
    """A datasets folder with train/test splits and, given `card(split sizes) -> text`, its README.md."""
    import datasets

    if out.exists() and not (out.is_dir() and (not any(out.iterdir()) or (out / "dataset_dict.json").exists())):
        raise InputError("exists and is not a saved dataset: refusing to overwrite it", file=str(out))
    train, test = split_by_prompt(records, options.test_size, options.seed)
    splits = {"train": datasets.Dataset.from_list(train)}
    if test:
        splits["test"] = datasets.Dataset.from_list(test)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        datasets.DatasetDict(splits).save_to_disk(str(tmp))
        if card is not None:
            (tmp / "README.md").write_text(card({name: len(ds) for name, ds in splits.items()}), encoding="utf-8")
        make_private(tmp)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
