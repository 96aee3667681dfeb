"""Annotation queues: items to label, who holds which, submit, skip, undo, gold answers.

An item is one unit of work (a response to rate, or 2-8 responses of a prompt to rank). An assignment
says that a user holds an item: pending (shown), done (labelled) or skipped. The queue rules:

1. A user's own pending assignment comes back first, the newest one first (so a refresh shows the
   same item, and an undone item comes back at once).
2. Otherwise the user gets the highest-priority, oldest item they never held (in any status) that fewer
   than `overlap` users hold: done, or pending for less than PENDING_TTL. A pending assignment older than
   that is stale (the annotator walked away) and its slot goes to someone else. An item a training run waits
   for (priority > 0) is held for RUN_ITEM_IDLE_SECONDS only: the trainer is idle until it is labelled, so an
   annotator who leaves it alone that long loses it to the next one (the Rate/Rank tab renews the hold while
   its user is active on it, keep_holding).
   A page load takes no run item (next_item's run_items=False): opening the app on another tab, or as an
   admin who does not label, once held a run's item until the run gave up on it.
3. Gold items (a known answer, for quality control) are not capped by the overlap: every annotator meets
   each gold item once, in the same order as any other item, or gold accuracy could only be measured for
   the first k annotators. Nothing in a QueueItem tells a gold item apart.

Picking the item and inserting the pending assignment happen in one BEGIN IMMEDIATE transaction, so
two users asking at the same moment are served one after the other and never both get an item with
overlap 1. A submit is idempotent: the same request_id, or the same value for an item already labelled,
returns the stored label with created=False. Every QueueItem carries a fresh request_id for that purpose,
and submit_*_and_next store a label and serve the next item in one transaction (one round trip per label).

Cost: which items are still open and the per-user counts are kept by triggers (storage/migrations.py,
QUEUE_COUNTERS), so serving an item and counting done/remaining do not grow with the number of items.

This module owns items, assignments, ratings and rankings: it is their one writer, and human rewards, active
selection, the arena, chat, the labels import, runs and the record browser's corrections read and change them
through the functions here (a view joining them with other tables says so in its own module docstring).
"""
from __future__ import annotations

import json
import math
import random
import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import sqlite_utils

from labeler.services import label_kinds
from labeler.services.accounts import require_user
from labeler.services.errors import InputError, PermissionDenied
from labeler.services.projects import Project, get_project
from labeler.services.responses import response_prompts, response_rows, response_texts
from storage import rows_by_ids, write_transaction

Kind = Literal["rating", "ranking"]
KINDS = ("rating", "ranking")

# A pending assignment older than this no longer reserves its item (the annotator left the page).
PENDING_TTL_MINUTES = 30
MAX_COMMENT_CHARS = 5_000  # a note on a label, typed by a person
# A ranking of K answers gives up to K(K-1)/2 preference pairs for one read of the prompt: 8 answers give 28
# (4 gave 6), and the Rank tab shows one slot per answer up to MAX_RANKING_SIZE (ui/tabs/rank/item_view.py).
MIN_RANKING_SIZE, MAX_RANKING_SIZE = 2, 8

_NOW = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
_CUTOFF = f"strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-{PENDING_TTL_MINUTES} minutes')"
# An assignment that takes one of an item's `overlap` slots. Timestamps are ISO-8601 text, so they
# compare as strings.
# A run item's pending assignment expires sooner (RUN_ITEM_IDLE_SECONDS); `i` is the item's alias in every query.
RUN_ITEM_IDLE_SECONDS = 60
_RUN_CUTOFF = f"strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-{RUN_ITEM_IDLE_SECONDS} seconds')"


def _fresh(alias: str) -> str:
    """SQL: the pending assignment `alias` still reserves its item (items aliased `i`)."""
    return f"{alias}.assigned_at > (CASE WHEN i.priority > 0 THEN {_RUN_CUTOFF} ELSE {_CUTOFF} END)"


