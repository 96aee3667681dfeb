"""The queue and its holds: which item a user sees next, who holds which item (a pending assignment), how long a
hold lasts, and each user's progress (the rules are in labeling's package docstring)."""
from __future__ import annotations

import json
import random
import uuid
from dataclasses import dataclass

import sqlite_utils

from labeler.services.data import accounts
from labeler.services.data.labeling.store import EVALUATION_SOURCE, Kind, add_assignment, check_kind
from labeler.services.data.projects import Project, get_project
from labeler.services.data.responses import response_rows
from storage import write_transaction

# A pending assignment older than this no longer reserves its item (the annotator left the page).
PENDING_TTL_MINUTES = 30


NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
_CUTOFF = f"strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-{PENDING_TTL_MINUTES} minutes')"
# An assignment that takes one of an item's `overlap` slots. Timestamps are ISO-8601 text, so they
# compare as strings.
# A run item's pending assignment expires sooner (RUN_ITEM_IDLE_SECONDS); `i` is the item's alias in every query.
RUN_ITEM_IDLE_SECONDS = 60
_RUN_CUTOFF = f"strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-{RUN_ITEM_IDLE_SECONDS} seconds')"


def fresh(alias: str) -> str:
    """SQL: the pending assignment `alias` still reserves its item (items aliased `i`)."""
    return f"{alias}.assigned_at > (CASE WHEN i.priority > 0 THEN {_RUN_CUTOFF} ELSE {_CUTOFF} END)"


HOLDS_SLOT = f"(a.status = 'done' OR (a.status = 'pending' AND {fresh('a')}))"
# SQL: item `i` is on a held-out prompt and not an evaluation item, so it takes no label (labeling.submit refuses
# one): the queue serves it to nobody. Such items remain only where a prompt was held out after some were labelled.
HELD_OUT = ("EXISTS (SELECT 1 FROM prompts hp WHERE hp.id = i.prompt_id AND hp.split = 'test')"
            " AND EXISTS (SELECT 1 FROM json_each(i.response_ids_json) j JOIN responses r ON r.id = j.value"
            f" WHERE r.source != '{EVALUATION_SOURCE}')")


@dataclass(frozen=True)
class QueueItem:
    item_id: int
    kind: str
    prompt: str
    prompt_id: int
    responses: list[dict]  # [{"id", "text", "model"}]; shuffled per (item, user) for a ranking
    guidelines: str
    likert_min: int
    likert_max: int
    run_id: int | None  # set when a training run (PPO with human rewards) waits on this label
    done: int
    remaining: int
    # The idempotency key of a submit for this showing: the client sends it back with the label, so a retried
    # or doubled request stores one label (LabelResult.created=False the second time).
    request_id: str = ""



def _own_pending(db: sqlite_utils.Database, proj: Project, user_id: int, kind: str, min_priority: int = 0) -> int | None:
    """The user's pending item to show again, newest first; stale ones taken over are released."""
    rows = db.execute(
        f"""SELECT mine.id, mine.item_id, {fresh('mine')} AS fresh, i.gold_json IS NOT NULL AS gold, {HELD_OUT} AS held_out,
               (SELECT COUNT(*) FROM assignments a WHERE a.item_id = mine.item_id AND a.user_id != mine.user_id
                  AND {HOLDS_SLOT}) AS others
            FROM assignments mine JOIN items i ON i.id = mine.item_id
            WHERE mine.user_id = ? AND mine.status = 'pending' AND i.project_id = ? AND i.kind = ? AND i.priority >= ?
            ORDER BY mine.id DESC""",
        [user_id, proj.id, kind, min_priority],
    ).fetchall()
    for row in rows:
        if row["held_out"]:  # its prompt was held out since it was shown: it takes no label now
            db.execute("DELETE FROM assignments WHERE id = ?", [row["id"]])
            continue
        if row["fresh"] or row["gold"] or row["others"] < proj.overlap:
            # Showing it again renews the reservation: the annotator is looking at it now.
            db.execute(f"UPDATE assignments SET assigned_at = {NOW} WHERE id = ?", [row["id"]])
            return row["item_id"]
        # Stale and its slot went to others meanwhile: the item is no longer this user's.
        db.execute("DELETE FROM assignments WHERE id = ?", [row["id"]])
    return None


