"""Undo takes back the latest action, a skip as well as a label (issue 14 item 11: it passed over skips)."""
from __future__ import annotations

import pytest
from labeling_helpers import add_prompt, make_users, rating_items

from labeler.services.data import labeling
from labeler.services.data.labeling import Undone, create_items, next_item, submit_rating
from helpers import rows

P = "default"


def stamp(db, item_id: int, when: str) -> None:
    """Pin alice's skip of `item_id` (assigned_at) and her label on it (created_at) to `when`, so the order of
    two actions in the same millisecond does not depend on the machine's speed."""
    db.execute("UPDATE assignments SET assigned_at = ? WHERE item_id = ?", [when, item_id])
    db.execute("UPDATE ratings SET created_at = ? WHERE item_id = ?", [when, item_id])


@pytest.fixture
def items(db):
    make_users(db, "alice", "bob")
    add_prompt(db, "p", 4)
    create_items(db, P, kinds=("rating",))
    return rating_items(db)


def test_undo_brings_back_a_skipped_item_first_and_then_the_label_before_it(db, items):
    i1, i2, i3 = items[:3]
    assert next_item(db, P, "alice").item_id == i1
    submit_rating(db, P, "alice", i1, 5)
    stamp(db, i1, "2025-01-01T00:00:01.000Z")
    assert next_item(db, P, "alice").item_id == i2
    labeling.skip_item(db, P, "alice", i2)
    stamp(db, i2, "2025-01-01T00:00:02.000Z")
    assert next_item(db, P, "alice").item_id == i3  # shown when she presses undo

    assert labeling.undo_last_action(db, P, "alice", "rating") == Undone(i2, "skip")
    assert rows(db, "SELECT item_id, score FROM ratings") == [(i1, 5.0)]  # the label before the skip stays
    assert next_item(db, P, "alice").item_id == i2  # the skipped item is back, ahead of the pending i3
    assert rows(db, "SELECT item_id, status FROM assignments ORDER BY item_id") == [
        (i1, "done"), (i2, "pending"), (i3, "pending")
    ]
    # A second undo goes on to the label before the skip.
    assert labeling.undo_last_action(db, P, "alice", "rating") == Undone(i1, "label")
    assert rows(db, "SELECT item_id FROM ratings") == []
    assert labeling.undo_last_action(db, P, "alice", "rating") is None


def test_a_label_after_a_skip_is_undone_first_and_a_tie_counts_the_label_as_later(db, items):
    i1, i2 = items[:2]
    assert next_item(db, P, "alice").item_id == i1
    labeling.skip_item(db, P, "alice", i1)
    stamp(db, i1, "2025-01-01T00:00:01.000Z")
    assert next_item(db, P, "alice").item_id == i2
    submit_rating(db, P, "alice", i2, 3)
    stamp(db, i2, "2025-01-01T00:00:01.000Z")  # the same millisecond as the skip
    assert labeling.undo_last_action(db, P, "alice", "rating") == Undone(i2, "label")
    assert labeling.undo_last_action(db, P, "alice", "rating") == Undone(i1, "skip")


def test_a_second_skip_click_keeps_the_time_of_the_first_and_undo_is_per_user_and_kind(db, items):
    i1 = items[0]
    next_item(db, P, "alice")
    labeling.skip_item(db, P, "alice", i1)
    stamp(db, i1, "2025-01-01T00:00:01.000Z")
    labeling.skip_item(db, P, "alice", i1)  # a double click
    assert rows(db, "SELECT assigned_at FROM assignments WHERE item_id = ?", [i1]) == [("2025-01-01T00:00:01.000Z",)]
    assert labeling.undo_last_action(db, P, "bob", "rating") is None
    assert labeling.undo_last_action(db, P, "alice", "ranking") is None
    assert labeling.undo_last_action(db, P, "alice", "rating") == Undone(i1, "skip")