_HOLDS_SLOT = f"(a.status = 'done' OR (a.status = 'pending' AND {_fresh('a')}))"


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


@dataclass(frozen=True)
class LabelResult:
    label_id: int
    created: bool  # False when an identical label was already stored (double click, retry)


def response_ids_json(response_ids: Sequence[int]) -> str:
    """The canonical items.response_ids_json: sorted ids, so the unique index catches duplicates."""
    return json.dumps(sorted(int(r) for r in response_ids))


# The one writer of items, rankings and assignments: other services (arena, chat, human rewards, the labels
# import) and the label edits in records go through these, inside their own transaction.
def insert_item(db: sqlite_utils.Database, project_id: int, kind: str, prompt_id: int, response_ids: Sequence[int],
                *, priority: int = 0, run_id: int | None = None, if_new: bool = False) -> int | None:
    """Insert one item; returns its id. With `if_new`, an existing item with the same responses is kept
    and None is returned (the unique index on project, kind and response ids)."""
    conflict = " ON CONFLICT (project_id, kind, response_ids_json) DO NOTHING" if if_new else ""
    cursor = db.execute(
        "INSERT INTO items (project_id, kind, prompt_id, response_ids_json, priority, run_id) VALUES (?, ?, ?, ?, ?, ?)"
        + conflict,
        [project_id, kind, prompt_id, response_ids_json(response_ids), priority, run_id],
    )
    return cursor.lastrowid if cursor.rowcount else None


def insert_ranking(db: sqlite_utils.Database, item_id: int, prompt_id: int, user_id: int | None, order_json: str,
                   *, source: str = "annotator", comment: str = "", seconds: float | None = None,
                   request_id: str | None = None) -> int:
    """Insert one ranking (user_id None for imported preferences); returns its id."""
    return db.execute(
        "INSERT INTO rankings (item_id, prompt_id, user_id, order_json, comment, seconds, source, request_id)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [item_id, prompt_id, user_id, order_json, comment, seconds, source, request_id],
    ).lastrowid


LABEL_TABLES = {"rating": "ratings", "ranking": "rankings"}


def label_row(db: sqlite_utils.Database, kind: str, label_id: int) -> dict | None:
    """A rating's or a ranking's row as stored (kind 'rating' or 'ranking'), or None."""
    row = db.execute(f"SELECT * FROM {LABEL_TABLES[kind]} WHERE id = ?", [label_id]).fetchone()
    return None if row is None else dict(row)


def set_rating_score(db: sqlite_utils.Database, rating_id: int, score: float) -> None:
    """An admin's correction of a rating, inside the caller's transaction (records writes its audit row)."""
    db.execute("UPDATE ratings SET score = ? WHERE id = ?", [score, rating_id])


def set_ranking_order(db: sqlite_utils.Database, ranking_id: int, order: list[list[int]]) -> None:
    """An admin's correction of a ranking, inside the caller's transaction (records writes its audit row)."""
    db.execute("UPDATE rankings SET order_json = ? WHERE id = ?", [json.dumps(order), ranking_id])


def delete_label_row(db: sqlite_utils.Database, kind: str, label_id: int) -> None:
    """Delete a rating or a ranking, inside the caller's transaction (its assignment is the caller's to drop)."""
    db.execute(f"DELETE FROM {LABEL_TABLES[kind]} WHERE id = ?", [label_id])


def add_assignment(db: sqlite_utils.Database, item_id: int, user_id: int, status: str = "pending") -> None:
    db.execute("INSERT INTO assignments (item_id, user_id, status) VALUES (?, ?, ?)", [item_id, user_id, status])


def drop_assignment(db: sqlite_utils.Database, item_id: int, user_id: int) -> None:
    db.execute("DELETE FROM assignments WHERE item_id = ? AND user_id = ?", [item_id, user_id])