# The queue's order within a priority, by the project's selection (projects.SELECTIONS), and the partial index
# of open items that walks it: 'uncertainty' serves the highest selection_score first (active_learning writes it).
_QUEUE_ORDER = {
    "arrival": ("items_open_queue", "i.priority DESC, i.id"),
    "uncertainty": ("items_open_selection", "i.priority DESC, i.selection_score DESC, i.id"),
}


def _claim_new(db: sqlite_utils.Database, proj: Project, user_id: int, kind: str, min_priority: int = 0,
               max_priority: int | None = None) -> int | None:
    """Reserve the first open item, in the project's queue order, that this user never held and that still has
    a free slot.

    The walk runs on a partial index of open items, so full items cost nothing; it passes over only the items
    this user skipped or labelled that are still open, and those that others' fresh reservations fill.
    `max_priority` 0 passes over the items a run waits for.
    """
    index, order = _QUEUE_ORDER[proj.selection]
    below = "" if max_priority is None else f" AND i.priority <= {int(max_priority)}"
    row = db.execute(
        f"""SELECT i.id FROM items i INDEXED BY {index}
            WHERE i.project_id = :project AND i.kind = :kind AND i.is_open = 1 AND i.priority >= :min_priority{below}
              AND NOT EXISTS (SELECT 1 FROM assignments m WHERE m.item_id = i.id AND m.user_id = :user)
              AND (i.gold_json IS NOT NULL
                   OR (SELECT COUNT(*) FROM assignments a WHERE a.item_id = i.id AND {HOLDS_SLOT}) < :overlap)
              AND NOT ({HELD_OUT})
            ORDER BY {order} LIMIT 1""",
        {"project": proj.id, "kind": kind, "user": user_id, "overlap": proj.overlap, "min_priority": min_priority},
    ).fetchone()
    if row is None:
        return None
    add_assignment(db, row[0], user_id)
    return row[0]


def _progress(db: sqlite_utils.Database, proj: Project, user_id: int, kind: str) -> tuple[int, int]:
    """(done, remaining) from the counters the triggers keep (storage/migrations.py, QUEUE_COUNTERS).

    remaining = open items - open items this user labelled or skipped - open items they never held that
    others' fresh reservations fill. The last term reads only pending assignments (about one per active
    annotator), so nothing here grows with the number of items.
    """
    open_items = db.execute(
        "SELECT open_items FROM queue_counts WHERE project_id = ? AND kind = ?", [proj.id, kind]
    ).fetchone()
    mine = db.execute(
        "SELECT done, held_open FROM user_progress WHERE user_id = ? AND project_id = ? AND kind = ?",
        [user_id, proj.id, kind],
    ).fetchone()
    blocked = db.execute(
        # CROSS JOIN keeps the fresh reservations as the outer loop: otherwise SQLite may prefer walking every
        # open item of the project (items_open_queue), 10 ms at 100k items.
        f"""SELECT COUNT(DISTINCT i.id) FROM assignments p INDEXED BY assignments_pending CROSS JOIN items i
            WHERE p.status = 'pending' AND p.assigned_at > {_CUTOFF} AND i.id = p.item_id
              AND i.project_id = :project AND i.kind = :kind AND i.is_open = 1 AND i.gold_json IS NULL
              AND NOT EXISTS (SELECT 1 FROM assignments m WHERE m.item_id = i.id AND m.user_id = :user)
              AND (SELECT COUNT(*) FROM assignments a WHERE a.item_id = i.id AND {HOLDS_SLOT}) >= :overlap""",
        {"project": proj.id, "kind": kind, "user": user_id, "overlap": proj.overlap},
    ).fetchone()[0]
    done, held_open = (mine["done"], mine["held_open"]) if mine else (0, 0)
    return done, (open_items[0] if open_items else 0) - held_open - blocked


