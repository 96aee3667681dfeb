"""Panels follow the data without a Refresh: Admin > Quality's table when the tab is shown and while it is in front
(it listed an annotator with 0 labels, read at the admin's page load, while their labels came in), Records when
its tab is selected (a held-out prompt showed "train" with 0 answers until Search), and the Train tab's pickers
while it is in front (a model registered meanwhile reached them only after a tab switch)."""
from __future__ import annotations

import gradio as gr
from test_tabs import ADMIN, ANNOTATOR, app, app_db, as_user, ctx, events, query  # noqa: F401 - fixtures

from labeler.services.data import labeling
from labeler.services.serving import models
from labeler.ui.tabs import records as records_tab
from labeler.ui.tabs import train as train_tab
from labeler.ui.tabs.admin import quality
from labeler.ui.tabs.records.filters import ANY
from storage import open_db


def label_some(app_db, n: int) -> None:
    db = open_db(app_db)
    try:
        for _ in range(n):
            item = labeling.next_item(db, "default", ANNOTATOR, "rating")
            labeling.submit_rating(db, "default", ANNOTATOR, item.item_id, 4)
    finally:
        db.conn.close()


def test_quality_is_read_again_when_shown_and_while_in_front(app_db, ctx):
    before = quality.quality_view(ctx, "shown", request=as_user(ADMIN))
    assert [row[:3] for row in before[0]] == []
    label_some(app_db, 3)
    table, agreement = quality.quality_view(ctx, "shown", request=as_user(ADMIN))
    assert [row[:3] for row in table] == [[ANNOTATOR, 3, 0]]
    assert "Krippendorff" in agreement
    # Hidden (the timer's js said so) or an annotator's page: nothing is read, nothing changes.
    assert quality.quality_view(ctx, "", request=as_user(ADMIN)) == (gr.skip(), gr.skip())
    assert quality.quality_view(ctx, "shown", request=as_user(ANNOTATOR)) == (gr.skip(), gr.skip())


def test_the_admin_tab_s_select_and_timer_refresh_quality(app):
    by_name = events(app)
    stats_outputs = {id(block) for block in by_name["admin_quality_view"].outputs}
    assert stats_outputs == {id(block) for block in by_name["admin_quality_tick"].outputs}
    assert len(stats_outputs) == 2
    assert by_name["admin_quality_tick"].js == quality.SHOWN_JS


def test_records_follow_a_prompt_held_out_and_answered_after_the_page_loaded(app_db, ctx):
    filters = ["default", "", ANY, "any", "", "", ANY, ANY, 1, "1"]
    db = open_db(app_db)
    try:
        prompt_id = db.execute("INSERT INTO prompts (project_id, text, text_hash, split) VALUES (1, 'later', 'h-later',"
                               " 'train')").lastrowid
        first = records_tab.view(ctx, *filters[:-1], str(prompt_id), request=as_user(ADMIN))
        assert [(row[2], row[4]) for row in first[0] if row[0] == prompt_id] == [("train", 0)]
        db.execute("UPDATE prompts SET split = 'test' WHERE id = ?", [prompt_id])
        db.execute("INSERT INTO responses (prompt_id, text, model) VALUES (?, 'a later answer', 'm')", [prompt_id])
    finally:
        db.conn.close()
    shown = records_tab.view(ctx, *filters[:-1], str(prompt_id), request=as_user(ADMIN))
    row = [r for r in shown[0] if r[0] == prompt_id][0]
    assert (row[2], row[4]) == ("test", 1)
    assert "a later answer" in shown[-1]  # the open record too
    assert len(shown) == records_tab.LOAD_OUTPUTS + 1
    assert records_tab.view(ctx, *filters, request=as_user(ANNOTATOR)) == tuple(
        gr.skip() for _ in range(records_tab.LOAD_OUTPUTS + 1))


def test_the_train_pickers_follow_a_model_registered_while_the_tab_is_in_front(app_db, ctx, tiny_model_dir):
    db = open_db(app_db)
    try:
        stamp = train_tab.choices_stamp(db, "default")
        models.register_model(db, "fresh-reward", str(tiny_model_dir), "reward")
    finally:
        db.conn.close()
    updated = train_tab.follow_choices(ctx, stamp, request=as_user(ADMIN))
    assert "fresh-reward" in [choice if isinstance(choice, str) else choice[-1] for choice in updated[2]["choices"]]
    assert any("fresh-reward" in str(choice) for choice in updated[1]["choices"])
    new_stamp = updated[-1]
    assert new_stamp != stamp
    # Nothing new: nothing sent (an open dropdown stays open); hidden or an annotator: nothing read.
    assert train_tab.follow_choices(ctx, new_stamp, request=as_user(ADMIN)) == tuple(gr.skip() for _ in range(5))
    assert train_tab.follow_choices(ctx, "hidden", request=as_user(ADMIN)) == tuple(gr.skip() for _ in range(5))
    assert train_tab.follow_choices(ctx, stamp, request=as_user(ANNOTATOR)) == tuple(gr.skip() for _ in range(5))