def set_selection_order(db: sqlite_utils.Database, project_id: int, order: Sequence[tuple[int, float, str]]) -> None:
    """Active selection's queue order, inside the caller's transaction: the project's open items lose their old
    score, then each (item id, score, reason) of `order` gets its own."""
    db.execute("UPDATE items SET selection_score = NULL, selection_reason = NULL"
               " WHERE project_id = ? AND is_open = 1 AND selection_score IS NOT NULL", [project_id])
    db.conn.executemany("UPDATE items SET selection_score = ?, selection_reason = ? WHERE id = ?",
                        [(score, reason, item_id) for item_id, score, reason in order])


def release_items(db: sqlite_utils.Database, item_ids: Sequence[int]) -> None:
    """Items a run no longer waits for go back to normal priority, inside the caller's transaction."""
    db.conn.execute(f"UPDATE items SET priority = 0 WHERE id IN ({', '.join('?' * len(item_ids))})",
                    [int(i) for i in item_ids])


def release_ended_run(db: sqlite_utils.Database, run_id: int) -> int:
    """Every item of an ended run back to normal priority, inside the caller's transaction; how many."""
    return db.conn.execute("UPDATE items SET priority = 0 WHERE run_id = ? AND priority > 0", [int(run_id)]).rowcount


# Reads of items and labels for the other services (human rewards, chat, the labels import).
def find_item(db: sqlite_utils.Database, project_id: int, kind: str, response_ids: Sequence[int]) -> int | None:
    """The project's item of this kind over exactly these responses, or None."""
    row = db.execute("SELECT id FROM items WHERE project_id = ? AND kind = ? AND response_ids_json = ?",
                     [project_id, kind, response_ids_json(response_ids)]).fetchone()
    return None if row is None else row[0]


def item_response_ids(db: sqlite_utils.Database, item_ids: Sequence[int]) -> dict[int, list[int]]:
    """{item id: its response ids, sorted} of the items among `item_ids`."""
    return {row[0]: json.loads(row[1]) for row in rows_by_ids(
        db, "SELECT id, response_ids_json FROM items WHERE id IN ({marks})", item_ids)}


def rating_means(db: sqlite_utils.Database, item_ids: Sequence[int]) -> dict[int, tuple[float, int]]:
    """{item id: (mean score, number of ratings)} of the rated items among `item_ids`."""
    return {row[0]: (row[1], row[2]) for row in rows_by_ids(
        db, "SELECT item_id, AVG(score), COUNT(*) FROM ratings WHERE item_id IN ({marks}) GROUP BY item_id", item_ids)}


def ranking_orders(db: sqlite_utils.Database, item_ids: Sequence[int]) -> dict[int, list[list[list[int]]]]:
    """{item id: its rankings' orders (lists of tied groups of response ids), oldest first} among `item_ids`."""
    orders: dict[int, list] = {}
    # An item's rankings all fall in one chunk of rows_by_ids (chunks split the item ids), so ORDER BY id holds.
    for row in rows_by_ids(db, "SELECT item_id, order_json FROM rankings WHERE item_id IN ({marks}) ORDER BY id",
                           item_ids):
        orders.setdefault(row[0], []).append(json.loads(row[1]))
    return orders


def run_of_item(db: sqlite_utils.Database, item_id: int) -> int | None:
    """The training run an item was queued for (None: an ordinary item, or no such item)."""
    row = db.execute("SELECT run_id FROM items WHERE id = ?", [int(item_id)]).fetchone()
    return None if row is None else row[0]


def unreleased_run_items(db: sqlite_utils.Database, run_id: int) -> list[tuple[int, str, list[int]]]:
    """(item id, prompt text, response ids) of the run's items not yet released (priority > 0), oldest first."""
    rows = db.execute("SELECT i.id, p.text, i.response_ids_json FROM items i JOIN prompts p ON p.id = i.prompt_id"
                      " WHERE i.run_id = ? AND i.priority > 0 ORDER BY i.id", [int(run_id)])
    return [(row[0], row[1], json.loads(row[2])) for row in rows]


