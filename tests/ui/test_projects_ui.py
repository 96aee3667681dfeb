"""Projects managed from the browser (issue 49, item 1): an admin creates a project (prompt format, answer length,
measure, held-out share) and works in it; each person's project is their own choice (kept in SQLite), read by
every handler through the role check; prompts are edited, retired and restored from Data > 1. Prompts."""
from __future__ import annotations

import gradio as gr
import pytest
from test_tabs import ADMIN, ANNOTATOR, app, app_db, as_user, ctx, events, query  # noqa: F401 - fixtures

from labeler.ui import header
from labeler.ui.tabs.admin import project_settings
from labeler.ui.tabs.data import prompts as data_prompts
from labeler.ui.tabs.data.summary import data_summary


def test_an_admin_creates_a_project_and_works_in_it_while_others_stay(app_db, ctx):
    assert project_settings.create_project(ctx, " nimbus ", "chat", 64, "people", 0.2,
                                           request=as_user(ADMIN)) == "nimbus"
    assert query(app_db, "SELECT prompt_format, answer_tokens, measure, heldout_share FROM projects"
                         " WHERE name = 'nimbus'") == [("chat", 64, "people", 0.2)]
    # The admin's page now reads nimbus; the annotator's still the server's project.
    assert header.project_picker(ctx, request=as_user(ADMIN))["value"] == "nimbus"
    assert header.project_picker(ctx, request=as_user(ANNOTATOR))["value"] == "default"
    assert header.whoami(ctx, 4, request=as_user(ADMIN))[0].endswith("project **nimbus**")
    summary, table = data_prompts.import_shipped(ctx, request=as_user(ADMIN))
    assert "Project **nimbus**: **135** prompts" in summary
    assert query(app_db, "SELECT COUNT(*) FROM prompts p JOIN projects j ON j.id = p.project_id"
                         " WHERE j.name = 'default'") == [(2,)]  # the default project's two are untouched
    assert ctx.project == "default"  # outside a request: the server's project


def test_a_bad_new_project_is_refused_naming_the_field_and_makes_nothing(app_db, ctx):
    with pytest.raises(gr.Error, match="type a name"):
        project_settings.create_project(ctx, "  ", "chat", 64, "", 0.1, request=as_user(ADMIN))
    with pytest.raises(gr.Error, match="no reward model named .nope."):
        project_settings.create_project(ctx, "x", "chat", 64, "rm:nope", 0.1, request=as_user(ADMIN))
    with pytest.raises(gr.Error, match="not an admin"):
        project_settings.create_project(ctx, "y", "chat", 64, "", 0.1, request=as_user(ANNOTATOR))
    assert query(app_db, "SELECT name FROM projects") == [("default",)]


def test_anyone_switches_project_and_labels_there(app_db, ctx):
    project_settings.create_project(ctx, "nimbus", "chat", None, "", 0.1, request=as_user(ADMIN))
    assert header.switch_project(ctx, "nimbus", request=as_user(ANNOTATOR)) == "nimbus"
    assert header.project_picker(ctx, request=as_user(ANNOTATOR))["value"] == "nimbus"
    assert query(app_db, "SELECT answer_tokens FROM projects WHERE name = 'nimbus'") == [(128,)]  # chat's default
    with pytest.raises(gr.Error, match="unknown project 'nope'"):
        header.switch_project(ctx, "nope", request=as_user(ANNOTATOR))


def test_prompts_are_edited_retired_and_restored_from_the_data_tab(app_db, ctx):
    data_prompts.import_shipped(ctx, request=as_user(ADMIN))  # 2 prompts with answers, then 135 without
    data_prompts.save_prompt_text(ctx, 3, "A fixed opening", request=as_user(ADMIN))
    assert query(app_db, "SELECT text FROM prompts WHERE id = 3") == [("A fixed opening",)]
    with pytest.warns(UserWarning, match="has 3 answers"):
        assert data_prompts.save_prompt_text(ctx, 1, "new", request=as_user(ADMIN)) == (gr.skip(), gr.skip())
    summary, _ = data_prompts.retire_prompt(ctx, 1, request=as_user(ADMIN))
    assert "**1** retired" in summary
    assert query(app_db, "SELECT split FROM prompts WHERE id = 1") == [("retired",)]
    assert query(app_db, "SELECT COUNT(*) FROM items WHERE prompt_id = 1") == [(0,)]  # unlabelled: gone
    data_prompts.restore_prompt(ctx, 1, request=as_user(ADMIN))
    assert query(app_db, "SELECT split FROM prompts WHERE id = 1") == [("train",)]
    assert query(app_db, "SELECT COUNT(*) FROM items WHERE prompt_id = 1") == [(4,)]  # 3 ratings + 1 ranking again
    with pytest.warns(UserWarning, match="click a prompt"):
        data_prompts.retire_prompt(ctx, None, request=as_user(ADMIN))


def test_the_new_events_are_wired(app):
    by_name = events(app)
    assert by_name["switch_project"].fn.__wrapped__.__wrapped__ is not None
    for name in ("admin_create_project", "data_retire_prompt", "data_restore_prompt", "data_save_prompt",
                 "data_pick_prompt", "project_picker"):
        assert name in by_name, name


def test_page_loads_leave_the_pickers_of_a_refused_caller_alone(app_db, ctx):
    assert header.project_picker(ctx, request=as_user(None)) == gr.skip()
    assert project_settings.new_project_choices(ctx, request=as_user(ANNOTATOR)) == gr.skip()
    assert ("people's blind comparisons", "people") in project_settings.new_project_choices(
        ctx, request=as_user(ADMIN))["choices"]


def test_records_opens_on_the_project_the_admin_works_in(app_db, ctx):
    from labeler.ui.tabs import records
    from labeler.ui.tabs.records.listing import LIST_OUTPUTS

    project_settings.create_project(ctx, "nimbus", "chat", None, "", 0.1, request=as_user(ADMIN))
    loaded = records.load(ctx, request=as_user(ADMIN))
    assert loaded[LIST_OUTPUTS]["value"] == "nimbus"
