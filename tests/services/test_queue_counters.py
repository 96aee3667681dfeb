"""The incremental queue counters (items.is_open, queue_counts, user_progress: storage/migrations.py) agree with
a recount from the raw tables after any sequence of serving, labelling, skipping, undoing, gold marking,
overlap changes, arena votes and deletions."""
from __future__ import annotations

import json
import random

import pytest
from labeling_helpers import add_prompt, make_users, set_overlap

from labeler.services.data import labeling
from labeler.errors import InputError, PermissionDenied
from labeler.services.data.labeling.queue import HOLDS_SLOT

P = "default"
USERS = ["ann", "ben", "cat"]


def recount_open(db) -> dict[int, int]:
    """is_open from scratch: not an arena vote, and gold or fewer done labels than the overlap."""
    return dict(db.execute(
        """SELECT i.id, CASE
               WHEN EXISTS (SELECT 1 FROM rankings r WHERE r.item_id = i.id AND r.source = 'arena') THEN 0
               WHEN i.gold_json IS NOT NULL THEN 1
               WHEN (SELECT COUNT(*) FROM assignments a WHERE a.item_id = i.id AND a.status = 'done') < p.overlap THEN 1
               ELSE 0 END
           FROM items i JOIN projects p ON p.id = i.project_id"""
    ).fetchall())


def recount_progress(db, username: str, kind: str) -> tuple[int, int]:
    """(done, remaining) the slow way, as the queue defined them before the counters: labelled items, and
    items never held that still have a free slot (done or fresh reservations) plus the user's own pending."""
    user_id = db.execute("SELECT id FROM users WHERE username = ?", [username]).fetchone()[0]
    params = {"user": user_id, "kind": kind, "overlap": db.execute("SELECT overlap FROM projects").fetchone()[0]}
    done = db.execute(
        "SELECT COUNT(*) FROM assignments a JOIN items i ON i.id = a.item_id"
        " WHERE a.user_id = :user AND a.status = 'done' AND i.kind = :kind", params,
    ).fetchone()[0]
    available = db.execute(
        f"""SELECT COUNT(*) FROM items i WHERE i.kind = :kind
              AND NOT EXISTS (SELECT 1 FROM assignments m WHERE m.item_id = i.id AND m.user_id = :user)
              AND NOT EXISTS (SELECT 1 FROM rankings r WHERE r.item_id = i.id AND r.source = 'arena')
              AND (i.gold_json IS NOT NULL
                   OR (SELECT COUNT(*) FROM assignments a WHERE a.item_id = i.id AND {HOLDS_SLOT}) < :overlap)""",
        params,
    ).fetchone()[0]
    # The user's own reservations, on items that can still take their label (one that others filled
    # meanwhile is released the next time the queue is asked).
    pending = db.execute(
        """SELECT COUNT(*) FROM assignments a JOIN items i ON i.id = a.item_id
           WHERE a.user_id = :user AND a.status = 'pending' AND i.kind = :kind AND i.is_open = 1""",
        params,
    ).fetchone()[0]
    return done, available + pending


def assert_counters_match(db) -> None:
    assert dict(db.execute("SELECT id, is_open FROM items").fetchall()) == recount_open(db)
    open_by_kind = dict(db.execute("SELECT kind, SUM(is_open) FROM items GROUP BY kind").fetchall())
    stored = dict(db.execute("SELECT kind, open_items FROM queue_counts").fetchall())
    assert {k: v for k, v in stored.items() if v or k in open_by_kind} == open_by_kind
    for username in USERS:
        for kind in labeling.KINDS:
            assert labeling.progress(db, P, username, kind) == recount_progress(db, username, kind), (username, kind)


