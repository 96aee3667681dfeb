"""The record browser: prompts with their answers and every label on them, as Argilla and
Label Studio show them; and an admin's corrections, each kept in `label_audit`.

A record is one prompt: its answers (responses) and the labels on them (ratings of one answer, rankings of
several). `list_records` filters and pages with LIMIT/OFFSET over prompts in id order; every filter is an
EXISTS on indexed columns (prompts by project/split/source, responses by prompt, ratings by response and user,
rankings and items by prompt), and the per-row counts are computed for the page's rows only.

Correcting or deleting a label changes the label table itself (exports, agreement and training read it), so
the audit row, written in the same transaction, holds the label as it was and as it became. The labels are
changed through `labeling`, their one writer; this module writes only `label_audit`. Its reads are the
browser's view (prompts joined with their answers, items, labels and annotators), kept here.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Literal

import sqlite_utils

from labeler.services.data import label_kinds, labeling
from labeler.services.data.accounts import get_user, list_users, require_admin
from labeler.errors import InputError
from labeler.services.data.projects import get_project, list_projects
from labeler.services.data.prompts import prompt_column_values
from storage import write_transaction

LabelState = Literal["any", "unlabelled", "labelled", "gold"]
LABEL_STATES: tuple[str, ...] = ("any", "unlabelled", "labelled", "gold")
LABEL_KINDS = ("rating", "ranking")
MAX_PAGE_SIZE = 200


@dataclass(frozen=True)
class RecordFilters:
    """What the browser's filter row sends. Empty strings and None mean "no filter"."""

    project: str = "default"
    search: str = field(default="", metadata={"help": "text in the prompt or one of its answers"})
    annotator: str | None = field(default=None, metadata={"help": "only prompts this user labelled"})
    label_state: LabelState = field(default="any", metadata={"help": "any, unlabelled, labelled or gold"})
    min_score: float | None = field(default=None, metadata={"help": "some rating of an answer is >= this"})
    max_score: float | None = field(default=None, metadata={"help": "... and <= this"})
    split: str | None = field(default=None, metadata={"help": "train or test"})
    source: str | None = field(default=None, metadata={"help": "the prompt's source (file name, 'shipped', ...)"})

    def __post_init__(self):
        if self.label_state not in LABEL_STATES:
            raise InputError(f"must be one of {', '.join(LABEL_STATES)}, got {self.label_state!r}", field="label_state")
        for name in ("min_score", "max_score"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (int, float)) or not math.isfinite(value)):
                raise InputError(f"must be a number, got {value!r}", field=name)
        if self.min_score is not None and self.max_score is not None and self.min_score > self.max_score:
            raise InputError(f"min_score {self.min_score:g} is above max_score {self.max_score:g}", field="min_score")


@dataclass(frozen=True)
class RecordPage:
    rows: list[dict]
    total: int
    page: int
    pages: int


def _like(text: str) -> str:
    # The user's % and _ are literal characters, not wildcards.
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


# A prompt's labels: ratings of its answers, rankings on it (arena votes and imports included).
_HAS_RATING = "EXISTS (SELECT 1 FROM responses s JOIN ratings r ON r.response_id = s.id WHERE s.prompt_id = p.id{})"
_HAS_RANKING = "EXISTS (SELECT 1 FROM rankings k WHERE k.prompt_id = p.id{})"


def _where(db: sqlite_utils.Database, filters: RecordFilters) -> tuple[str, list]:
    project_id = get_project(db, filters.project).id
    clauses, params = ["p.project_id = ?"], [project_id]
    if filters.split:
        clauses.append("p.split = ?")
        params.append(filters.split)
    if filters.source:
        clauses.append("p.source = ?")
        params.append(filters.source)
    search = (filters.search or "").strip()
    if search:
        clauses.append(
            "(p.text LIKE ? ESCAPE '\\' OR EXISTS (SELECT 1 FROM responses s WHERE s.prompt_id = p.id"
            " AND s.text LIKE ? ESCAPE '\\'))"
        )
        params += [_like(search), _like(search)]
    if filters.annotator:
        user = get_user(db, filters.annotator)
        if user is None:
            raise InputError(f"no user {filters.annotator!r}", field="annotator")
        # Not correlated: the user's labelled prompts are collected once (ratings_user, rankings_user), instead
        # of walking all of a prolific annotator's labels again for every prompt.
        clauses.append(
            "p.id IN (SELECT s.prompt_id FROM ratings r JOIN responses s ON s.id = r.response_id WHERE r.user_id = ?"
            " UNION SELECT k.prompt_id FROM rankings k WHERE k.user_id = ?)"
        )
        params += [user.id, user.id]
    if filters.label_state == "unlabelled":
        clauses.append(f"NOT {_HAS_RATING.format('')} AND NOT {_HAS_RANKING.format('')}")
    elif filters.label_state == "labelled":
        clauses.append(f"({_HAS_RATING.format('')} OR {_HAS_RANKING.format('')})")
    elif filters.label_state == "gold":
        clauses.append("EXISTS (SELECT 1 FROM items i WHERE i.prompt_id = p.id AND i.gold_json IS NOT NULL)")
    if filters.min_score is not None or filters.max_score is not None:
        low = -math.inf if filters.min_score is None else float(filters.min_score)
        high = math.inf if filters.max_score is None else float(filters.max_score)
        clauses.append(_HAS_RATING.format(" AND r.score BETWEEN ? AND ?"))
        params += [low, high]
    return " AND ".join(clauses), params


