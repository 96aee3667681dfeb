"""The Records tab's handlers (module functions, called as their events call them): list, filter, page, open,
correct, delete, gold."""
from __future__ import annotations

import json

import gradio as gr
import pytest
from test_tabs import ADMIN, ANNOTATOR, app, app_db, as_user, ctx, query  # noqa: F401 - fixtures

from labeler.ui.tabs import rate, records
from labeler.ui.tabs.records import corrections, listing
from labeler.ui.tabs.records.detail import open_record

ALL = ["default", "", "(any)", "any", None, None, "(any)", "(any)"]  # project, search, annotator, state, scores, split, source


def test_records_tab_is_an_admin_tab(app, ctx):
    tabs = {block.id: block for block in app.blocks.values() if isinstance(block, gr.Tab)}
    assert "records" in tabs and not tabs["records"].visible
    with pytest.raises(gr.Error, match="not an admin"):
        listing.search(ctx, 0, *ALL, 1, request=as_user(ANNOTATOR))


def test_list_filter_open_correct_delete_and_gold(ctx, app_db):
    admin = as_user(ADMIN)
    shown = rate.next_item(ctx, request=as_user(ANNOTATOR))
    rate.submit(ctx, 6, "great", shown[6], request=as_user(ANNOTATOR))  # answer 1 of prompt 1 scored 6

    table, note, page = listing.search(ctx, 0, *ALL, 1, request=admin)
    assert [row[0] for row in table] == [1, 2] and "**2** records" in note and page == 1
    by_annotator = listing.search(ctx, 0, "default", "", ANNOTATOR, "any", None, None, "(any)", "(any)", 1,
                                  request=admin)
    assert [row[0] for row in by_annotator[0]] == [1] and by_annotator[0][0][5] == 1  # one rating
    assert [row[0] for row in listing.search(ctx, 0, "default", "two", *ALL[2:], 1, request=admin)[0]] == [2]
    assert listing.search(ctx, 0, "default", "", "(any)", "unlabelled", *ALL[4:], 1, request=admin)[0][0][0] == 2
    # Next from the last page stays on it.
    assert listing.search(ctx, +1, *ALL, 1, request=admin)[2] == 1
    # A bad filter is a warning; the list on screen stays.
    with pytest.warns(UserWarning, match=r"^Some rating >=: 7 is above the other bound, Some rating <= 2$"):
        assert listing.search(ctx, 0, "default", "", "(any)", "any", 7, 2, "(any)", "(any)", 1,
                              request=admin) == (gr.skip(),) * 3

    detail = open_record(ctx, 1, request=admin)
    assert f"by {ANNOTATOR}: answer 1 scored **6**" in detail and "_great_" in detail
    detail, audit = corrections.correct(ctx, "rating", 1, "4", "too generous", 1, request=admin)
    assert f"by {ANNOTATOR}: answer 1 scored **4**" in detail
    assert audit[0][1:] == [ADMIN, "correct", "rating", 1, "score 6", "score 4", "too generous"]
    with pytest.warns(UserWarning, match="a rating takes a score"):
        corrections.correct(ctx, "rating", 1, "2 > 1", "", 1, request=admin)
    detail, audit = corrections.delete(ctx, "rating", 1, "spam", 1, request=admin)
    assert "- none" in detail.split("**Rankings**")[0] and audit[0][2] == "delete"
    assert query(app_db, "SELECT COUNT(*) FROM ratings") == [(0,)]

    item_id = query(app_db, "SELECT id FROM items WHERE prompt_id = 2 AND kind = 'ranking'")[0][0]
    detail = corrections.mark_gold(ctx, item_id, "6 > 4 = 5", 2, request=admin)
    assert json.loads(query(app_db, "SELECT gold_json FROM items WHERE id = ?", [item_id])[0][0]) == {"order": [[6], [4, 5]]}
    assert f"ranking item **{item_id}**" in detail and "[[6], [4, 5]]" in detail
    assert [row[0] for row in listing.search(ctx, 0, "default", "", "(any)", "gold", *ALL[4:], 1, request=admin)[0]] == [2]


def test_load_fills_the_filter_choices(ctx):
    table, note, page, project, annotator, split, source, audit = records.load(ctx, request=as_user(ADMIN))
    assert project["choices"] == ["default"] and annotator["choices"] == ["(any)", ANN_SORTED[0], ANN_SORTED[1]]
    assert split["choices"] == ["(any)", "train"] and source["choices"] == ["(any)", "test"] and audit == []


ANN_SORTED = sorted([ADMIN, ANNOTATOR])


def test_a_row_click_opens_its_record(ctx):
    """The table's select event: Gradio fills the SelectData and the request by their annotations, which the bound
    handler keeps."""
    import typing

    from labeler.ui.binding import bind
    from labeler.ui.tabs.records.detail import select

    hints = typing.get_type_hints(bind(select, ctx))
    assert hints["event"] is gr.SelectData and hints["request"] is gr.Request
    click = gr.SelectData(None, {"index": [1, 1], "value": "Prompt two", "row_value": [2, "Prompt two"]})
    record_id, shown = select(ctx, click, request=as_user(ADMIN))
    assert record_id == "2" and shown.startswith("### Record 2 (train") and "**Prompt**: Prompt two" in shown
    assert select(ctx, gr.SelectData(None, {"index": [0, 0], "value": None}), request=as_user(ADMIN)) == (
        gr.skip(), gr.skip())  # a click beside the rows changes nothing
    with pytest.raises(gr.Error, match="not an admin"):
        select(ctx, click, request=as_user(ANNOTATOR))


def test_refresh_keeps_the_filters_shown(ctx):
    """Issue 37 item 4: Refresh listed every record while a filter still showed; it now reads the page again with
    the filters on screen, and the choices and audit log with it."""
    shown = records.refresh(ctx, "default", "two", *ALL[2:], 1, request=as_user(ADMIN))
    table, note, page, project, annotator, split, source, audit = shown
    assert [row[0] for row in table] == [2] and "**1** records" in note and page == 1
    assert source["choices"] == ["(any)", "test"] and "value" not in source and audit == []
    everything = records.refresh(ctx, *ALL, 1, request=as_user(ADMIN))
    assert [row[0] for row in everything[0]] == [1, 2]