def test_counters_match_a_recount_after_random_operations(db):
    rng = random.Random(15)
    make_users(db, *USERS)
    for k in range(6):
        add_prompt(db, f"prompt {k}", 3)
    labeling.create_items(db, P, ranking_size=3)
    assert_counters_match(db)
    statuses_seen: set[str] = set()
    for step in range(400):
        username, kind = rng.choice(USERS), rng.choice(labeling.KINDS)
        roll = rng.random()
        try:
            if roll < 0.05:
                set_overlap(db, rng.randint(1, 3))
            elif roll < 0.09:
                item_id = rng.choice([r[0] for r in db.execute("SELECT id, kind FROM items WHERE kind = 'rating'")])
                labeling.set_gold(db, item_id, None if rng.random() < 0.4 else {"score": rng.randint(1, 7)})
            elif roll < 0.12:
                labeling.undo_last_action(db, P, username, kind)
            elif roll < 0.14:
                add_prompt(db, f"late prompt {step}", 2)
                labeling.create_items(db, P, ranking_size=3)
            elif roll < 0.15:
                # A prompt deleted with everything on it (items, assignments, labels cascade).
                prompt_id = rng.choice([r[0] for r in db.execute("SELECT id FROM prompts")])
                db.execute("DELETE FROM prompts WHERE id = ?", [prompt_id])
            elif roll < 0.17:
                # An arena-style vote: a done assignment and an 'arena' ranking take the item out of the queue.
                row = db.execute("SELECT id, prompt_id, response_ids_json FROM items WHERE kind = 'ranking'"
                                 " AND is_open = 1 ORDER BY RANDOM() LIMIT 1").fetchone()
                user_id = db.execute("SELECT id FROM users WHERE username = ?", [username]).fetchone()[0]
                if row is not None and not db.execute("SELECT 1 FROM assignments WHERE item_id = ? AND user_id = ?",
                                                      [row["id"], user_id]).fetchone():
                    ids = json.loads(row["response_ids_json"])
                    db.execute("INSERT INTO assignments (item_id, user_id, status) VALUES (?, ?, 'done')", [row["id"], user_id])
                    db.execute("INSERT INTO rankings (item_id, prompt_id, user_id, order_json, source)"
                               " VALUES (?, ?, ?, ?, 'arena')", [row["id"], row["prompt_id"], user_id,
                                                                 json.dumps([[i] for i in ids])])
            else:
                item = labeling.next_item(db, P, username, kind)
                if item is not None:
                    if rng.random() < 0.15:
                        labeling.skip_item(db, P, username, item.item_id)
                    elif kind == "rating":
                        labeling.submit_rating_and_next(db, P, username, item.item_id, rng.randint(1, 7),
                                                        request_id=item.request_id)
                    else:
                        order = [[r["id"]] for r in item.responses]
                        labeling.submit_ranking_and_next(db, P, username, item.item_id, order,
                                                         request_id=item.request_id)
        except (InputError, PermissionDenied):
            pass  # refused operations (undo with nothing to undo, ...) must leave the counters right too
        assert_counters_match(db)
        statuses_seen |= {r[0] for r in db.execute("SELECT DISTINCT status FROM assignments")}
    # The sequence did real work: labels of both kinds, skips and reservations are in the tables.
    assert db["ratings"].count > 20 and db["rankings"].count > 5
    # (seen along the way: the arena votes pick items with SQLite's unseeded RANDOM(), so the end state varies)
    assert statuses_seen == {"pending", "done", "skipped"}


def test_remaining_counts_others_fresh_reservations_and_not_stale_ones(db):
    make_users(db, *USERS)
    add_prompt(db, "p", 3)
    labeling.create_items(db, P, kinds=("rating",))
    assert labeling.progress(db, P, "ann", "rating") == (0, 3)
    first = labeling.next_item(db, P, "ben")
    assert labeling.progress(db, P, "ann", "rating") == (0, 2)  # ben's reservation fills item 1
    db.execute(f"UPDATE assignments SET assigned_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-{labeling.PENDING_TTL_MINUTES + 1} minutes')"
               " WHERE item_id = ?", [first.item_id])
    assert labeling.progress(db, P, "ann", "rating") == (0, 3)  # stale: the item is free again


@pytest.mark.parametrize("kind", labeling.KINDS)
def test_next_item_walks_only_open_items(db, kind):
    # 300 items of which the first 290 are full: the query plan uses the open-items index, and the next item
    # is the first open one.
    make_users(db, "ann", "ben")
    for k in range(150):
        add_prompt(db, f"p{k}", 4)
    labeling.create_items(db, P, ranking_size=2)
    ids = [r[0] for r in db.execute("SELECT id FROM items WHERE kind = ? ORDER BY id", [kind])]
    ben = db.execute("SELECT id FROM users WHERE username = 'ben'").fetchone()[0]
    db.conn.executemany("INSERT INTO assignments (item_id, user_id, status) VALUES (?, ?, 'done')",
                   [(i, ben) for i in ids[:-10]])
    assert labeling.next_item(db, P, "ann", kind).item_id == ids[-10]
    assert labeling.progress(db, P, "ann", kind) == (0, 10)
    plan = " ".join(r[3] for r in db.execute(
        "EXPLAIN QUERY PLAN SELECT i.id FROM items i INDEXED BY items_open_queue WHERE i.project_id = 1"
        " AND i.kind = ? AND i.is_open = 1 ORDER BY i.priority DESC, i.id LIMIT 1", [kind]))
    assert "items_open_queue" in plan and "TEMP B-TREE" not in plan
