"""Submitting, skipping and undoing labels: a label is stored only for an item its user holds (or may claim),
once per request_id, within the item's overlap."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Literal

import sqlite_utils

from labeler.services.data import accounts, label_kinds
from labeler.errors import InputError, PermissionDenied
from labeler.services.data.labeling.queue import (HOLDS_SLOT, NOW, PENDING_TTL_MINUTES, RUN_ITEM_IDLE_SECONDS,
                                                  QueueItem, fresh, serve_next)
from labeler.services.data.labeling.store import (EVALUATION_SOURCE, Kind, add_assignment, check_kind, drop_assignment,
                                                  insert_ranking)
from labeler.services.data.projects import Project, get_project
from storage import write_transaction

MAX_COMMENT_CHARS = 5_000  # a note on a label, typed by a person


@dataclass(frozen=True)
class LabelResult:
    label_id: int
    created: bool  # False when an identical label was already stored (double click, retry)



def _item_row(db: sqlite_utils.Database, proj: Project, item_id: object, kind: str):
    row = None
    if isinstance(item_id, int) and not isinstance(item_id, bool):
        row = db.execute(
            "SELECT id, kind, prompt_id, response_ids_json, gold_json, priority FROM items"
            " WHERE id = ? AND project_id = ?",
            [item_id, proj.id],
        ).fetchone()
    if row is None:
        raise InputError(f"no item {item_id!r} in project '{proj.name}'", field="item_id")
    if row["kind"] != kind:
        raise InputError(f"item {item_id} is a {row['kind']} item, not a {kind} item", field="item_id")
    return row


def _check_extras(comment: object, seconds: object) -> float | None:
    if not isinstance(comment, str):
        raise InputError("must be text", field="comment")
    if len(comment) > MAX_COMMENT_CHARS:  # a 5 MB comment was once stored, and every export would carry it
        raise InputError(f"{len(comment):,} characters: at most {MAX_COMMENT_CHARS:,}", field="comment")
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds < 0:
        raise InputError(f"must be a non-negative number of seconds, got {seconds!r}", field="seconds")
    return float(seconds)


class ItemUnavailable(InputError):
    """The item can no longer take this user's label (its hold passed to another annotator, its overlap is full,
    they labelled or skipped it already, or its prompt is held out): nothing was stored, and the Rate and Rank
    tabs show the user's next item at once."""


def _check_split(db: sqlite_utils.Database, item) -> None:
    """Refuse a label on a held-out prompt (split 'test': kept for evaluation, never trained on) unless the item is
    an evaluation one, every answer of it an evaluation answer (the `people` measure's blind pairs). Checked when
    the label is stored: a prompt may have become held-out after its items were made."""
    row = db.execute(
        "SELECT p.split, (SELECT COUNT(*) FROM json_each(?) j JOIN responses r ON r.id = j.value"
        " WHERE r.source != ?) AS other FROM prompts p WHERE p.id = ?",
        [item["response_ids_json"], EVALUATION_SOURCE, item["prompt_id"]]).fetchone()
    if row is not None and row["split"] == "test" and row["other"]:
        raise ItemUnavailable(f"item {item['id']}'s prompt is held out for evaluation, so it takes no training "
                              "labels; nothing was stored")


def _hold_words(item) -> str:
    return f"{RUN_ITEM_IDLE_SECONDS} seconds" if item["priority"] > 0 else f"{PENDING_TTL_MINUTES} minutes"