def label_count(db: sqlite_utils.Database, project_id: int) -> int:
    """Ratings and rankings stored in the project (what a reward model refit learns from)."""
    return db.execute(
        "SELECT (SELECT COUNT(*) FROM ratings r JOIN items i ON i.id = r.item_id WHERE i.project_id = :p)"
        " + (SELECT COUNT(*) FROM rankings k JOIN items i ON i.id = k.item_id WHERE i.project_id = :p)",
        {"p": project_id},
    ).fetchone()[0]


def selectable_items(db: sqlite_utils.Database, project_id: int, limit: int) -> list[tuple[int, str, str, list[int]]]:
    """(item id, kind, prompt text, response ids) of the oldest `limit` open items active selection may order:
    not gold, and no run waits for them (priority 0)."""
    rows = db.execute(
        "SELECT i.id, i.kind, p.text, i.response_ids_json FROM items i JOIN prompts p ON p.id = i.prompt_id"
        " WHERE i.project_id = ? AND i.is_open = 1 AND i.gold_json IS NULL AND i.priority = 0 ORDER BY i.id LIMIT ?",
        [project_id, limit])
    return [(row[0], row[1], row[2], json.loads(row[3])) for row in rows]


def rankings_from(db: sqlite_utils.Database, source: str) -> set[tuple[int, str]]:
    """(item id, order_json) of every ranking stored with this source (the labels import's, say)."""
    return {(row[0], row[1]) for row in db.execute("SELECT item_id, order_json FROM rankings WHERE source = ?", [source])}


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise InputError(f"must be 'rating' or 'ranking', got {kind!r}", field="kind")


# ---------------------------------------------------------------------------------------------
# Creating items


