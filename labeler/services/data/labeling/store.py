"""The one writer of the labelling tables (items, assignments, ratings, rankings) and the reads other services
make of them: human rewards, active selection, the arena, chat, the labels import, runs, accounts and the record
browser's corrections go through these functions, inside their own transaction. No queue rules here (queue.py)."""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

import sqlite_utils

from labeler.errors import InputError
from storage import rows_by_ids, write_transaction

Kind = Literal["rating", "ranking"]
KINDS = ("rating", "ranking")
# The source of the `people` measure's answers (people_eval.EVALUATION_SOURCE): an item of them is an evaluation
# item, the one kind of item a held-out prompt's label may be stored on.
EVALUATION_SOURCE = "evaluation"


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


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise InputError(f"must be 'rating' or 'ranking', got {kind!r}", field="kind")


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



def drop_pending_holds(db: sqlite_utils.Database, user_id: int) -> int:
    """A deactivated account's pending assignments go, inside the caller's transaction, so their items return to
    the queue at once rather than after the hold's time; its labels and skips stay. Returns how many."""
    return db.execute("DELETE FROM assignments WHERE user_id = ? AND status = 'pending'", [int(user_id)]).rowcount
