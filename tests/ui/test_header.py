"""What sits above the tabs (labeler/ui/header.py), its handlers called directly: who is logged in, the first-steps
panel and its timer, and the own-password change. test_tabs.WIRED ties each to its api_name."""
from __future__ import annotations

import gradio as gr
import pytest
from test_tabs import ADMIN, ANNOTATOR, app_db, as_user, ctx, query  # noqa: F401 - fixtures

from labeler.services.data import accounts
from labeler.ui import header

ADMIN_TABS = 4  # data, records, train, admin


def authenticates(db_path: str, username: str, password: str) -> bool:
    from storage import open_db

    db = open_db(db_path)
    try:
        return accounts.authenticate(db, username, password) is not None
    finally:
        db.conn.close()


def test_whoami_names_the_user_role_and_project_and_shows_admin_tabs_to_admins_only(ctx):
    text, panel, main, *tabs = header.whoami(ctx, ADMIN_TABS, request=as_user(ADMIN))
    assert text == f"Logged in as **{ADMIN}** (admin) · project **default**"
    assert panel["visible"] is False and main["visible"] is True
    assert [tab["visible"] for tab in tabs] == [True] * ADMIN_TABS
    text, panel, main, *tabs = header.whoami(ctx, ADMIN_TABS, request=as_user(ANNOTATOR))
    assert text == f"Logged in as **{ANNOTATOR}** (annotator) · project **default**"
    assert panel["visible"] is False and main["visible"] is True
    assert [tab["visible"] for tab in tabs] == [False] * ADMIN_TABS
    # Nobody (or an account deleted since the login): no name, no panel, the tabs left alone, admin tabs hidden.
    for nobody in (None, "stranger"):
        text, panel, main, *tabs = header.whoami(ctx, ADMIN_TABS, request=as_user(nobody))
        assert (text, panel, main) == ("", gr.update(visible=False), gr.update())
        assert tabs == [gr.update(visible=False)] * ADMIN_TABS


def test_first_steps_tick_counts_as_the_project_fills_and_stops_its_timer_when_done(ctx, app_db):
    from labeler.ui.tabs import rank, rate

    panel, timer = header.first_steps_tick(ctx, request=as_user(ADMIN))
    # 2 prompts and 6 answers (the app_db fixture), no labels: steps 1 and 2 ticked, the timer on.
    lines = panel["value"].splitlines()
    assert "(2 so far)" in lines[1] and "(6 so far)" in lines[2] and "(0 labels so far)" in lines[3]
    assert [line[:3] for line in lines[1:5]] == ["- ✅", "- ✅", "- ⬜", "- ⬜"]
    assert panel["visible"] is True and timer.active is True
    # An annotator never sees it, so their page sends no ticks.
    panel, timer = header.first_steps_tick(ctx, request=as_user(ANNOTATOR))
    assert panel == gr.update(visible=False) and timer.active is False
    # A rating and a ranking: 2 labels, and the panel goes with its timer.
    shown = rate.next_item(ctx, request=as_user(ANNOTATOR))
    rate.submit(ctx, 4, "", shown[6], request=as_user(ANNOTATOR))
    *_, state, key = rank.next_item(ctx, request=as_user(ANNOTATOR))
    rank.submit(ctx, "", state, key, as_user(ANNOTATOR), "1", "2", "3")
    assert query(app_db, "SELECT (SELECT COUNT(*) FROM ratings) + (SELECT COUNT(*) FROM rankings)") == [(2,)]
    panel, timer = header.first_steps_tick(ctx, request=as_user(ADMIN))
    assert panel == gr.update(visible=False) and timer.active is False


def test_first_steps_markdown_counts_labels_of_both_kinds():
    text = header.first_steps_markdown({"prompts": 3, "responses": 0, "ratings": 2, "rankings": 1}, "reviews")
    lines = text.splitlines()
    assert lines[0] == "### First steps for project **reviews**"
    assert [line[:3] for line in lines[1:5]] == ["- ✅", "- ⬜", "- ✅", "- ⬜"]  # 2 + 1 = 3 labels, no answers
    assert "(3 so far)" in lines[1] and "(0 so far)" in lines[2] and "(3 labels so far)" in lines[3]


def test_change_own_password_refuses_a_wrong_one_and_the_new_one_then_logs_in(ctx, app_db):
    request = as_user(ANNOTATOR)
    with pytest.raises(gr.Error, match="is not your current password"):
        header.change_own_password(ctx, "wrong-password", "new-password-1", "new-password-1", request=request)
    with pytest.raises(gr.Error, match="the two new passwords differ"):
        header.change_own_password(ctx, "ann-password-1", "new-password-1", "new-password-2", request=request)
    with pytest.raises(gr.Error, match="not logged in"):
        header.change_own_password(ctx, "ann-password-1", "new-password-1", "new-password-1", request=as_user(None))
    assert authenticates(app_db, ANNOTATOR, "ann-password-1")  # nothing changed by the refusals
    assert header.change_own_password(ctx, "ann-password-1", "new-password-1", "new-password-1",
                                      request=request) == "Password changed. Log in again with the new password."
    assert authenticates(app_db, ANNOTATOR, "new-password-1")
    assert not authenticates(app_db, ANNOTATOR, "ann-password-1")
