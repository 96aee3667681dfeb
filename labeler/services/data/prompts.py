"""Prompts: import from files (CSV, JSONL, JSON, .txt, Parquet, saved datasets), dedupe, list.

A prompt is plain text, or a conversation (`messages_json`: the messages before the answer, ending with
the user's turn; `text` is then that last user message, which is what the labelling screen shows).
A conversation that is a single user turn is stored as plain text, so "Hi" from a .txt file and
[{"role": "user", "content": "Hi"}] from a chat file are the same prompt.

Duplicates are prompts with the same hash in the project (exact text, or exact conversation); they are
skipped and counted, within the file as well. An import is all-or-nothing: every record is validated
before the first INSERT, and the INSERTs share one transaction.

Every project holds some prompts out of training (split 'test') to evaluate runs on. A file's own split is
honoured (`--split`, a `split` column, a dataset's test or validation split); otherwise the project's
`heldout_share` of its prompts is held out, chosen by a hash of each prompt (`hash_fraction`), so the choice does
not depend on a file's order and importing the same file again changes nothing. Held-out prompts never reach
training rows nor, by default, the labelling queues (generation skips them).

This module owns the prompts table: it is its one writer, and the other services read it through the functions
here (a view joining it with other tables says so in its own module docstring).
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Literal

import sqlite_utils

from labeler.services.data import labeling
from labeler.errors import InputError
from labeler.services.data.projects import get_project, update_project
from labeler.services.data.readers import Where, check_messages, check_text, read_records
from storage import rows_by_ids, write_transaction

SHIPPED_PROMPTS = Path(__file__).resolve().parent.parent.parent / "data" / "movie_prompts.txt"


@dataclass(frozen=True)
class ImportResult:
    added: int
    duplicates: int
    skipped: int = 0  # records dropped for a stated reason (labels import: pairs with chosen == rejected)
    heldout: int = 0  # of `added`, prompts held out of training (split 'test')
    note: str = field(default="", compare=False)  # why no prompt was held out, when none was (for people)


# Held-out prompts: at least a handful (fewer says little about a run), at most a cap (each is answered
# `eval_samples` times by the model and its base in every evaluation), and a project too small for both splits
# holds none out by default until it grows.
MIN_HELDOUT = 5
MIN_TRAIN = 5
MAX_HELDOUT = 200
HELDOUT_FROM = 20  # prompts a project needs before its default share holds any out
# Held-out prompts a verdict needs to decide: the win rate's interval (rlhf/stats.py) is Wilson's at between one
# trial a prompt (every answer to a prompt alike: the worst case) and all its answer pairs. At one trial a prompt,
# a 70% win rate over 30 prompts is 52-83% (decided: "better"); over 7 (10% of a 70-prompt project) 35-91%, and
# over 20 48-86% (both "not yet distinguishable"). A small project holds this many out, or half its prompts when
# it has fewer than twice as many, whatever its share; its share takes over above 300 prompts (at 10%).
VERDICT_HELDOUT = 30
SPLIT_NAMES = {"train": "train", "training": "train", "test": "test", "validation": "test", "valid": "test",
               "eval": "test", "heldout": "test", "held-out": "test", "dev": "test"}
SPLITS = ("train", "test")


def hash_fraction(text_hash: str) -> float:
    """A prompt's place in [0, 1), from its sha256 hash: uniform, fixed, and independent of the file's order."""
    return int(text_hash[:13], 16) / 16 ** 13


def heldout_target(total: int, share: float) -> int:
    """How many of `total` prompts a project holds out at `share` (0 when share is 0 or there are none): the
    largest of round(share * total), VERDICT_HELDOUT (at most half of `total`) and MIN_HELDOUT, capped at
    MAX_HELDOUT. The one rule for imports, re-splits and what the app shows; prompts already stored keep their
    split (choose_heldout holds out new prompts only)."""
    if share <= 0 or total <= 0:
        return 0
    return min(MAX_HELDOUT, max(MIN_HELDOUT, round(share * total), min(VERDICT_HELDOUT, total // 2)))


def heldout_rule(total: int, share: float) -> str:
    """In words, what heldout_target asks of a project of `total` prompts, for the places the split is shown."""
    target = heldout_target(total, share)
    if not target:
        return "held-out share 0: none held out"
    by_share = round(share * total)
    if target == MAX_HELDOUT and by_share > MAX_HELDOUT:
        why = f"{share:.0%} capped at {MAX_HELDOUT}"
    elif target > by_share and target == min(VERDICT_HELDOUT, total // 2):
        why = (f"at least {VERDICT_HELDOUT}, or half the prompts, so that the verdict's interval can decide; "
               f"{share:.0%} would be {by_share}")
    elif target > by_share:
        why = f"at least {MIN_HELDOUT}"
    else:
        why = f"{share:.0%}"
    return f"the rule holds {target} of {total} prompts out ({why})"


def split_of_name(where: Where, name: str, field: str) -> str:
    """'train' or 'test' for a split name in a file (a `split` column, a dataset's split): test, validation,
    eval, dev and heldout are held out; a dataset's split named after one of them (test_prefs) too."""
    key = str(name).strip().lower()
    if key in SPLIT_NAMES:
        return SPLIT_NAMES[key]
    for prefix, split in (("train", "train"), ("test", "test"), ("valid", "test"), ("eval", "test")):
        if key.startswith(prefix):
            return split
    raise where.error(f"unknown split {name!r} (train, or test / validation / eval / dev / heldout)", field)


@dataclass(frozen=True)
class PromptRecord:
    text: str
    messages: list[dict] | None  # None for a plain-text prompt

    @property
    def text_hash(self) -> str:
        if self.messages is None:
            return hashlib.sha256(self.text.encode("utf-8")).hexdigest()
        canonical = json.dumps(self.messages, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(("messages\n" + canonical).encode("utf-8")).hexdigest()

    @property
    def messages_json(self) -> str | None:
        return None if self.messages is None else json.dumps(self.messages, ensure_ascii=False)


def prompt_from_messages(where: Where, messages: list[dict], field: str) -> PromptRecord:
    """The conversation up to and including the last user turn; what follows it is the answer."""
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
    if last_user is None:
        raise where.error("has no user message", field)
    conversation = messages[: last_user + 1]
    text = conversation[-1]["content"]
    if len(conversation) == 1:
        return PromptRecord(text, None)
    return PromptRecord(text, conversation)


def parse_prompt(where: Where, record: dict) -> PromptRecord:
    """A prompt record: {"prompt": "..."}, {"prompt": [messages]} (TRL conversational) or {"messages": [...]}."""
    if record.get("prompt") is None and record.get("messages") is not None:
        return prompt_from_messages(where, check_messages(where, record["messages"], "messages"), "messages")
    if record.get("prompt") is None:
        if "prompt" in record:  # {"prompt": null}: the column is there, its value is not
            raise where.error("is null: needs text or a list of messages", "prompt")
        present = ", ".join(map(str, record)) or "none"
        raise where.error(f"missing 'prompt' (or 'messages'); columns present: {present}", "prompt")
    value = record["prompt"]
    if isinstance(value, list):
        return prompt_from_messages(where, check_messages(where, value, "prompt"), "prompt")
    if not isinstance(value, str):
        raise where.error(f"must be a string or a list of messages, got {type(value).__name__}", "prompt")
    return PromptRecord(check_text(where, value, "prompt"), None)


# The split of prompts typed by annotators in Chat and Arena: out of the training prompts (PPO's, GRPO's) and of
# Generate's work until an admin promotes them (promote_prompts), since anyone with a login types them.
TYPED_SPLIT = "chat"
# The split of a retired prompt (retire_prompts): out of the queues, training and evaluation, which read 'train' and
# 'test' only; `retired_from` keeps the split it had. Its answers and labels stay.
RETIRED_SPLIT = "retired"


def insert_prompt(db: sqlite_utils.Database, project_id: int, prompt: PromptRecord, source: str,
                  split: str = "train") -> tuple[int, bool]:
    """(prompt id, created?) inside the caller's transaction; an existing identical prompt is reused as it is
    (its split too: a held-out prompt typed in Chat stays held out, and is not added again)."""
    cursor = db.execute(
        "INSERT INTO prompts (project_id, text, messages_json, text_hash, source, split) VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (project_id, text_hash) DO NOTHING",
        [project_id, prompt.text, prompt.messages_json, prompt.text_hash, source, split],
    )
    if cursor.rowcount:
        return cursor.lastrowid, True
    row = db.execute(
        "SELECT id FROM prompts WHERE project_id = ? AND text_hash = ?", [project_id, prompt.text_hash]
    ).fetchone()
    return row[0], False


def promote_prompts(db: sqlite_utils.Database, project: str = "default", prompt_ids: Iterable[int] | None = None) -> int:
    """An admin's review: prompts typed in Chat or Arena (split TYPED_SPLIT) join the training prompts (split
    'train'), all of the project's or those of `prompt_ids`. Returns how many moved; an id that is not a typed
    prompt of the project is an InputError, and then nothing moves."""
    project_id = get_project(db, project).id
    with write_transaction(db):
        if prompt_ids is None:
            return db.execute("UPDATE prompts SET split = 'train' WHERE project_id = ? AND split = ?",
                              [project_id, TYPED_SPLIT]).rowcount
        ids = sorted({int(i) for i in prompt_ids})
        typed = {row[0] for row in db.execute(
            f"SELECT id FROM prompts WHERE project_id = ? AND split = ? AND id IN ({','.join('?' * len(ids))})",
            [project_id, TYPED_SPLIT, *ids])} if ids else set()
        others = [i for i in ids if i not in typed]
        if others:
            raise InputError(f"not prompts typed in Chat or Arena of project '{project}': {others}", field="prompt_ids")
        db.conn.executemany("UPDATE prompts SET split = 'train' WHERE id = ?", [(i,) for i in ids])
        return len(ids)


# ---- reads: the other services read the prompts table through these -------------------------------------

def prompt_text(db: sqlite_utils.Database, prompt_id: int) -> str:
    return db.execute("SELECT text FROM prompts WHERE id = ?", [prompt_id]).fetchone()[0]


def prompts_by_id(db: sqlite_utils.Database, ids: Iterable[int]) -> dict[int, tuple[str, str | None]]:
    """{id: (text, messages_json)} of the prompts among `ids` (storage.rows_by_ids: in chunks)."""
    rows = rows_by_ids(db, "SELECT id, text, messages_json FROM prompts WHERE id IN ({marks})", ids)
    return {row[0]: (row[1], row[2]) for row in rows}


def project_prompt_rows(db: sqlite_utils.Database, project_id: int, ids: Iterable[int]) -> dict[int, sqlite3.Row]:
    """{id: row (id, text, messages_json)} of those of `ids` that are prompts of the project."""
    ids = [int(i) for i in ids]
    if not ids:
        return {}
    marks = ", ".join("?" * len(ids))
    rows = db.execute(f"SELECT id, text, messages_json FROM prompts WHERE project_id = ? AND id IN ({marks})",
                      [project_id, *ids])
    return {row["id"]: row for row in rows}


def prompt_splits(db: sqlite_utils.Database, project_id: int) -> list[tuple[int, str]]:
    """(id, split) of every prompt of the project, oldest first."""
    return [(row[0], row[1]) for row in db.execute("SELECT id, split FROM prompts WHERE project_id = ? ORDER BY id",
                                                    [project_id])]


def reviewed_prompt_ids(db: sqlite_utils.Database, project_id: int) -> list[int]:
    """Ids of the project's prompts that were imported or promoted, not typed by an annotator (TYPED_SPLIT),
    oldest first."""
    return [row[0] for row in db.execute("SELECT id FROM prompts WHERE project_id = ? AND split NOT IN (?, ?)"
                                         " ORDER BY id", [project_id, TYPED_SPLIT, RETIRED_SPLIT])]


def reviewed_prompts_with_answers(db: sqlite_utils.Database, project_id: int, model: str,
                                  include_heldout: bool = True) -> list[sqlite3.Row]:
    """Rows (id, text, messages_json, have) of the project's reviewed prompts (see reviewed_prompt_ids), oldest
    first, `have` counting the responses `model` gave each; without the held-out ones (split 'test') unless
    `include_heldout`."""
    skipped = [TYPED_SPLIT, RETIRED_SPLIT] if include_heldout else [TYPED_SPLIT, RETIRED_SPLIT, "test"]
    return db.execute(
        "SELECT p.id, p.text, p.messages_json,"
        " (SELECT COUNT(*) FROM responses r WHERE r.prompt_id = p.id AND r.model = ?) AS have"
        f" FROM prompts p WHERE p.project_id = ? AND p.split NOT IN ({', '.join('?' * len(skipped))}) ORDER BY p.id",
        [model, project_id, *skipped],
    ).fetchall()


def split_texts(db: sqlite_utils.Database, project_id: int, split: str) -> list[str]:
    """The texts of the project's prompts in `split` ('train', 'test' or TYPED_SPLIT), oldest first."""
    return [row[0] for row in db.execute("SELECT text FROM prompts WHERE project_id = ? AND split = ? ORDER BY id",
                                         [project_id, split])]


def split_prompts(db: sqlite_utils.Database, project_id: int, split: str) -> list[str | list[dict]]:
    """The project's prompts in `split`, oldest first: the text, or the conversation for a chat prompt."""
    rows = db.execute("SELECT text, messages_json FROM prompts WHERE project_id = ? AND split = ? ORDER BY id",
                      [project_id, split]).fetchall()
    return [json.loads(row[1]) if row[1] else row[0] for row in rows]


def prompt_column_values(db: sqlite_utils.Database, project_id: int, column: Literal["split", "source"]) -> list[str]:
    """The distinct values of the column among the project's prompts, sorted."""
    if column not in ("split", "source"):
        raise ValueError(f"not a prompts column to list: {column!r}")
    return [row[0] for row in db.execute(f"SELECT DISTINCT {column} FROM prompts WHERE project_id = ? ORDER BY {column}",
                                         [project_id])]


def has_heldout(db: sqlite_utils.Database, project_id: int) -> bool:
    """Whether the project holds any prompt out of training (split 'test')."""
    return db.execute("SELECT 1 FROM prompts WHERE project_id = ? AND split = 'test' LIMIT 1",
                      [project_id]).fetchone() is not None


def last_import_prompt_ids(db: sqlite_utils.Database, project: str = "default") -> list[int]:
    """The prompts of the project's latest import: the newest prompts that share the newest prompt's source.

    An import inserts its prompts together under one source (the file name), so the trailing run of ids with
    that source is the batch just uploaded (duplicates of earlier prompts are skipped on import, not re-added).
    """
    project_id = get_project(db, project).id
    newest = db.execute("SELECT id, source FROM prompts WHERE project_id = ? ORDER BY id DESC LIMIT 1",
                        [project_id]).fetchone()
    if newest is None:
        return []
    before = db.execute("SELECT MAX(id) FROM prompts WHERE project_id = ? AND source != ?",
                        [project_id, newest["source"]]).fetchone()[0] or 0
    return [row[0] for row in db.execute(
        "SELECT id FROM prompts WHERE project_id = ? AND source = ? AND id > ? ORDER BY id",
        [project_id, newest["source"], before])]


# ---- writes -------------------------------------------------------------------------------------------------

def hold_out(db: sqlite_utils.Database, prompt_ids: Iterable[int]) -> None:
    """Move prompts to split 'test' (held out of training, used by evaluation), inside the caller's transaction."""
    db.conn.executemany("UPDATE prompts SET split = 'test' WHERE id = ?", [(int(i),) for i in prompt_ids])


def _store(db: sqlite_utils.Database, project: str, prompts: list[PromptRecord], source: str,
           test: set[int] | frozenset[int] = frozenset(), heldout: int = 0, note: str = "") -> ImportResult:
    """Insert in one transaction; the prompts at the indices in `test` go to split 'test', the rest 'train'.
    An existing identical prompt is left as it is (split included)."""
    project_id = get_project(db, project).id
    added = 0
    with write_transaction(db):
        for index, prompt in enumerate(prompts):
            prompt_id, created = insert_prompt(db, project_id, prompt, source)
            if created and index in test:
                hold_out(db, [prompt_id])
            added += created
    return ImportResult(added=added, duplicates=len(prompts) - added, heldout=heldout, note=note)


def _split_counts(db: sqlite_utils.Database, project_id: int) -> dict[str, int]:
    counts = dict.fromkeys(SPLITS, 0)
    for split, count in db.execute("SELECT split, COUNT(*) FROM prompts WHERE project_id = ? AND split NOT IN (?, ?)"
                                   " GROUP BY split", [project_id, TYPED_SPLIT, RETIRED_SPLIT]):
        counts[split] = count
    return counts


def _new_indices(db: sqlite_utils.Database, project_id: int, prompts: list[PromptRecord]) -> list[int]:
    """Indices of the prompts an import would add: not in the project yet, first of their duplicates in the file."""
    hashes = [p.text_hash for p in prompts]
    stored = {row[0] for row in db.execute("SELECT text_hash FROM prompts WHERE project_id = ?", [project_id])}
    seen, new = set(), []
    for index, text_hash in enumerate(hashes):
        if text_hash not in stored and text_hash not in seen:
            new.append(index)
        seen.add(text_hash)
    return new


def choose_heldout(db: sqlite_utils.Database, project_id: int, prompts: list[PromptRecord],
                   given: list[str | None], share: float, explicit_share: bool,
                   file: str = "") -> tuple[set[int], str]:
    """(indices of `prompts` to hold out, a note when none are) for an import into the project.

    `given` is each record's own split ('train', 'test' or None): where the file says, it is honoured as it is.
    Otherwise new prompts are held out, lowest hash_fraction first, until the project holds heldout_target of
    its prompts out. With the project's default share, a project of fewer than HELDOUT_FROM prompts holds none
    out yet; an explicit share that leaves fewer than MIN_HELDOUT held out or MIN_TRAIN to train on is an
    InputError (nothing is written)."""
    if any(split is not None for split in given):
        return {i for i, split in enumerate(given) if split == "test"}, ""
    new = _new_indices(db, project_id, prompts)
    counts = _split_counts(db, project_id)
    total = counts["train"] + counts["test"] + len(new)
    if share <= 0:
        return set(), "held-out share 0: no prompt held out"
    if not explicit_share and total < HELDOUT_FROM:
        return set(), (f"the project has {total} prompts: {HELDOUT_FROM} or more are needed before "
                       f"{share:.0%} of them is held out for evaluation")
    # Prompts already stored keep their split: only new ones can be held out.
    wanted = min(len(new), max(0, heldout_target(total, share) - counts["test"]))
    held, left = counts["test"] + wanted, total - counts["test"] - wanted
    if explicit_share and new and (held < MIN_HELDOUT or left < MIN_TRAIN):
        raise InputError(f"held-out share {share:g} of {total} prompts leaves {held} held out and {left} to train on: "
                         f"at least {MIN_HELDOUT} and {MIN_TRAIN} are needed", file=file or None, field="heldout_share")
    ranked = sorted(new, key=lambda i: hash_fraction(prompts[i].text_hash))
    return set(ranked[:wanted]), ""


def _given_splits(records: list[tuple[Where, dict]], split: str | None) -> list[str | None]:
    """Each record's own split: all `split` when given; else a `split` column; else a dataset's split names when
    one of them is held out (a dataset of a train split alone is split by the project's share)."""
    if split is not None:
        if split not in SPLITS:
            raise InputError(f"unknown split {split!r} (train or test)", field="split")
        return [split] * len(records)
    if any("split" in record for _, record in records):
        return [split_of_name(where, record.get("split"), "split") if record.get("split") is not None
                else _missing_split(where) for where, record in records]
    names = [split_of_name(where, where.split, "split") if where.split else None for where, _ in records]
    return names if "test" in names else [None] * len(records)


def _missing_split(where: Where):
    raise where.error("is empty, while other rows have a split: give every row one (train or test)", "split")


def check_prompt_file(path: str | Path) -> int:
    """How many prompts the file holds, every record checked as import_prompts checks it (an InputError naming
    file, line and field otherwise): for a caller that must refuse a bad file before writing anything else."""
    prompts = [parse_prompt(where, record) for where, record in read_records(path, txt_field="prompt")]
    if not prompts:
        raise InputError("no prompts found", file=str(path))
    return len(prompts)


def import_prompts(
    db: sqlite_utils.Database, path: str | Path, project: str = "default", source: str | None = None,
    heldout_share: float | None = None, split: str | None = None,
) -> ImportResult:
    """Import every prompt of a file or saved datasets folder (see module docstring). Writes nothing on error.

    `split` ('train' or 'test') puts the whole file in one split; `heldout_share` overrides the project's share
    for this import (and is then held to the minimums, see choose_heldout)."""
    current = get_project(db, project)  # an unknown project fails before the file is read
    if heldout_share is not None and not 0 <= heldout_share < 1:
        raise InputError(f"must be a share in [0, 1), got {heldout_share!r}", field="heldout_share")
    records = list(read_records(path, txt_field="prompt"))
    prompts = [parse_prompt(where, record) for where, record in records]
    if not prompts:
        raise InputError("no prompts found", file=str(path))
    given = _given_splits(records, split)
    share = current.heldout_share if heldout_share is None else float(heldout_share)
    test, note = choose_heldout(db, current.id, prompts, given, share, heldout_share is not None, str(path))
    new = set(_new_indices(db, current.id, prompts))
    return _store(db, project, prompts, source if source is not None else Path(path).name, test,
                  heldout=len(test & new), note=note)


def add_prompts(db: sqlite_utils.Database, texts: Iterable[str], project: str = "default", source: str = "") -> ImportResult:
    """Plain-text prompts from code or a text box; the same checks, dedupe and held-out share as a file import."""
    current = get_project(db, project)
    prompts = []
    for number, text in enumerate(texts, start=1):
        where = Where("prompts", number, unit="row")
        if not isinstance(text, str):
            raise where.error(f"must be a string, got {type(text).__name__}", "prompt")
        prompts.append(PromptRecord(check_text(where, text, "prompt"), None))
    test, note = choose_heldout(db, current.id, prompts, [None] * len(prompts), current.heldout_share, False)
    new = set(_new_indices(db, current.id, prompts))
    return _store(db, project, prompts, source, test, heldout=len(test & new), note=note)


def split_counts(db: sqlite_utils.Database, project: str = "default") -> dict[str, int]:
    """{'train': n, 'test': n, 'chat': n}: the project's prompts per split (TYPED_SPLIT: typed in Chat/Arena); the
    retired ones are counted by retired_count."""
    project_id = get_project(db, project).id
    counts = {**_split_counts(db, project_id), TYPED_SPLIT: 0}
    counts[TYPED_SPLIT] = db.execute("SELECT COUNT(*) FROM prompts WHERE project_id = ? AND split = ?",
                                     [project_id, TYPED_SPLIT]).fetchone()[0]
    return counts


def heldout_status(db: sqlite_utils.Database, project: str = "default") -> str:
    """The project's held-out prompts against what heldout_target asks of it, in words ('' before it has any
    prompt): shown with the split by `prompts import`, `projects list` and the Data tab."""
    current = get_project(db, project)
    counts = _split_counts(db, current.id)
    total = counts["train"] + counts["test"]
    if not total:
        return ""
    if not counts["test"] and total < HELDOUT_FROM and current.heldout_share > 0:
        return f"none held out until the project has {HELDOUT_FROM} prompts"
    status = heldout_rule(total, current.heldout_share)
    missing = heldout_target(total, current.heldout_share) - counts["test"]
    if missing > 0:  # split before this rule, or by a file: stored prompts keep their split
        status += f"; it holds {counts['test']}, and the next {missing} new prompts imported will be held out"
    return status


def retired_count(db: sqlite_utils.Database, project: str = "default") -> int:
    """How many of the project's prompts are retired (retire_prompts)."""
    return db.execute("SELECT COUNT(*) FROM prompts WHERE project_id = ? AND split = ?",
                      [get_project(db, project).id, RETIRED_SPLIT]).fetchone()[0]


def change_heldout_share(db: sqlite_utils.Database, project: str, share: float) -> dict[str, int]:
    """Set the project's held-out share and re-split its prompts by it (lowest hash_fraction held out), before any
    label exists: after that, moving a prompt would move labels between training and evaluation. Answers of
    prompts that become held out leave the labelling queues; those of prompts that join training enter them.
    Returns the new split_counts."""
    current = get_project(db, project)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share < 1:
        raise InputError(f"must be a share in [0, 1), got {share!r}", field="heldout_share")
    with write_transaction(db):
        if labeling.label_count(db, current.id):
            raise InputError(f"project '{project}' has labels: its held-out prompts can change only before the first "
                             "label (a label's prompt would move between training and evaluation)", field="heldout_share")
        rows = db.execute("SELECT id, text_hash, split FROM prompts WHERE project_id = ? AND split NOT IN (?, ?)",
                          [current.id, TYPED_SPLIT, RETIRED_SPLIT]).fetchall()
        target = heldout_target(len(rows), float(share))
        if target and len(rows) - target < MIN_TRAIN:
            raise InputError(f"held-out share {share:g} of {len(rows)} prompts leaves {len(rows) - target} to train on "
                             f"(at least {MIN_TRAIN})", field="heldout_share")
        ranked = sorted(rows, key=lambda row: hash_fraction(row["text_hash"]))
        test = {row["id"] for row in ranked[:target]}
        moved = [row["id"] for row in rows if (row["id"] in test) != (row["split"] == "test")]
        db.conn.executemany("UPDATE prompts SET split = ? WHERE id = ?",
                            [("test" if i in test else "train", i) for i in moved])
        db.execute("UPDATE projects SET heldout_share = ? WHERE id = ?", [float(share), current.id])
    labeling.requeue_prompts(db, project, moved)
    return split_counts(db, project)


def shipped_heldout(line_index: int) -> bool:
    """Whether the shipped prompt on 0-based line `line_index` is held out: every fifth line (4, 9, ...),
    27 of 135. Fixed, not drawn at random, so every install, run and benchmark is measured on the same
    prompts and none of them is ever trained on."""
    return line_index % 5 == 4


# The shipped task is the seeds' IMDB one: the model continues the opening of a movie review, and a good
# continuation is a positive one. Annotators read this beside the shipped prompts.
SHIPPED_GUIDELINES = {
    "rating": (
        "Each prompt is the **opening of a movie review**; the answer is the model's **continuation** of it. "
        "Score the continuation: the more **positive about the film** it is, while reading as a fluent, on-topic "
        "part of the same review, the higher. Skip what you cannot judge."
    ),
    "ranking": (
        "Each prompt is the **opening of a movie review**; every answer is a **continuation** of it. Order them "
        "from the most **positive about the film** (fluent and on topic) to the least. Give two the same rank only "
        "when you truly cannot choose; skip what you cannot judge."
    ),
}


def import_shipped_prompts(db: sqlite_utils.Database, project: str = "default") -> ImportResult:
    """The movie-review openings shipped in labeler/data/ (the IMDB "write a positive review" task), with a
    fixed held-out set in split 'test' (`shipped_heldout`) for evaluation.

    A project that has no prompts yet becomes the movie task: prompt format 'continue' (the model continues
    the review, as the guidelines say; through the chat template it would answer the opening as a message),
    16-token answers, VADER as its measure (unless it has one) and, where its guidelines are still the
    defaults, SHIPPED_GUIDELINES. A project that already has prompts
    keeps its settings."""
    current = get_project(db, project)
    records = list(read_records(SHIPPED_PROMPTS, txt_field="prompt"))
    prompts = [parse_prompt(where, record) for where, record in records]
    test = {i for i, (where, _) in enumerate(records) if shipped_heldout(where.number - 1)}
    fresh = db.execute("SELECT COUNT(*) FROM prompts WHERE project_id = ?", [current.id]).fetchone()[0] == 0
    result = _store(db, project, prompts, "shipped:movie_prompts", test)
    if fresh:
        # The seeds' task: 16-token continuations judged by VADER sentiment of the answer.
        update_project(db, project, prompt_format="continue", answer_tokens=16, measure=current.measure or "vader",
                       answer_tokens_origin="the movie-review task's length",
                       guidelines=current.guidelines or SHIPPED_GUIDELINES["rating"],
                       ranking_guidelines=current.ranking_guidelines or SHIPPED_GUIDELINES["ranking"])
    return result


def count_prompts(db: sqlite_utils.Database, project: str = "default") -> int:
    project_id = get_project(db, project).id
    return db.execute("SELECT COUNT(*) FROM prompts WHERE project_id = ?", [project_id]).fetchone()[0]


def list_prompts(db: sqlite_utils.Database, project: str = "default", limit: int = 100, offset: int = 0) -> list[dict]:
    """Prompts oldest first, with their conversation (or None) and how many responses each has."""
    project_id = get_project(db, project).id
    rows = db.execute(
        "SELECT p.id, p.text, p.messages_json, p.source, p.split, p.created_at,"
        " (SELECT COUNT(*) FROM responses r WHERE r.prompt_id = p.id) AS responses"
        " FROM prompts p WHERE p.project_id = ? ORDER BY p.id LIMIT ? OFFSET ?",
        [project_id, limit, offset],
    ).fetchall()
    return [
        {
            "id": row["id"],
            "text": row["text"],
            "messages": json.loads(row["messages_json"]) if row["messages_json"] else None,
            "source": row["source"],
            "split": row["split"],
            "created_at": row["created_at"],
            "responses": row["responses"],
        }
        for row in rows
    ]


# --- editing and retiring prompts ------------------------------------------------------------------------------


def _project_prompt_ids(db: sqlite_utils.Database, project_id: int, prompt_ids: Iterable[int], field: str) -> list[int]:
    """The ids, each checked to be one of the project's prompts (an InputError naming the first that is not)."""
    try:
        ids = sorted({int(i) for i in prompt_ids})
    except (TypeError, ValueError):
        raise InputError(f"prompt ids must be whole numbers, got {list(prompt_ids)!r}", field=field) from None
    if not ids:
        raise InputError("name at least one prompt", field=field)
    known = {row[0] for row in db.execute(
        f"SELECT id FROM prompts WHERE project_id = ? AND id IN ({', '.join('?' * len(ids))})", [project_id, *ids])}
    missing = [i for i in ids if i not in known]
    if missing:
        raise InputError(f"no prompt {missing[0]} in this project", field=field)
    return ids


def retire_prompts(db: sqlite_utils.Database, project: str, prompt_ids: Iterable[int]) -> int:
    """Take prompts out of use: out of the labelling queues (their unlabelled items go), of training and of
    evaluation, and of Generate's work. Their answers and labels are kept (exports that are not for training still
    hold them, and Records shows them). Returns how many were retired (one already retired counts as none)."""
    current = get_project(db, project)
    with write_transaction(db):
        ids = _project_prompt_ids(db, current.id, prompt_ids, "prompt")
        marks = ", ".join("?" * len(ids))
        retired = db.execute(
            f"UPDATE prompts SET retired_from = split, split = ? WHERE project_id = ? AND split != ? AND id IN ({marks})",
            [RETIRED_SPLIT, current.id, RETIRED_SPLIT, *ids]).rowcount
    labeling.requeue_prompts(db, project, ids)
    return retired


def restore_prompts(db: sqlite_utils.Database, project: str, prompt_ids: Iterable[int]) -> int:
    """Retired prompts back in the split they had, their answers back in the queues. Returns how many."""
    current = get_project(db, project)
    with write_transaction(db):
        ids = _project_prompt_ids(db, current.id, prompt_ids, "prompt")
        restored = db.execute(
            f"UPDATE prompts SET split = COALESCE(retired_from, 'train'), retired_from = NULL"
            f" WHERE project_id = ? AND split = ? AND id IN ({', '.join('?' * len(ids))})",
            [current.id, RETIRED_SPLIT, *ids]).rowcount
    labeling.requeue_prompts(db, project, ids)
    return restored


def edit_prompt(db: sqlite_utils.Database, project: str, prompt_id: int, text: str) -> dict:
    """A typo fixed: the prompt's text replaced, while it has no answers yet (answers and labels were given to the
    text as it was: retire it and import the new text instead). Returns the prompt as list_prompts shows it."""
    current = get_project(db, project)
    if not isinstance(text, str) or not text.strip():
        raise InputError("a prompt needs text", field="prompt")
    record = PromptRecord(text.strip(), None)
    with write_transaction(db):
        (prompt_id,) = _project_prompt_ids(db, current.id, [prompt_id], "prompt")
        if db.execute("SELECT messages_json IS NOT NULL FROM prompts WHERE id = ?", [prompt_id]).fetchone()[0]:
            raise InputError(f"prompt {prompt_id} is a conversation: import it again with the change instead",
                             field="prompt")
        answers = db.execute("SELECT COUNT(*) FROM responses WHERE prompt_id = ?", [prompt_id]).fetchone()[0]
        if answers:
            raise InputError(f"prompt {prompt_id} has {answers} answers, given to its text as it is: retire it and "
                             "import the new text instead", field="prompt")
        same = db.execute("SELECT id FROM prompts WHERE project_id = ? AND text_hash = ? AND id != ?",
                          [current.id, record.text_hash, prompt_id]).fetchone()
        if same is not None:
            raise InputError(f"prompt {same[0]} already has this text", field="prompt")
        db.execute("UPDATE prompts SET text = ?, text_hash = ? WHERE id = ?", [record.text, record.text_hash, prompt_id])
    return prompt_row(db, project, prompt_id)


def prompt_row(db: sqlite_utils.Database, project: str, prompt_id: int) -> dict:
    """One prompt of the project as list_prompts shows it (an InputError when it is not the project's)."""
    current = get_project(db, project)
    (prompt_id,) = _project_prompt_ids(db, current.id, [prompt_id], "prompt")
    position = db.execute("SELECT COUNT(*) FROM prompts WHERE project_id = ? AND id < ?",
                          [current.id, prompt_id]).fetchone()[0]
    return list_prompts(db, project, 1, position)[0]
