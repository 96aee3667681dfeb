"""A project's questions beyond its main score: criteria, flags and written answers (Argilla's "questions").

A project asks one thing by default: its Likert score (Rate) or its ranking (Rank), the criterion named
`MAIN_CRITERION`, stored in `ratings` and `rankings` as before. A team may add:
- criteria: one rating scale per aspect ("safe" 1-5, "in our tone" 1-3), each with a one-line guideline;
- flags: labels a person may tick on an answer ("spam", "unsafe", "not an answer");
- two text questions every project has: a correction of the shown answer, and a written answer of one's own.

This module owns the `questions` and `answers` tables. A question may be added at any time; retiring one keeps
its answers (they are still exported and trained on) and stops asking it. Names are keys in exports and reward
specs (`rm:helpful`), so they are short lowercase words.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Sequence

import sqlite_utils

from labeler.services.data import labeling
from labeler.services.data.accounts import require_user
from labeler.errors import InputError
from labeler.services.data.label_kinds import validate_score
from labeler.services.data.projects import get_project
from storage import write_transaction

MAIN_CRITERION = "overall"
QUESTION_KINDS = ("criterion", "flag")
TEXT_KINDS = ("correction", "written")
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_-]{0,31}")
MAX_GUIDELINE_CHARS = 300
# A correction or a written answer is an answer: a few thousand characters, not a document.
MAX_TEXT_CHARS = 8000


@dataclass(frozen=True)
class Question:
    id: int
    name: str
    kind: str  # a QUESTION_KINDS value
    scale_min: int | None = None  # criteria only
    scale_max: int | None = None
    guideline: str = ""
    retired: bool = False


@dataclass(frozen=True)
class ItemAnswers:
    """What one person answered about one shown answer, beside its main score or rank."""
    scores: dict[str, float] = field(default_factory=dict)  # criterion name -> score on its scale
    flags: Sequence[str] = ()  # the flags ticked; the others are cleared
    correction: str | None = None  # the shown answer as it should have been
    written: str | None = None  # an answer of the person's own


def _check_name(name: object, taken: set[str]) -> str:
    if not isinstance(name, str) or not name.strip():
        raise InputError("a question needs a name", field="name")
    name = name.strip()
    if not NAME_PATTERN.fullmatch(name):
        raise InputError(f"{name!r} is not a name: use a lowercase word of letters, digits, - or _ (at most 32),"
                         " starting with a letter", field="name")
    if name == MAIN_CRITERION or name in TEXT_KINDS:
        raise InputError(f"{name!r} is reserved (the project's own score and the text questions)", field="name")
    if name in taken:
        raise InputError(f"the project already has a question named {name!r}", field="name")
    return name


def _check_guideline(guideline: object) -> str:
    if not isinstance(guideline, str):
        raise InputError(f"must be text, got {guideline!r}", field="guideline")
    if len(guideline) > MAX_GUIDELINE_CHARS or "\n" in guideline.strip():
        raise InputError(f"one line of at most {MAX_GUIDELINE_CHARS} characters", field="guideline")
    return guideline.strip()


def _check_scale(scale_min: object, scale_max: object) -> tuple[int, int]:
    for name, value in (("scale_min", scale_min), ("scale_max", scale_max)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"must be a whole number, got {value!r}", field=name)
    if scale_max <= scale_min:
        raise InputError(f"the scale's top ({scale_max}) must be above its bottom ({scale_min})", field="scale_max")
    return scale_min, scale_max


def _rows(db: sqlite_utils.Database, project_id: int, include_retired: bool = True) -> list[Question]:
    rows = db.execute(
        "SELECT id, name, kind, scale_min, scale_max, guideline, retired FROM questions WHERE project_id = ?"
        + ("" if include_retired else " AND retired = 0") + " ORDER BY id", [project_id]).fetchall()
    return [Question(row[0], row[1], row[2], row[3], row[4], row[5], bool(row[6])) for row in rows]


def list_questions(db: sqlite_utils.Database, project: str = "default", include_retired: bool = True) -> list[Question]:
    """The project's added criteria and flags, oldest first (the main criterion is not among them)."""
    return _rows(db, get_project(db, project).id, include_retired)