def _take_assignment(db: sqlite_utils.Database, proj: Project, user, item, claim: bool) -> float | None:
    """Mark the user's assignment done, or refuse: the item must be theirs (or free to claim), and the overlap is
    never exceeded, however the user's hold stands (a hold that lapsed looks fresh again once a run releases its
    item to normal priority, when the item may already carry another annotator's label).

    Returns the seconds since the item was last shown to them (None for a claimed item, never shown).
    """
    row = db.execute(
        f"SELECT mine.id, mine.status, {fresh('mine')} AS fresh,"
        " (julianday('now') - julianday(mine.assigned_at)) * 86400.0 AS shown_for"
        " FROM assignments mine JOIN items i ON i.id = mine.item_id WHERE mine.item_id = ? AND mine.user_id = ?",
        [item["id"], user.id],
    ).fetchone()
    others, others_done = db.execute(
        f"SELECT COUNT(*), COALESCE(SUM(a.status = 'done'), 0) FROM assignments a JOIN items i ON i.id = a.item_id"
        f" WHERE a.item_id = ? AND a.user_id != ? AND {HOLDS_SLOT}",
        [item["id"], user.id],
    ).fetchone()
    gold = item["gold_json"] is not None
    full = not gold and others >= proj.overlap
    if row is None:
        if not claim:
            # Also a holder whose idle hold was taken over (the queue then drops their assignment).
            held = (f": another annotator holds it (a hold lapses after {_hold_words(item)} idle); nothing was stored"
                    if others else "")
            raise PermissionDenied(f"item {item['id']} is not assigned to '{user.username}'{held}")
        if full:
            raise ItemUnavailable(f"item {item['id']} already has {proj.overlap} annotator(s); nothing was stored")
        add_assignment(db, item["id"], user.id, "done")
        return None
    if row["status"] == "skipped":
        raise ItemUnavailable(f"item {item['id']} was skipped; it is no longer in your queue")
    if row["status"] == "pending" and not row["fresh"] and full:
        raise ItemUnavailable(f"item {item['id']} was idle for over {_hold_words(item)} and went to another "
                              "annotator; nothing was stored")
    if not gold and others_done >= proj.overlap:
        raise ItemUnavailable(f"item {item['id']} already has the {proj.overlap} label(s) its overlap allows, from "
                              "another annotator who took it after your hold lapsed; nothing was stored")
    db.execute("UPDATE assignments SET status = 'done' WHERE id = ?", [row["id"]])
    return max(0.0, round(row["shown_for"], 2))


def _replay(db: sqlite_utils.Database, table: str, request_id: str, user, item_id: int,
            same=None) -> LabelResult | None:
    """The stored label for a request_id seen before (a retry), or None for a new request. A reused key with
    other content (`same(row)` False) is refused: a retry sends what the first try sent, and acknowledging a
    different score while keeping the first one would tell the client its new label was stored."""
    row = db.execute(f"SELECT * FROM {table} WHERE request_id = ?", [request_id]).fetchone()
    if row is None:
        return None
    if row["user_id"] != user.id or row["item_id"] != item_id:
        raise InputError("this request_id was already used for another label", field="request_id")
    if same is not None and not same(row):
        raise InputError("this request_id was already used for this item with a different label; nothing was "
                         "changed (undo to change a label)", field="request_id")
    return LabelResult(row["id"], created=False)


def _same_order(stored_json: str, order) -> bool:
    stored = json.loads(stored_json)
    try:
        return label_kinds.validate_order(order, [i for group in stored for i in group]) == stored
    except InputError:
        return False


# `seconds` placeholder for the _and_next submits: time it as the span since the item was last shown.
SHOWN = "shown"


def _earlier_label(db: sqlite_utils.Database, table: str, item_id: int, user, same: Callable[[Any], bool],
                   refusal: Callable[[Any], str]) -> LabelResult | None:
    """The user's earlier label of this item, returned again when it equals this one (a double click, a retry
    without request_id), refused (ItemUnavailable: refusal(row)) when it differs; None when there is none."""
    prior = db.execute(f"SELECT * FROM {table} WHERE item_id = ? AND user_id = ?", [item_id, user.id]).fetchone()
    if prior is None:
        return None
    if same(prior):
        return LabelResult(prior["id"], created=False)
    raise ItemUnavailable(refusal(prior))


def _take_item(db: sqlite_utils.Database, proj: Project, user, item, claim: bool,
               seconds: float | str | None) -> float | None:
    """The checks every new label passes (held-out prompt, the user's hold, the overlap), its assignment marked
    done; returns the seconds to store (SHOWN: the time since the item was last shown)."""
    _check_split(db, item)
    shown_for = _take_assignment(db, proj, user, item, claim)
    return shown_for if seconds == SHOWN else seconds


