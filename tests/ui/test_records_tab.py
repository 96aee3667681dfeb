"""The Records tab's handlers in-process (issue 14 item 8): list, filter, page, open, correct, delete, gold."""
from __future__ import annotations

import json

import gradio as gr
import pytest
from test_tabs import ADMIN, ANNOTATOR, app, app_db, call, endpoint, query  # noqa: F401 - fixtures

ALL = ["default", "", "(any)", "any", None, None, "(any)", "(any)"]  # project, search, annotator, state, scores, split, source


def test_records_tab_is_an_admin_tab(app):
    tabs = {block.id: block for block in app.blocks.values() if isinstance(block, gr.Tab)}
    assert "records" in tabs and not tabs["records"].visible
    with pytest.raises(gr.Error, match="not an admin"):
        call(app, "records_search", *ALL, 1, user=ANNOTATOR)


def test_list_filter_open_correct_delete_and_gold(app, app_db):
    shown = call(app, "rate_next", user=ANNOTATOR)
    call(app, "rate_submit", 6, "great", shown[6], user=ANNOTATOR)  # answer 1 of prompt 1 scored 6

    table, note, page = call(app, "records_search", *ALL, 1, user=ADMIN)
    assert [row[0] for row in table] == [1, 2] and "**2** records" in note and page == 1
    by_annotator = call(app, "records_search", "default", "", ANNOTATOR, "any", None, None, "(any)", "(any)", 1,
                        user=ADMIN)
    assert [row[0] for row in by_annotator[0]] == [1] and by_annotator[0][0][5] == 1  # one rating
    assert [row[0] for row in call(app, "records_search", "default", "two", *ALL[2:], 1, user=ADMIN)[0]] == [2]
    assert call(app, "records_search", "default", "", "(any)", "unlabelled", *ALL[4:], 1, user=ADMIN)[0][0][0] == 2
    # Next from the last page stays on it.
    assert call(app, "records_next", *ALL, 1, user=ADMIN)[2] == 1
    # A bad filter is a warning; the list on screen stays.
    with pytest.warns(UserWarning, match="min_score"):
        assert call(app, "records_search", "default", "", "(any)", "any", 7, 2, "(any)", "(any)", 1,
                    user=ADMIN) == (gr.skip(),) * 3

    detail = call(app, "records_open", 1, user=ADMIN)
    assert f"by {ANNOTATOR}: answer 1 scored **6**" in detail and "_great_" in detail
    detail, audit = call(app, "records_correct", "rating", 1, "4", "too generous", 1, user=ADMIN)
    assert f"by {ANNOTATOR}: answer 1 scored **4**" in detail
    assert audit[0][1:] == [ADMIN, "correct", "rating", 1, "score 6", "score 4", "too generous"]
    with pytest.warns(UserWarning, match="a rating takes a score"):
        call(app, "records_correct", "rating", 1, "2 > 1", "", 1, user=ADMIN)
    detail, audit = call(app, "records_delete", "rating", 1, "spam", 1, user=ADMIN)
    assert "- none" in detail.split("**Rankings**")[0] and audit[0][2] == "delete"
    assert query(app_db, "SELECT COUNT(*) FROM ratings") == [(0,)]

    item_id = query(app_db, "SELECT id FROM items WHERE prompt_id = 2 AND kind = 'ranking'")[0][0]
    detail = call(app, "records_gold", item_id, "6 > 4 = 5", 2, user=ADMIN)
    assert json.loads(query(app_db, "SELECT gold_json FROM items WHERE id = ?", [item_id])[0][0]) == {"order": [[6], [4, 5]]}
    assert f"ranking item **{item_id}**" in detail and "[[6], [4, 5]]" in detail
    assert [row[0] for row in call(app, "records_search", "default", "", "(any)", "gold", *ALL[4:], 1, user=ADMIN)[0]] == [2]


def test_load_fills_the_filter_choices(app, app_db):
    table, note, page, project, annotator, split, source, audit = endpoint(app, "records_load").fn(
        request=gr.Request(username=ADMIN))
    assert project["choices"] == ["default"] and annotator["choices"] == ["(any)", ANN_SORTED[0], ANN_SORTED[1]]
    assert split["choices"] == ["(any)", "train"] and source["choices"] == ["(any)", "test"] and audit == []


ANN_SORTED = sorted([ADMIN, ANNOTATOR])