def criteria(db: sqlite_utils.Database, project: str = "default", include_retired: bool = False) -> list[Question]:
    """Every criterion people score, the project's own scale first (`MAIN_CRITERION`, id 0)."""
    proj = get_project(db, project)
    main = Question(0, MAIN_CRITERION, "criterion", proj.likert_min, proj.likert_max, "")
    return [main, *(q for q in _rows(db, proj.id, include_retired) if q.kind == "criterion")]


def add_question(db: sqlite_utils.Database, project: str, name: str, kind: str = "criterion",
                 scale_min: int = 1, scale_max: int = 5, guideline: str = "") -> Question:
    """A new criterion (a rating scale) or flag; allowed at any time: earlier items simply lack its answers."""
    if kind not in QUESTION_KINDS:
        raise InputError(f"unknown question kind {kind!r} (known: {', '.join(QUESTION_KINDS)})", field="kind")
    guideline = _check_guideline(guideline)
    if kind == "criterion":
        scale_min, scale_max = _check_scale(scale_min, scale_max)
    else:
        scale_min = scale_max = None
    with write_transaction(db):
        proj = get_project(db, project)
        name = _check_name(name, {q.name for q in _rows(db, proj.id)})
        cursor = db.execute(
            "INSERT INTO questions (project_id, kind, name, scale_min, scale_max, guideline) VALUES (?, ?, ?, ?, ?, ?)",
            [proj.id, kind, name, scale_min, scale_max, guideline])
    return Question(cursor.lastrowid, name, kind, scale_min, scale_max, guideline)


def retire_question(db: sqlite_utils.Database, project: str, name: str) -> Question:
    """Stop asking a question; its answers stay (exports and trainers still read them)."""
    with write_transaction(db):
        proj = get_project(db, project)
        found = {q.name: q for q in _rows(db, proj.id)}
        if name not in found:
            known = ", ".join(found) or "none"
            raise InputError(f"the project has no question {name!r} (known: {known})", field="name")
        db.execute("UPDATE questions SET retired = 1 WHERE id = ?", [found[name].id])
    return Question(**{**found[name].__dict__, "retired": True})


def parse_question_spec(spec: str, kind: str = "criterion") -> dict:
    """`NAME[:MIN-MAX][:GUIDELINE]` for a criterion (scale 1-5 unless given), `NAME[:GUIDELINE]` for a flag, as
    `projects create --criterion/--flag` and `questions add` take them; returns add_question's keywords."""
    name, _, rest = spec.partition(":")
    if kind == "flag":
        return {"name": name, "kind": "flag", "guideline": rest}
    scale, _, guideline = rest.partition(":")
    match = re.fullmatch(r"\s*(-?\d+)\s*-\s*(-?\d+)\s*", scale) if scale else None
    if scale and match is None:
        raise InputError(f"{spec!r}: the scale must read MIN-MAX, e.g. helpful:1-5:Does it answer the question?",
                         field="criterion")
    low, high = (int(match.group(1)), int(match.group(2))) if match else (1, 5)
    return {"name": name, "kind": "criterion", "scale_min": low, "scale_max": high, "guideline": guideline}


def check_specs(specs: Sequence[dict]) -> None:
    """Check parse_question_spec results together (names, scales, guidelines, no name twice) before a project
    is created with them, so that a bad one writes neither the project nor any question."""
    taken: set[str] = set()
    for spec in specs:
        taken.add(_check_name(spec["name"], taken))
        _check_guideline(spec.get("guideline", ""))
        if spec["kind"] == "criterion":
            _check_scale(spec["scale_min"], spec["scale_max"])