def list_records(db: sqlite_utils.Database, filters: RecordFilters, page: int = 1, page_size: int = 20) -> RecordPage:
    """One page of prompts matching `filters`, oldest first, with their answer and label counts."""
    if not isinstance(page, int) or page < 1:
        raise InputError(f"must be a whole number from 1, got {page!r}", field="page")
    if not isinstance(page_size, int) or not 1 <= page_size <= MAX_PAGE_SIZE:
        raise InputError(f"must be between 1 and {MAX_PAGE_SIZE}, got {page_size!r}", field="page_size")
    where, params = _where(db, filters)
    total = db.execute(f"SELECT COUNT(*) FROM prompts p WHERE {where}", params).fetchone()[0]
    pages = max(1, math.ceil(total / page_size))
    rows = db.execute(
        f"""SELECT p.id, p.text, p.split, p.source,
               (SELECT COUNT(*) FROM responses s WHERE s.prompt_id = p.id) AS answers,
               (SELECT COUNT(*) FROM responses s JOIN ratings r ON r.response_id = s.id WHERE s.prompt_id = p.id)
                   AS ratings,
               (SELECT AVG(r.score) FROM responses s JOIN ratings r ON r.response_id = s.id WHERE s.prompt_id = p.id)
                   AS mean_score,
               (SELECT COUNT(*) FROM rankings k WHERE k.prompt_id = p.id) AS rankings,
               EXISTS (SELECT 1 FROM items i WHERE i.prompt_id = p.id AND i.gold_json IS NOT NULL) AS gold
            FROM (SELECT p.id FROM prompts p WHERE {where} ORDER BY p.id LIMIT ? OFFSET ?) AS page
            JOIN prompts p ON p.id = page.id ORDER BY p.id""",
        [*params, page_size, (page - 1) * page_size],
    ).fetchall()
    out = []
    for row in rows:
        record = dict(row)
        record["gold"] = bool(record["gold"])
        record["mean_score"] = None if record["mean_score"] is None else round(record["mean_score"], 2)
        out.append(record)
    return RecordPage(out, total, page, pages)


def record_detail(db: sqlite_utils.Database, prompt_id: int) -> dict:
    """One prompt with its answers, its items (gold included) and every label on it, each with its annotator."""
    prompt = db.execute("SELECT id, text, split, source, created_at FROM prompts WHERE id = ?", [prompt_id]).fetchone()
    if prompt is None:
        raise InputError(f"no prompt {prompt_id!r}", field="prompt_id")
    answers = [dict(r) for r in db.execute(
        "SELECT id, text, model, source FROM responses WHERE prompt_id = ? ORDER BY id", [prompt_id])]
    ratings = [dict(r) for r in db.execute(
        "SELECT r.id, r.item_id, r.response_id, u.username, r.score, r.comment, r.created_at FROM responses s"
        " JOIN ratings r ON r.response_id = s.id LEFT JOIN users u ON u.id = r.user_id WHERE s.prompt_id = ?"
        " ORDER BY r.id", [prompt_id])]
    rankings = []
    for r in db.execute(
        "SELECT k.id, k.item_id, u.username, k.order_json, k.source, k.comment, k.created_at FROM rankings k"
        " LEFT JOIN users u ON u.id = k.user_id WHERE k.prompt_id = ? ORDER BY k.id", [prompt_id]
    ):
        ranking = dict(r)
        ranking["order"] = json.loads(ranking.pop("order_json"))
        rankings.append(ranking)
    items = []
    for r in db.execute("SELECT id, kind, response_ids_json, gold_json FROM items WHERE prompt_id = ? ORDER BY id",
                        [prompt_id]):
        items.append({"id": r["id"], "kind": r["kind"], "response_ids": json.loads(r["response_ids_json"]),
                      "gold": json.loads(r["gold_json"]) if r["gold_json"] else None})
    return {**dict(prompt), "answers": answers, "ratings": ratings, "rankings": rankings, "items": items}