def _rate(db, proj: Project, user, item_id: int, score: float, comment: str, seconds: float | str | None,
          request_id: str | None, claim: bool) -> LabelResult:
    if request_id is not None and (replay := _replay(
            db, "ratings", request_id, user, item_id,
            lambda row: row["score"] == label_kinds.validate_score(score, proj.likert_min, proj.likert_max))):
        return replay
    item = _item_row(db, proj, item_id, "rating")
    score = label_kinds.validate_score(score, proj.likert_min, proj.likert_max)
    if earlier := _earlier_label(db, "ratings", item_id, user, lambda row: row["score"] == score,
                                 lambda row: f"you already rated item {item_id} ({row['score']:g}); undo to change it"):
        return earlier
    seconds = _take_item(db, proj, user, item, claim, seconds)
    (response_id,) = json.loads(item["response_ids_json"])
    cursor = db.execute(
        "INSERT INTO ratings (item_id, response_id, user_id, score, comment, seconds, request_id)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        [item_id, response_id, user.id, score, comment, seconds, request_id],
    )
    return LabelResult(cursor.lastrowid, created=True)


def _rank(db, proj: Project, user, item_id: int, order: list[list[int]], comment: str, seconds: float | str | None,
          request_id: str | None, claim: bool) -> LabelResult:
    if request_id is not None and (replay := _replay(db, "rankings", request_id, user, item_id,
                                                     lambda row: _same_order(row["order_json"], order))):
        return replay
    item = _item_row(db, proj, item_id, "ranking")
    order = label_kinds.validate_order(order, json.loads(item["response_ids_json"]))
    if earlier := _earlier_label(db, "rankings", item_id, user, lambda row: json.loads(row["order_json"]) == order,
                                 lambda row: f"you already ranked item {item_id}; undo to change it"):
        return earlier
    seconds = _take_item(db, proj, user, item, claim, seconds)
    label_id = insert_ranking(db, item_id, item["prompt_id"], user.id, json.dumps(order), comment=comment,
                              seconds=seconds, request_id=request_id)
    return LabelResult(label_id, created=True)


def _submit(db: sqlite_utils.Database, project: str, username: str, store: Callable[..., LabelResult], item_id: int,
            label: Any, comment: str, seconds: float | None, request_id: str | None, *, claim: bool = False,
            next_kind: Kind | None = None, also: Callable[[sqlite_utils.Database], None] | None = None):
    """Every submit's one path: `comment` and `seconds` checked before any write, then
    store(db, proj, user, item_id, label, comment, seconds, request_id, claim) (_rate or _rank) in one transaction.
    With next_kind (the _and_next submits) the label's seconds are the time since the item was shown (SHOWN) and
    the user's next item of that kind follows in the same transaction (one round trip per label for the Rate and
    Rank tabs); `also(db)` (the label's answers to the project's questions) runs in it too, after the label."""
    seconds = _check_extras(comment, seconds)
    if next_kind is not None:
        seconds = SHOWN
    with write_transaction(db):
        proj = get_project(db, project)
        user = accounts.require_user(db, username)
        result = store(db, proj, user, item_id, label, comment, seconds, request_id, claim)
        if also is not None:
            also(db)
        return result if next_kind is None else (result, serve_next(db, proj, user, next_kind))


def submit_rating(
    db: sqlite_utils.Database,
    project: str,
    username: str,
    item_id: int,
    score: float,
    comment: str = "",
    seconds: float | None = None,
    request_id: str | None = None,
    *,
    claim: bool = False,
) -> LabelResult:
    """Store a Likert score for a rating item the user holds.

    claim=True lets a user rate an
    item they were not served (a chat answer rated in place, a PPO rollout opened from the Train tab), as
    long as the item has a free slot.
    """
    return _submit(db, project, username, _rate, item_id, score, comment, seconds, request_id, claim=claim)


def submit_rating_and_next(
    db: sqlite_utils.Database,
    project: str,
    username: str,
    item_id: int,
    score: float,
    comment: str = "",
    request_id: str | None = None,
    also: Callable[[sqlite_utils.Database], None] | None = None,
) -> tuple[LabelResult, QueueItem | None]:
    """submit_rating, then next_item, in one transaction: one round trip per label for the Rate tab. `also(db)`
    writes more in that transaction (the project's questions: questions.submit_rating_with_answers); its error
    writes nothing, the label included.

    `seconds` is the time since the item was last shown (its assignment). A retry of the same request
    (same request_id) stores nothing and returns the same next item, by then the user's pending one.
    """
    return _submit(db, project, username, _rate, item_id, score, comment, None, request_id, next_kind="rating",
                   also=also)


