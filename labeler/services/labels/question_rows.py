"""What people answered beyond the main score, as TRL training rows (a view over `answers`).

- `criterion_ratings(db, project, name)`: TRL's ratings rows for one added criterion: `prompt`, `completion`,
  `score` (mean over people), `n`.
- `criterion_preferences(db, project, name)`: two answers to one prompt whose mean scores on the criterion differ
  become `prompt`, `chosen`, `rejected`, `margin` (the higher chosen), as rating pairs are for the main score.
- `correction_sft` / `written_sft`: a person's corrected or own answer as an SFT row (`prompt`, `completion`).
- `correction_preferences`: each correction preferred to the answer it corrects (`chosen` = corrected).
- `flagged_unpaired`: answers someone flagged as KTO's undesirable rows (`prompt`, `completion`, `label` False).
- `flagged_response_ids`: the answers carrying a flag, for filters.

Held-out prompts (split 'test') never give a training row, and chat or arena text from the browser only when the
server wrote it, as `export` does (the same rule as its `_TRUSTED_RESPONSE`).
"""
from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict
from itertools import combinations
from pathlib import Path

import sqlite_utils

from labeler.errors import InputError
from labeler.services.data.projects import get_project
from labeler.services.labels.quality import krippendorff_alpha
from labeler.services.labels.questions import MAIN_CRITERION, list_questions

_TRAINING_ANSWERS = (
    " FROM answers a JOIN responses r ON r.id = a.response_id JOIN prompts p ON p.id = r.prompt_id"
    " WHERE p.project_id = ? AND p.split NOT IN ('test', 'chat')"
    " AND (r.source NOT IN ('chat', 'arena') OR r.server_generated = 1)"
)


def _question_id(db: sqlite_utils.Database, project: str, name: str, kind: str) -> int:
    found = {q.name: q for q in list_questions(db, project) if q.kind == kind}
    if name not in found:
        if kind == "criterion" and name == MAIN_CRITERION:
            raise InputError(f"'{MAIN_CRITERION}' is the project's own score: export it with --kind ratings or"
                             " preferences", field="criterion")
        known = ", ".join(found) or "none"
        raise InputError(f"the project has no {kind} {name!r} (known: {known})", field=kind)
    return found[name].id


def _criterion_means(db, project: str, name: str) -> dict[int, list[tuple[int, str, str, float, int]]]:
    """{prompt_id: [(response_id, prompt, completion, mean score, n)]} for one criterion."""
    question_id = _question_id(db, project, name, "criterion")
    rows = db.execute(
        "SELECT p.id, r.id, p.text, r.text, AVG(a.score), COUNT(*)" + _TRAINING_ANSWERS
        + " AND a.question_id = ? GROUP BY r.id ORDER BY p.id, r.id",
        [get_project(db, project).id, question_id]).fetchall()
    by_prompt = defaultdict(list)
    for prompt_id, response_id, prompt, completion, mean, n in rows:
        by_prompt[prompt_id].append((response_id, prompt, completion, mean, n))
    return by_prompt


def criterion_ratings(db: sqlite_utils.Database, project: str, name: str) -> list[dict]:
    return [{"prompt": prompt, "completion": completion, "score": mean, "n": n}
            for answers in _criterion_means(db, project, name).values()
            for _, prompt, completion, mean, n in answers]


def criterion_preferences(db: sqlite_utils.Database, project: str, name: str) -> list[dict]:
    rows = []
    for answers in _criterion_means(db, project, name).values():
        for first, second in combinations(answers, 2):
            if first[3] == second[3]:
                continue  # equal means carry no preference on this criterion
            high, low = (first, second) if first[3] > second[3] else (second, first)
            rows.append({"prompt": high[1], "chosen": high[2], "rejected": low[2], "margin": high[3] - low[3]})
    return rows


def _texts(db, project: str, kind: str) -> list[tuple[str, str, str]]:
    """(prompt, shown answer, person's text) for every text answer of `kind`, oldest first."""
    return [tuple(row) for row in db.execute(
        "SELECT p.text, r.text, a.text" + _TRAINING_ANSWERS + " AND a.kind = ? ORDER BY a.id",
        [get_project(db, project).id, kind]).fetchall()]


def correction_sft(db: sqlite_utils.Database, project: str) -> list[dict]:
    return [{"prompt": prompt, "completion": text} for prompt, _, text in _texts(db, project, "correction")]


