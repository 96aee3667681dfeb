"""The Rank tab after a refused ranking: the item went to another annotator while this one idled, so the submit
says why (a warning) and answers with the next item, which takes the next ranking at once (the keyboard went on
refusing every key until the mouse pressed Refresh)."""
from __future__ import annotations

import pytest
from test_tabs import ANNOTATOR, app_db, as_user, ctx, query, submit_ranks  # noqa: F401 - fixtures

from labeler.services.data import accounts, labeling
from labeler.ui.tabs import rank
from storage import open_db

OTHER = "other-ranker"


def test_a_refused_ranking_shows_the_next_item_which_takes_the_next_ranking(app_db, ctx):
    db = open_db(app_db)
    try:
        accounts.create_user(db, OTHER, "other-password-1")
    finally:
        db.conn.close()
    shown = rank.next_item(ctx, request=as_user(ANNOTATOR))
    state, key = shown[-2], shown[-1]
    item_id = int(key.split(":")[0])
    db = open_db(app_db)
    try:  # the annotator idles past the hold; the other one is served the item and ranks it
        db.execute("UPDATE assignments SET assigned_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-31 minutes')")
        taken = labeling.next_item(db, "default", OTHER, "ranking")
        assert taken.item_id == item_id
        labeling.submit_ranking(db, "default", OTHER, item_id, [[r["id"]] for r in taken.responses])
    finally:
        db.conn.close()
    with pytest.warns(UserWarning, match=f"item {item_id} was idle for over 30 minutes and went to another annotator"):
        after = submit_ranks(ctx, state, key, "1", "2", "3")
    next_state, next_key = after[-2], after[-1]
    assert int(next_key.split(":")[0]) != item_id
    submit_ranks(ctx, next_state, next_key, *[str(k + 1) for k in range(len(next_state["response_ids"]))])
    rankings = query(app_db, "SELECT k.item_id, u.username FROM rankings k JOIN users u ON u.id = k.user_id ORDER BY k.id")
    assert rankings == [(item_id, OTHER), (int(next_key.split(":")[0]), ANNOTATOR)]