def submit_ranking(
    db: sqlite_utils.Database,
    project: str,
    username: str,
    item_id: int,
    order: list[list[int]],
    comment: str = "",
    seconds: float | None = None,
    request_id: str | None = None,
    *,
    claim: bool = False,
) -> LabelResult:
    """Store a ranking (best to worst, ties share a group) of a ranking item the user holds."""
    return _submit(db, project, username, _rank, item_id, order, comment, seconds, request_id, claim=claim)


def submit_ranking_and_next(
    db: sqlite_utils.Database,
    project: str,
    username: str,
    item_id: int,
    order: list[list[int]],
    comment: str = "",
    request_id: str | None = None,
    also: Callable[[sqlite_utils.Database], None] | None = None,
) -> tuple[LabelResult, QueueItem | None]:
    """submit_ranking, then next_item, in one transaction (see submit_rating_and_next, `also` too)."""
    return _submit(db, project, username, _rank, item_id, order, comment, None, request_id, next_kind="ranking",
                   also=also)


def skip_item(db: sqlite_utils.Database, project: str, username: str, item_id: int) -> None:
    """Pass on an item the user holds: it leaves their queue for good and its slot frees for others."""
    with write_transaction(db):
        proj = get_project(db, project)
        user = accounts.require_user(db, username)
        row = db.execute(
            "SELECT a.id, a.status FROM assignments a JOIN items i ON i.id = a.item_id"
            " WHERE a.item_id = ? AND a.user_id = ? AND i.project_id = ?",
            [item_id, user.id, proj.id],
        ).fetchone()
        if row is None:
            raise PermissionDenied(f"item {item_id} is not assigned to '{username}'")
        if row["status"] == "done":
            raise InputError(f"item {item_id} is already labelled; undo it first", field="item_id")
        if row["status"] != "skipped":
            # assigned_at becomes the time of the skip, so undo_last_action can tell
            # whether a skip or a label came last.
            db.execute(f"UPDATE assignments SET status = 'skipped', assigned_at = {NOW} WHERE id = ?", [row["id"]])


@dataclass(frozen=True)
class Undone:
    item_id: int
    action: Literal["label", "skip"]  # what was taken back: the user's latest label, or their latest skip


def undo_last_action(db: sqlite_utils.Database, project: str, username: str, kind: Kind = "rating") -> Undone | None:
    """Take back the user's latest action of this kind, a label or a skip, and put its item back at the head of
    their queue (as Label Studio's and Argilla's "back" reopens a skipped record too).

    Returns what was undone, or None when there is nothing to undo. The latest label is the highest id; the
    latest skip the newest assigned_at of a skipped assignment (skip_item stamps it). A skip counts as the later
    action only when strictly later than the label: both in the same millisecond, the label goes first.
    """
    check_kind(kind)
    table, only_annotator = ("ratings", "") if kind == "rating" else ("rankings", "AND l.source = 'annotator'")
    with write_transaction(db):
        proj = get_project(db, project)
        user = accounts.require_user(db, username)
        label = db.execute(
            f"SELECT l.id, l.item_id, l.created_at FROM {table} l JOIN items i ON i.id = l.item_id"
            f" WHERE l.user_id = ? AND i.project_id = ? AND i.kind = ? {only_annotator} ORDER BY l.id DESC LIMIT 1",
            [user.id, proj.id, kind],
        ).fetchone()
        skip = db.execute(
            "SELECT a.item_id, a.assigned_at FROM assignments a JOIN items i ON i.id = a.item_id"
            " WHERE a.user_id = ? AND a.status = 'skipped' AND i.project_id = ? AND i.kind = ?"
            " ORDER BY a.assigned_at DESC, a.id DESC LIMIT 1",
            [user.id, proj.id, kind],
        ).fetchone()
        if skip is not None and (label is None or skip["assigned_at"] > label["created_at"]):
            undone = Undone(skip["item_id"], "skip")
        elif label is not None:
            db.execute(f"DELETE FROM {table} WHERE id = ?", [label["id"]])
            undone = Undone(label["item_id"], "label")
        else:
            return None
        # Re-inserted rather than updated: the new, highest id makes it the user's newest pending
        # assignment, which next_item returns first (timestamps can tie within a millisecond).
        drop_assignment(db, undone.item_id, user.id)
        add_assignment(db, undone.item_id, user.id)
        return undone