def _label_row(db: sqlite_utils.Database, kind: str, label_id: int) -> dict:
    if kind not in LABEL_KINDS:
        raise InputError(f"must be rating or ranking, got {kind!r}", field="kind")
    row = labeling.label_row(db, kind, label_id)
    if row is None:
        raise InputError(f"no {kind} {label_id!r}", field="label_id")
    return row


def _audit(db, kind: str, before: dict, after: dict | None, action: str, admin_id: int, reason: str) -> None:
    db.execute(
        "INSERT INTO label_audit (label_kind, label_id, item_id, action, before_json, after_json, reason, user_id)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [kind, before["id"], before["item_id"], action, json.dumps(before, sort_keys=True),
         None if after is None else json.dumps(after, sort_keys=True), reason or "", admin_id],
    )


def correct_label(
    db: sqlite_utils.Database, admin: str, kind: str, label_id: int, value: object, reason: str = ""
) -> dict:
    """Replace a rating's score (value: a number on the project's scale) or a ranking's order (value: groups
    of response ids, best first) and record the change. Returns the label as it is now."""
    with write_transaction(db):
        user = require_admin(db, admin)
        before = _label_row(db, kind, label_id)
        item = labeling.item_on_scale(db, before["item_id"])
        if kind == "rating":
            score = label_kinds.validate_score(value, item["likert_min"], item["likert_max"], field="score")
            labeling.set_rating_score(db, label_id, score)
        else:
            order = label_kinds.validate_order(value, json.loads(item["response_ids_json"]), field="order")
            labeling.set_ranking_order(db, label_id, order)
        after = _label_row(db, kind, label_id)
        _audit(db, kind, before, after, "correct", user.id, reason)
    return after


def delete_label(db: sqlite_utils.Database, admin: str, kind: str, label_id: int, reason: str = "") -> None:
    """Delete a label and record it. The annotator's assignment goes with it, so the queue counters stay right
    and the item is open again (to them and others) when it needs more labels."""
    with write_transaction(db):
        user = require_admin(db, admin)
        before = _label_row(db, kind, label_id)
        labeling.delete_label_row(db, kind, label_id)
        if before["user_id"] is not None:
            labeling.drop_assignment(db, before["item_id"], before["user_id"])
        _audit(db, kind, before, None, "delete", user.id, reason)


def mark_gold(db: sqlite_utils.Database, admin: str, item_id: int, gold: dict | None) -> None:
    """An admin gives an item of the record its known answer (or clears it) from the browser."""
    require_admin(db, admin)
    labeling.set_gold(db, item_id, gold)


def audit_log(db: sqlite_utils.Database, limit: int = 50) -> list[dict]:
    """The newest corrections first, with who made them."""
    rows = db.execute(
        "SELECT a.id, a.created_at, u.username AS admin, a.action, a.label_kind, a.label_id, a.item_id,"
        " a.before_json, a.after_json, a.reason FROM label_audit a LEFT JOIN users u ON u.id = a.user_id"
        " ORDER BY a.id DESC LIMIT ?", [limit]).fetchall()
    out = []
    for row in rows:
        entry = dict(row)
        entry["before"] = json.loads(entry.pop("before_json"))
        entry["after"] = json.loads(entry["after_json"]) if entry["after_json"] else None
        entry.pop("after_json")
        out.append(entry)
    return out


def filter_choices(db: sqlite_utils.Database, project: str) -> dict[str, list[str]]:
    """The values the browser's dropdowns offer: projects, annotators with labels, splits and sources."""
    project_id = get_project(db, project).id
    return {
        "projects": [p.name for p in list_projects(db)],
        "annotators": sorted(user.username for user in list_users(db)),
        "splits": prompt_column_values(db, project_id, "split"),
        "sources": prompt_column_values(db, project_id, "source"),
    }