def _group_sizes(n: int, ranking_size: int) -> list[int]:
    """Split n responses into ranking groups of 2..ranking_size, as even as possible.

    5 responses with size 4 -> [3, 2] (not [4, 1]: a group of one cannot be ranked). With size 2 an odd
    response is left out and waits for the prompt's next response.
    """
    if n < 2:
        return []
    if ranking_size == 2:
        return [2] * (n // 2)
    groups = math.ceil(n / ranking_size)
    base, extra = divmod(n, groups)
    return [base + 1] * extra + [base] * (groups - extra)


def _ids_in_items(db: sqlite_utils.Database, project_id: int, kind: str) -> set[int]:
    # json_each rather than string matching, so items written by any code path are recognised.
    rows = db.execute(
        "SELECT j.value FROM items i, json_each(i.response_ids_json) j WHERE i.project_id = ? AND i.kind = ?",
        [project_id, kind],
    ).fetchall()
    return {row[0] for row in rows}


def check_ranking_size(ranking_size) -> None:
    """InputError unless `ranking_size` is a whole number of answers a ranking item may hold."""
    if isinstance(ranking_size, bool) or not isinstance(ranking_size, int) or not (
        MIN_RANKING_SIZE <= ranking_size <= MAX_RANKING_SIZE
    ):
        raise InputError(
            f"must be between {MIN_RANKING_SIZE} and {MAX_RANKING_SIZE}, got {ranking_size!r}", field="ranking_size"
        )


def create_items(
    db: sqlite_utils.Database,
    project: str = "default",
    response_ids: Sequence[int] | None = None,
    ranking_size: int = 4,
    *,
    kinds: Sequence[str] = KINDS,
    priority: int = 0,
    run_id: int | None = None,
) -> int:
    """Create the missing items; returns how many were created.

    Rating items: one per response (of `response_ids`, or of the whole project but its held-out prompts) that has
    none.
    Ranking items: for each prompt concerned, its responses not yet in a ranking item, in groups of
    2..ranking_size; a response is in at most one ranking item. `priority` and `run_id` mark items a
    training run waits on (PPO with human rewards passes kinds=("rating",), a high priority and its run).
    """
    for kind in kinds:
        _check_kind(kind)
    check_ranking_size(ranking_size)
    created = 0
    with write_transaction(db):
        proj = get_project(db, project)
        prompt_of = response_prompts(db, proj.id)
        wanted = None
        if response_ids is not None:
            wanted = {int(r) for r in response_ids}
            unknown = sorted(wanted - set(prompt_of))
            if unknown:
                raise InputError(f"responses {unknown} are not in project '{proj.name}'", field="response_ids")
        if wanted is None:  # held-out prompts are for evaluation: their answers are queued only when named
            held_out = _heldout_prompt_ids(db, proj.id)
            prompt_of = {r: p for r, p in prompt_of.items() if p not in held_out}

        def insert(kind: str, prompt_id: int, ids: list[int]) -> int:
            return insert_item(db, proj.id, kind, prompt_id, ids, priority=priority, run_id=run_id, if_new=True) is not None

        if "rating" in kinds:
            rated = _ids_in_items(db, proj.id, "rating")
            for response_id, prompt_id in prompt_of.items():
                if response_id not in rated and (wanted is None or response_id in wanted):
                    created += insert("rating", prompt_id, [response_id])

        if "ranking" in kinds:
            ranked = _ids_in_items(db, proj.id, "ranking")
            # Older unranked responses of a prompt join the new ones: generating one answer at a time
            # must still end up in rankings.
            unranked: dict[int, list[int]] = {}
            for response_id, prompt_id in prompt_of.items():
                if response_id not in ranked:
                    unranked.setdefault(prompt_id, []).append(response_id)
            prompts = sorted({prompt_of[r] for r in wanted} if wanted is not None else set(unranked))
            for prompt_id in prompts:
                free = unranked.get(prompt_id, [])
                start = 0
                for size in _group_sizes(len(free), ranking_size):
                    created += insert("ranking", prompt_id, free[start : start + size])
                    start += size
    return created


def _heldout_prompt_ids(db: sqlite_utils.Database, project_id: int) -> set[int]:
    """Held-out prompts and retired ones (prompts.RETIRED_SPLIT): their answers are not queued."""
    return {row[0] for row in db.execute("SELECT id FROM prompts WHERE project_id = ? AND split IN ('test', 'retired')",
                                         [project_id])}


def requeue_prompts(db: sqlite_utils.Database, project: str, prompt_ids: Sequence[int]) -> None:
    """After prompts changed split (prompts.change_heldout_share, before any label): their unlabelled items go,
    and items are made again for the answers of those now in training (create_items skips held-out prompts)."""
    ids = sorted({int(i) for i in prompt_ids})
    if not ids:
        return
    proj = get_project(db, project)
    with write_transaction(db):
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            db.execute(f"DELETE FROM items WHERE project_id = ? AND run_id IS NULL AND prompt_id IN ({', '.join('?' * len(chunk))})"
                       " AND id NOT IN (SELECT item_id FROM ratings) AND id NOT IN (SELECT item_id FROM rankings WHERE item_id IS NOT NULL)",
                       [proj.id, *chunk])
    create_items(db, project)


# ---------------------------------------------------------------------------------------------
# The queue


def _own_pending(db: sqlite_utils.Database, proj: Project, user_id: int, kind: str, min_priority: int = 0) -> int | None:
    """The user's pending item to show again, newest first; stale ones taken over are released."""
    rows = db.execute(
        f"""SELECT mine.id, mine.item_id, {_fresh('mine')} AS fresh, i.gold_json IS NOT NULL AS gold,
               (SELECT COUNT(*) FROM assignments a WHERE a.item_id = mine.item_id AND a.user_id != mine.user_id
                  AND {_HOLDS_SLOT}) AS others
            FROM assignments mine JOIN items i ON i.id = mine.item_id
            WHERE mine.user_id = ? AND mine.status = 'pending' AND i.project_id = ? AND i.kind = ? AND i.priority >= ?
            ORDER BY mine.id DESC""",
        [user_id, proj.id, kind, min_priority],
    ).fetchall()
    for row in rows:
        if row["fresh"] or row["gold"] or row["others"] < proj.overlap:
            # Showing it again renews the reservation: the annotator is looking at it now.
            db.execute(f"UPDATE assignments SET assigned_at = {_NOW} WHERE id = ?", [row["id"]])
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
                   OR (SELECT COUNT(*) FROM assignments a WHERE a.item_id = i.id AND {_HOLDS_SLOT}) < :overlap)
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
              AND (SELECT COUNT(*) FROM assignments a WHERE a.item_id = i.id AND {_HOLDS_SLOT}) >= :overlap""",
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


def _next(db: sqlite_utils.Database, proj: Project, user, kind: str, run_items: bool = True) -> QueueItem | None:
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
    _check_kind(kind)
    with write_transaction(db):
        return _next(db, get_project(db, project), require_user(db, username), kind, run_items)


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
        user = require_user(db, username)
        return db.execute(
            f"UPDATE assignments SET assigned_at = {_NOW} WHERE item_id = ? AND user_id = ? AND status = 'pending'"
            " AND item_id IN (SELECT id FROM items WHERE project_id = ? AND priority > 0)",
            [int(item_id), user.id, proj.id]).rowcount > 0


def progress(db: sqlite_utils.Database, project: str, username: str, kind: Kind = "rating") -> tuple[int, int]:
    """(done, remaining) for this user: labelled items, and items still waiting for them (incl. the shown one)."""
    _check_kind(kind)
    proj = get_project(db, project)
    user = require_user(db, username)
    return _progress(db, proj, user.id, kind)


# ---------------------------------------------------------------------------------------------
# Submitting, skipping, undoing


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


def _take_assignment(db: sqlite_utils.Database, proj: Project, user, item, claim: bool) -> float | None:
    """Mark the user's assignment done, or refuse: the item must be theirs (or free to claim).

    Returns the seconds since the item was last shown to them (None for a claimed item, never shown).
    """
    row = db.execute(
        f"SELECT mine.id, mine.status, {_fresh('mine')} AS fresh,"
        " (julianday('now') - julianday(mine.assigned_at)) * 86400.0 AS shown_for"
        " FROM assignments mine JOIN items i ON i.id = mine.item_id WHERE mine.item_id = ? AND mine.user_id = ?",
        [item["id"], user.id],
    ).fetchone()
    others = db.execute(
        "SELECT COUNT(*) FROM assignments a JOIN items i ON i.id = a.item_id"
        f" WHERE a.item_id = ? AND a.user_id != ? AND {_HOLDS_SLOT}",
        [item["id"], user.id],
    ).fetchone()[0]
    full = item["gold_json"] is None and others >= proj.overlap
    if row is None:
        if not claim:
            raise PermissionDenied(f"item {item['id']} is not assigned to '{user.username}'")
        if full:
            raise InputError(f"item {item['id']} already has {proj.overlap} annotator(s)", field="item_id")
        add_assignment(db, item["id"], user.id, "done")
        return None
    if row["status"] == "skipped":
        raise InputError(f"item {item['id']} was skipped; it is no longer in your queue", field="item_id")
    if row["status"] == "pending" and not row["fresh"] and full:
        raise InputError(
            f"item {item['id']} was idle for over "
            + (f"{RUN_ITEM_IDLE_SECONDS} seconds" if item["priority"] > 0 else f"{PENDING_TTL_MINUTES} minutes")
            + " and went to another annotator",
            field="item_id",
        )
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


def _rate(db, proj: Project, user, item_id: int, score: float, comment: str, seconds: float | str | None,
          request_id: str | None, claim: bool) -> LabelResult:
    if request_id is not None and (replay := _replay(
            db, "ratings", request_id, user, item_id,
            lambda row: row["score"] == label_kinds.validate_score(score, proj.likert_min, proj.likert_max))):
        return replay
    item = _item_row(db, proj, item_id, "rating")
    score = label_kinds.validate_score(score, proj.likert_min, proj.likert_max)
    prior = db.execute("SELECT id, score FROM ratings WHERE item_id = ? AND user_id = ?", [item_id, user.id]).fetchone()
    if prior is not None:
        if prior["score"] == score:
            return LabelResult(prior["id"], created=False)
        raise InputError(f"you already rated item {item_id} ({prior['score']:g}); undo to change it", field="score")
    shown_for = _take_assignment(db, proj, user, item, claim)
    (response_id,) = json.loads(item["response_ids_json"])
    cursor = db.execute(
        "INSERT INTO ratings (item_id, response_id, user_id, score, comment, seconds, request_id)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        [item_id, response_id, user.id, score, comment, shown_for if seconds == SHOWN else seconds, request_id],
    )
    return LabelResult(cursor.lastrowid, created=True)


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
    seconds = _check_extras(comment, seconds)
    with write_transaction(db):
        proj = get_project(db, project)
        user = require_user(db, username)
        return _rate(db, proj, user, item_id, score, comment, seconds, request_id, claim)


def submit_rating_and_next(
    db: sqlite_utils.Database,
    project: str,
    username: str,
    item_id: int,
    score: float,
    comment: str = "",
    request_id: str | None = None,
) -> tuple[LabelResult, QueueItem | None]:
    """submit_rating, then next_item, in one transaction: one round trip per label for the Rate tab.

    `seconds` is the time since the item was last shown (its assignment). A retry of the same request
    (same request_id) stores nothing and returns the same next item, by then the user's pending one.
    """
    _check_extras(comment, None)
    with write_transaction(db):
        proj = get_project(db, project)
        user = require_user(db, username)
        result = _rate(db, proj, user, item_id, score, comment, SHOWN, request_id, False)
        return result, _next(db, proj, user, "rating")


def _rank(db, proj: Project, user, item_id: int, order: list[list[int]], comment: str, seconds: float | str | None,
          request_id: str | None, claim: bool) -> LabelResult:
    if request_id is not None and (replay := _replay(db, "rankings", request_id, user, item_id,
                                                     lambda row: _same_order(row["order_json"], order))):
        return replay
    item = _item_row(db, proj, item_id, "ranking")
    order = label_kinds.validate_order(order, json.loads(item["response_ids_json"]))
    order_json = json.dumps(order)
    prior = db.execute(
        "SELECT id, order_json FROM rankings WHERE item_id = ? AND user_id = ?", [item_id, user.id]
    ).fetchone()
    if prior is not None:
        if json.loads(prior["order_json"]) == order:
            return LabelResult(prior["id"], created=False)
        raise InputError(f"you already ranked item {item_id}; undo to change it", field="order")
    shown_for = _take_assignment(db, proj, user, item, claim)
    label_id = insert_ranking(db, item_id, item["prompt_id"], user.id, order_json, comment=comment,
                              seconds=shown_for if seconds == SHOWN else seconds, request_id=request_id)
    return LabelResult(label_id, created=True)


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
    seconds = _check_extras(comment, seconds)
    with write_transaction(db):
        proj = get_project(db, project)
        user = require_user(db, username)
        return _rank(db, proj, user, item_id, order, comment, seconds, request_id, claim)


def submit_ranking_and_next(
    db: sqlite_utils.Database,
    project: str,
    username: str,
    item_id: int,
    order: list[list[int]],
    comment: str = "",
    request_id: str | None = None,
) -> tuple[LabelResult, QueueItem | None]:
    """submit_ranking, then next_item, in one transaction (see submit_rating_and_next)."""
    _check_extras(comment, None)
    with write_transaction(db):
        proj = get_project(db, project)
        user = require_user(db, username)
        result = _rank(db, proj, user, item_id, order, comment, SHOWN, request_id, False)
        return result, _next(db, proj, user, "ranking")


def skip_item(db: sqlite_utils.Database, project: str, username: str, item_id: int) -> None:
    """Pass on an item the user holds: it leaves their queue for good and its slot frees for others."""
    with write_transaction(db):
        proj = get_project(db, project)
        user = require_user(db, username)
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
            # assigned_at becomes the time of the skip, so undo_last_action can tell whether a skip or a label came last.
            db.execute(f"UPDATE assignments SET status = 'skipped', assigned_at = {_NOW} WHERE id = ?", [row["id"]])


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
    _check_kind(kind)
    table, only_annotator = ("ratings", "") if kind == "rating" else ("rankings", "AND l.source = 'annotator'")
    with write_transaction(db):
        proj = get_project(db, project)
        user = require_user(db, username)
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


def item_on_scale(db: sqlite_utils.Database, item_id: int) -> sqlite3.Row | None:
    """The item's kind and response_ids_json with its project's likert_min and likert_max, or None."""
    return db.execute("SELECT i.kind, i.response_ids_json, p.likert_min, p.likert_max FROM items i"
                      " JOIN projects p ON p.id = i.project_id WHERE i.id = ?", [item_id]).fetchone()


def set_gold(db: sqlite_utils.Database, item_id: int, gold: dict | None) -> None:
    """Give an item a known answer ({"score": s} or {"order": [[id], ...]}), or None to clear it."""
    with write_transaction(db):
        item = item_on_scale(db, item_id)
        if item is None:
            raise InputError(f"no item {item_id!r}", field="item_id")
        gold_json = None
        if gold is not None:
            canonical = label_kinds.validate_gold(
                item["kind"], gold, json.loads(item["response_ids_json"]), item["likert_min"], item["likert_max"]
            )
            gold_json = json.dumps(canonical)
        db.execute("UPDATE items SET gold_json = ? WHERE id = ?", [gold_json, item_id])


# The items a training run still waits for: its rating and ranking items without a label, and not yet released
# (HumanRewardQueue.release sets priority 0 when the run stops waiting: the labels came, a timeout skipped them,
# and release_run_items when the run ends). The Rate/Rank banners, the Train tab and human_reward all count this.
WAITING_FOR_RUN = ("i.run_id = ? AND i.priority > 0"
                   " AND NOT EXISTS (SELECT 1 FROM ratings r WHERE r.item_id = i.id)"
                   " AND NOT EXISTS (SELECT 1 FROM rankings k WHERE k.item_id = i.id)")


def waiting_for_run(db: sqlite_utils.Database, run_id: int, kind: str | None = None) -> int:
    """How many labels a run still waits for (the UI's "a training run waits for N labels"), of one kind or all."""
    only_kind = "" if kind is None else " AND i.kind = ?"
    return db.execute(f"SELECT COUNT(*) FROM items i WHERE {WAITING_FOR_RUN}{only_kind}",
                      [int(run_id), *([kind] if kind else [])]).fetchone()[0]


def release_run_items(db: sqlite_utils.Database, run_id: int) -> int:
    """The run no longer waits for any label (it finished, failed or was cancelled): its items go back to normal
    priority at once, so they stop jumping the queue and no banner claims people for it. Returns how many."""
    with write_transaction(db):
        return release_ended_run(db, run_id)


def item_detail(db: sqlite_utils.Database, item_id: int) -> dict:
    """One item as an admin sees it: kind, prompt text, [(response id, text)], gold_json, and why the queue serves
    it where it does (selection_reason: active selection's words, None under arrival order)."""
    row = db.execute(
        "SELECT i.kind, i.response_ids_json, i.gold_json, i.selection_reason, p.text FROM items i"
        " JOIN prompts p ON p.id = i.prompt_id WHERE i.id = ?",
        [item_id],
    ).fetchone()
    if row is None:
        raise InputError(f"no item {item_id}", field="item_id")
    ids = json.loads(row["response_ids_json"])
    texts = response_texts(db, ids)
    return {"kind": row["kind"], "prompt": row["text"], "responses": [(i, texts[i]) for i in ids],
            "gold_json": row["gold_json"], "selection_reason": row["selection_reason"]}