def _text(value: object, kind: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InputError(f"must be text, got {type(value).__name__}", field=kind)
    if len(value) > MAX_TEXT_CHARS:
        raise InputError(f"at most {MAX_TEXT_CHARS} characters, got {len(value)}", field=kind)
    return value.strip() or None


def _held_item(db: sqlite_utils.Database, project_id: int, user_id: int, item_id: object, response_id: object):
    if isinstance(item_id, bool) or not isinstance(item_id, int):
        raise InputError(f"must be an item number, got {item_id!r}", field="item_id")
    row = db.execute(
        "SELECT i.response_ids_json, p.split FROM items i JOIN prompts p ON p.id = i.prompt_id"
        " JOIN assignments a ON a.item_id = i.id AND a.user_id = ? WHERE i.id = ? AND i.project_id = ?",
        [user_id, item_id, project_id]).fetchone()
    if row is None:
        raise InputError(f"item {item_id} is not one you were given in this project", field="item_id")
    if row[1] == "test":
        raise InputError(f"item {item_id} is on a held-out prompt, kept for judging runs", field="item_id")
    if response_id not in json.loads(row[0]):
        raise InputError(f"answer {response_id!r} is not shown in item {item_id}", field="response_id")


def _checked_scores(scores: object, questions: dict[str, Question]) -> dict[int, int]:
    if not isinstance(scores, dict):
        raise InputError(f"must map criterion names to scores, got {scores!r}", field="scores")
    checked = {}
    for name, score in scores.items():
        question = questions.get(name)
        if name == MAIN_CRITERION:
            raise InputError(f"'{MAIN_CRITERION}' is the item's own score or rank: submit it as the label",
                             field="scores")
        if question is None or question.kind != "criterion":
            known = ", ".join(q.name for q in questions.values() if q.kind == "criterion") or "none"
            raise InputError(f"the project has no criterion {name!r} (known: {known})", field="scores")
        checked[question.id] = validate_score(score, question.scale_min, question.scale_max, field=f"scores.{name}")
    return checked


def _checked_flags(flags: object, questions: dict[str, Question]) -> set[int]:
    if isinstance(flags, str) or not isinstance(flags, (list, tuple, set, frozenset)):
        raise InputError(f"must be a list of flag names, got {flags!r}", field="flags")
    ids = set()
    for name in flags:
        question = questions.get(name) if isinstance(name, str) else None
        if question is None or question.kind != "flag":
            known = ", ".join(q.name for q in questions.values() if q.kind == "flag") or "none"
            raise InputError(f"the project has no flag {name!r} (known: {known})", field="flags")
        ids.add(question.id)
    return ids


def _store(db: sqlite_utils.Database, project_id: int, user, item_id: int, response_id: int, answers: ItemAnswers,
           *, replace_all: bool) -> int:
    """Check and write one person's answers about one answer, inside the caller's transaction. replace_all: a whole
    item's submit, so criteria left blank now lose an earlier score too (after an undo); else only the flags and
    texts are replaced and the criteria given."""
    correction = _text(answers.correction, "correction")
    written = _text(answers.written, "written")
    _held_item(db, project_id, user.id, item_id, response_id)
    active = {q.name: q for q in _rows(db, project_id, include_retired=False)}
    scores = _checked_scores(answers.scores, active)
    flag_ids = _checked_flags(answers.flags, active)
    key = [item_id, response_id, user.id]
    kinds = "" if replace_all else " AND kind IN ('flag', 'correction', 'written')"
    db.execute("DELETE FROM answers WHERE item_id = ? AND response_id = ? AND user_id = ?" + kinds, key)
    for question_id, score in scores.items():
        db.execute("DELETE FROM answers WHERE item_id = ? AND response_id = ? AND user_id = ? AND question_id = ?",
                   [*key, question_id])
        db.execute("INSERT INTO answers (item_id, response_id, user_id, kind, question_id, score)"
                   " VALUES (?, ?, ?, 'score', ?, ?)", [*key, question_id, score])
    for question_id in sorted(flag_ids):
        db.execute("INSERT INTO answers (item_id, response_id, user_id, kind, question_id) VALUES (?, ?, ?, 'flag', ?)",
                   [*key, question_id])
    for kind, text in (("correction", correction), ("written", written)):
        if text is not None:
            db.execute("INSERT INTO answers (item_id, response_id, user_id, kind, text) VALUES (?, ?, ?, ?, ?)",
                       [*key, kind, text])
    return db.execute("SELECT COUNT(*) FROM answers WHERE item_id = ? AND response_id = ? AND user_id = ?",
                      key).fetchone()[0]


def submit_answers(db: sqlite_utils.Database, project: str, username: str, item_id: int, response_id: int,
                   answers: ItemAnswers) -> int:
    """Store one person's answers about one answer of an item they were given; returns the rows now stored.

    Everything is checked before anything is written, in one transaction: a bad score, an unknown criterion or
    flag, or a text over the limit writes nothing. Submitting again replaces that person's earlier answers
    (flags not ticked now are cleared; an empty text clears it)."""
    with write_transaction(db):
        proj = get_project(db, project)
        return _store(db, proj.id, require_user(db, username), item_id, response_id, answers, replace_all=False)


def has_questions(db: sqlite_utils.Database, project: str = "default") -> bool:
    """Whether people are asked more than the main score (an active criterion or flag): the keyboard then fills
    the questions and Enter submits, instead of a digit submitting at once."""
    return any(not q.retired for q in list_questions(db, project))


def _item_responses(db: sqlite_utils.Database, item_id: object) -> list[int]:
    row = db.execute("SELECT response_ids_json FROM items WHERE id = ?", [item_id]).fetchone()
    return json.loads(row[0]) if row else []


def submit_rating_with_answers(db: sqlite_utils.Database, project: str, username: str, item_id: int, score,
                               answers: ItemAnswers, comment: str = "", request_id: str | None = None):
    """The Rate tab's submit: the main score (labeling.submit_rating_and_next) and the answers about the shown
    answer, in one transaction, then the next item. A refused score or answer writes neither."""
    def also(db: sqlite_utils.Database) -> None:
        (response_id,) = _item_responses(db, item_id)  # _rate checked the item: a rating item shows one answer
        _store(db, get_project(db, project).id, require_user(db, username), item_id, response_id, answers,
               replace_all=True)
    return labeling.submit_rating_and_next(db, project, username, item_id, score, comment=comment,
                                           request_id=request_id, also=also)


def submit_ranking_with_answers(db: sqlite_utils.Database, project: str, username: str, item_id: int,
                                order: list[list[int]], answers: dict[int, ItemAnswers], comment: str = "",
                                request_id: str | None = None):
    """The Rank tab's submit: the ranking and the answers about each answer shown (response id -> ItemAnswers;
    answers left out are cleared), in one transaction, then the next item. A refusal writes nothing."""
    if not isinstance(answers, dict):
        raise InputError(f"must map answer ids to answers, got {answers!r}", field="answers")

    def also(db: sqlite_utils.Database) -> None:
        proj, user = get_project(db, project), require_user(db, username)
        shown = _item_responses(db, item_id)
        for response_id in answers:
            if response_id not in shown:
                raise InputError(f"answer {response_id!r} is not shown in item {item_id}", field="response_id")
        for response_id in shown:
            _store(db, proj.id, user, item_id, response_id, answers.get(response_id, ItemAnswers()),
                   replace_all=True)
    return labeling.submit_ranking_and_next(db, project, username, item_id, order, comment=comment,
                                            request_id=request_id, also=also)


def undo_with_answers(db: sqlite_utils.Database, project: str, username: str, kind: str = "rating"):
    """labeling.undo_last_action, and the person's answers about the item it brings back go with its label (their
    answers are asked again with it). Two transactions: answers left by a failed second one are replaced by the
    item's next submit (submit_*_with_answers replace them all)."""
    undone = labeling.undo_last_action(db, project, username, kind)
    if undone is not None and undone.action == "label":
        with write_transaction(db):
            db.execute("DELETE FROM answers WHERE item_id = ? AND user_id = ?",
                       [undone.item_id, require_user(db, username).id])
    return undone


def answers_of(db: sqlite_utils.Database, item_id: int, response_id: int, username: str) -> ItemAnswers:
    """What a person answered about one shown answer (the Rate and Rank tabs show it back after an undo)."""
    rows = db.execute(
        "SELECT a.kind, q.name, a.score, a.text FROM answers a JOIN users u ON u.id = a.user_id"
        " LEFT JOIN questions q ON q.id = a.question_id WHERE a.item_id = ? AND a.response_id = ? AND u.username = ?",
        [item_id, response_id, username]).fetchall()
    texts = {row[0]: row[3] for row in rows if row[0] in TEXT_KINDS}
    return ItemAnswers(
        scores={row[1]: row[2] for row in rows if row[0] == "score"},
        flags=tuple(sorted(row[1] for row in rows if row[0] == "flag")),
        correction=texts.get("correction"), written=texts.get("written"))