def _queue_item(db: sqlite_utils.Database, proj: Project, user_id: int, item_id: int) -> QueueItem:
    item = db.execute(
        "SELECT i.id, i.kind, i.prompt_id, i.response_ids_json, i.run_id, p.text"
        " FROM items i JOIN prompts p ON p.id = i.prompt_id WHERE i.id = ?",
        [item_id],
    ).fetchone()
    ids = json.loads(item["response_ids_json"])
    by_id = {row["id"]: {"id": row["id"], "text": row["text"], "model": row["model"]}
             for row in response_rows(db, ids).values()}
    responses = [by_id[r] for r in ids if r in by_id]  # a deleted response drops out, the rest stay
    if item["kind"] == "ranking":
        # Position bias is real (annotators favour the first answer); a per-(item, user) seed shuffles
        # each annotator differently yet shows the same order after a refresh. str seeds are stable.
        random.Random(f"{item_id}:{user_id}").shuffle(responses)
    done, remaining = _progress(db, proj, user_id, item["kind"])
    return QueueItem(
        item_id=item["id"],
        kind=item["kind"],
        prompt=item["text"],
        prompt_id=item["prompt_id"],
        responses=responses,
        guidelines=proj.guidelines_for(item["kind"]),
        likert_min=proj.likert_min,
        likert_max=proj.likert_max,
        run_id=item["run_id"],
        done=done,
        remaining=remaining,
        request_id=uuid.uuid4().hex,
    )


def serve_next(db: sqlite_utils.Database, proj: Project, user, kind: str, run_items: bool = True) -> QueueItem | None:
    # Answers a training run waits for (priority > 0) come before anything else, even an item this user reserved
    # earlier: the trainer is idle until they are labelled. The reserved item comes back right after.
    # Without run_items (a page load) no new run item is taken: the user may not be on this tab at all.
    if run_items:
        item_id = (_own_pending(db, proj, user.id, kind, min_priority=1)
                   or _claim_new(db, proj, user.id, kind, min_priority=1)
                   or _own_pending(db, proj, user.id, kind) or _claim_new(db, proj, user.id, kind))
    else:
        item_id = _own_pending(db, proj, user.id, kind) or _claim_new(db, proj, user.id, kind, max_priority=0)
    if item_id is None:
        return None
    return _queue_item(db, proj, user.id, item_id)


def next_item(db: sqlite_utils.Database, project: str, username: str, kind: Kind = "rating",
              *, run_items: bool = True) -> QueueItem | None:
    """The item to show this user now (None when their queue is empty); reserves it for them. run_items=False
    (a page load: the user may be on another tab, or an admin who does not label) takes no item a training run
    waits for that the user does not already hold."""
    check_kind(kind)
    with write_transaction(db):
        return serve_next(db, get_project(db, project), accounts.require_user(db, username), kind, run_items)


def keep_holding(db: sqlite_utils.Database, project: str, username: str, item_id: int) -> bool:
    """The user is active on the run item they were shown: renew its hold (RUN_ITEM_IDLE_SECONDS). False (and
    nothing changed) unless it is their pending assignment of an item a run waits for in this project."""
    proj = get_project(db, project)
    # A read first: the Rate/Rank tabs ask every few seconds per annotator, almost always about an ordinary item,
    # and a write transaction each time would queue behind (and hold up) people's labels.
    if db.execute("SELECT 1 FROM items WHERE id = ? AND project_id = ? AND priority > 0",
                  [int(item_id), proj.id]).fetchone() is None:
        return False
    with write_transaction(db):
        user = accounts.require_user(db, username)
        return db.execute(
            f"UPDATE assignments SET assigned_at = {NOW} WHERE item_id = ? AND user_id = ? AND status = 'pending'"
            " AND item_id IN (SELECT id FROM items WHERE project_id = ? AND priority > 0)",
            [int(item_id), user.id, proj.id]).rowcount > 0


def progress(db: sqlite_utils.Database, project: str, username: str, kind: Kind = "rating") -> tuple[int, int]:
    """(done, remaining) for this user: labelled items, and items still waiting for them (incl. the shown one)."""
    check_kind(kind)
    proj = get_project(db, project)
    user = accounts.require_user(db, username)
    return _progress(db, proj, user.id, kind)