def correction_preferences(db: sqlite_utils.Database, project: str) -> list[dict]:
    return [{"prompt": prompt, "chosen": text, "rejected": shown}
            for prompt, shown, text in _texts(db, project, "correction") if text != shown]


def written_sft(db: sqlite_utils.Database, project: str) -> list[dict]:
    return [{"prompt": prompt, "completion": text} for prompt, _, text in _texts(db, project, "written")]


def flagged_response_ids(db: sqlite_utils.Database, project: str, flags: list[str] | None = None) -> set[int]:
    """Answers anyone ticked one of `flags` on (None: any flag of the project)."""
    if flags is None:
        ids = [q.id for q in list_questions(db, project) if q.kind == "flag"]
    else:
        ids = [_question_id(db, project, name, "flag") for name in flags]
    if not ids:
        return set()
    marks = ", ".join("?" * len(ids))
    rows = db.execute(f"SELECT DISTINCT a.response_id FROM answers a JOIN responses r ON r.id = a.response_id"
                      f" JOIN prompts p ON p.id = r.prompt_id WHERE p.project_id = ? AND a.kind = 'flag'"
                      f" AND a.question_id IN ({marks})", [get_project(db, project).id, *ids]).fetchall()
    return {row[0] for row in rows}


def flagged_unpaired(db: sqlite_utils.Database, project: str, flags: list[str] | None = None) -> list[dict]:
    """KTO's undesirable rows: every flagged answer once, with label False."""
    ids = flagged_response_ids(db, project, flags)
    rows = db.execute(
        "SELECT r.id, p.text, r.text FROM responses r JOIN prompts p ON p.id = r.prompt_id WHERE p.project_id = ?"
        " AND p.split NOT IN ('test', 'chat') AND (r.source NOT IN ('chat', 'arena') OR r.server_generated = 1)"
        " ORDER BY r.id", [get_project(db, project).id]).fetchall()
    return [{"prompt": prompt, "completion": completion, "label": False}
            for response_id, prompt, completion in rows if response_id in ids]


# What `rlhf-studio questions export --rows` writes: name -> (rows, needs a criterion, TRL's kind of dataset).
ROW_KINDS = {
    "criterion-ratings": (criterion_ratings, True, "ratings: prompt, completion, score, n"),
    "criterion-preferences": (criterion_preferences, True, "preferences: prompt, chosen, rejected, margin"),
    "corrections-sft": (correction_sft, False, "SFT: prompt, completion (the corrected answer)"),
    "corrections-preferences": (correction_preferences, False, "preferences: the correction chosen over the original"),
    "written-sft": (written_sft, False, "SFT: prompt, completion (a person's own answer)"),
    "flagged-kto": (flagged_unpaired, False, "KTO's unpaired rows: every flagged answer, label false"),
}


def rows_of(db: sqlite_utils.Database, project: str, kind: str, criterion: str | None = None) -> list[dict]:
    if kind not in ROW_KINDS:
        raise InputError(f"unknown rows {kind!r} (choose {', '.join(ROW_KINDS)})", field="rows")
    make, needs_criterion, _ = ROW_KINDS[kind]
    if needs_criterion and not criterion:
        raise InputError(f"{kind} rows are per criterion: name one with --criterion", field="criterion")
    return make(db, project, criterion) if needs_criterion else make(db, project)


def write_jsonl(rows: list[dict], out: str | Path) -> Path:
    """Rows as JSON lines, written beside `out` and renamed: a failed write leaves no half file."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            for row in rows:
                file.write(json.dumps(row, ensure_ascii=False) + "\n")
        os.chmod(tmp, 0o600)  # exports are private to their owner, as every other export is
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def criterion_agreement(db: sqlite_utils.Database, project: str = "default") -> dict[str, dict]:
    """Krippendorff's alpha (ordinal) per added criterion, over the answers that two or more people scored:
    {name: {"alpha": float | None, "answers": units}}; Admin > Quality shows it beside the main score's."""
    proj = get_project(db, project)
    result = {}
    for question in list_questions(db, project):
        if question.kind != "criterion":
            continue
        scores = defaultdict(list)
        for response_id, score in db.execute(
                "SELECT a.response_id, a.score FROM answers a JOIN items i ON i.id = a.item_id"
                " WHERE i.project_id = ? AND a.question_id = ?", [proj.id, question.id]).fetchall():
            scores[response_id].append(score)
        units = [values for values in scores.values() if len(values) >= 2]
        result[question.name] = {"alpha": krippendorff_alpha(units, "ordinal"), "answers": len(units)}
    return result
