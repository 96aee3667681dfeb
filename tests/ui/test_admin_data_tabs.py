"""Admin and Data tab handlers in-process: a wrong field is a warning that leaves every output as it was
(issue 14 item 7), forms empty after use, upload errors name the file not the server path (item 11), and the
first-login password panel (item 10)."""
from __future__ import annotations

import gradio as gr
import pytest
from test_tabs import ADMIN, ANNOTATOR, app, app_db, call, endpoint, query  # noqa: F401 - fixtures

from labeler.services.errors import InputError
from labeler.ui.tabs.data.prompts import without_upload_path


def test_a_wrong_setting_warns_and_skips_every_output(app, app_db):
    n_outputs = len(endpoint(app, "admin_save_project").outputs)
    for args, field in [((5, 1, 1, ""), "likert_max"), ((None, 5, 1, ""), "likert_min"), ((1, 5, 0, ""), "overlap")]:
        with pytest.warns(UserWarning, match=f"field '{field}'"):
            result = call(app, "admin_save_project", *args, user=ADMIN)
        assert result == tuple(gr.skip() for _ in range(n_outputs))
    assert query(app_db, "SELECT likert_min, likert_max, overlap FROM projects") == [(1, 7, 1)]
    # A non-admin is still refused loudly: there is nothing on their screen to keep.
    with pytest.raises(gr.Error, match="not an admin"):
        call(app, "admin_save_project", 1, 5, 1, "", user=ANNOTATOR)


def test_add_user_empties_the_form_after_success_and_keeps_it_after_a_refusal(app, app_db):
    outputs = endpoint(app, "admin_add_user").outputs
    result = call(app, "admin_add_user", "carol", "carol-password-1", "annotator", user=ADMIN)
    assert len(result) == len(outputs) and result[-2:] == ("", "")
    assert ["carol", "annotator", "yes"] in result[0]
    with pytest.warns(UserWarning, match="already exists"):
        again = call(app, "admin_add_user", "carol", "carol-password-1", "annotator", user=ADMIN)
    assert again == tuple(gr.skip() for _ in outputs)  # the typed name and password stay to be fixed


def test_data_tab_warnings_keep_the_tab(app, app_db):
    with pytest.warns(UserWarning, match="choose a prompt file first"):
        assert call(app, "data_import_prompts", None, user=ADMIN) == (gr.skip(), gr.skip())
    with pytest.warns(UserWarning, match="choose a preference file first"):
        assert call(app, "data_import_labels", None, user=ADMIN) == (gr.skip(), gr.skip())


def test_upload_errors_name_the_file_not_the_server_path():
    upload = "/tmp/gradio/" + "ab" * 32 + "/prompts.json"
    error = InputError(f"invalid JSON in {upload}", file=upload, line=3)
    cleaned = without_upload_path(error, upload)
    assert str(cleaned) == "prompts.json, line 3: invalid JSON in prompts.json"
    assert "ab" * 32 not in str(cleaned)


def test_first_login_shows_only_the_password_panel(app, app_db):
    from labeler.services import accounts
    from storage import open_db

    db = open_db(app_db)
    db.execute("UPDATE users SET must_change_password = 1 WHERE username = ?", [ADMIN])
    db.conn.close()
    whoami = endpoint(app, "whoami")
    text, panel, main, *admin_tabs = whoami.fn(request=gr.Request(username=ADMIN))
    assert panel["visible"] is True and main["visible"] is False
    # The server refuses everything else, whatever the browser shows.
    with pytest.raises(gr.Error, match="one-time password"):
        call(app, "admin_refresh", user=ADMIN)
    # The user tabs' page loads change nothing instead of a toast each (the page shows only the password form);
    # their buttons still refuse.
    for load in ("rate_load", "rank_load", "chat_load", "arena_load"):
        outputs = call(app, load, user=ADMIN)
        assert len(outputs) == len(endpoint(app, load).outputs) and all(o == gr.update() for o in outputs), load
    for select in ("rate_guidelines", "rank_guidelines"):  # the Rate tab is selected as the page opens
        assert call(app, select, user=ADMIN) == gr.update(), select
    with pytest.raises(gr.Error, match="one-time password"):
        call(app, "rate_skip", "", user=ADMIN)
    with pytest.raises(gr.Error, match="current password"):
        call(app, "change_own_password", "wrong", "new-password-1", "new-password-1", user=ADMIN)
    assert "Log in again" in call(app, "change_own_password", "root-password-1", "new-password-1",
                                  "new-password-1", user=ADMIN)
    text, panel, main, *admin_tabs = whoami.fn(request=gr.Request(username=ADMIN))
    assert panel["visible"] is False and main["visible"] is True and all(t["visible"] for t in admin_tabs)
    db = open_db(app_db)
    assert accounts.authenticate(db, ADMIN, "new-password-1") is not None
    db.conn.close()


@pytest.fixture
def fresh_app(db_path, tmp_path):
    """A fresh install: one admin, the shipped model 'default' only."""
    from labeler.services import accounts
    from labeler.ui.app import build_app
    from labeler.ui.context import ServeSettings
    from storage import open_db

    db = open_db(db_path)
    accounts.create_user(db, ADMIN, "root-password-1", role="admin")
    db.conn.close()
    return build_app(ServeSettings(db_path=db_path, model="default", runs_dir=str(tmp_path / "runs")))


def test_arena_waits_for_a_second_model_that_an_admin_registers(fresh_app, db_path, tiny_model_dir):
    """Issue 14 item 6: explain and disable Battle until two chat models exist; register one from Admin."""
    model_1, model_2, board, note, start = endpoint(fresh_app, "arena_load").fn(request=gr.Request(username=ADMIN))
    assert start["interactive"] is False and note["visible"] is True and "only one is registered" in note["value"]
    assert model_1["value"] == model_2["value"] == "(random)"  # no model name on screen before a vote
    with pytest.raises(gr.Error, match="only one is registered"):  # the endpoint refuses too
        call(fresh_app, "arena_start", "Hi", "(random)", "(random)", 8, user=ADMIN)

    outputs = endpoint(fresh_app, "admin_register_model").outputs
    with pytest.warns(UserWarning, match="no such folder"):
        assert call(fresh_app, "admin_register_model", "mine", "owner/hub-model", "", user=ADMIN) == tuple(
            gr.skip() for _ in outputs)
    result = call(fresh_app, "admin_register_model", "mine", str(tiny_model_dir), "default", user=ADMIN)
    assert ["mine", "policy", "default"] == result[9][-1][:3] and result[-2:] == ("", "")
    assert query(db_path, "SELECT name, kind, base_model FROM models ORDER BY id") == [
        ("default", "base", None), ("mine", "policy", "default")]
    model_1, model_2, board, note, start = endpoint(fresh_app, "arena_load").fn(request=gr.Request(username=ADMIN))
    assert start["interactive"] is True and note["visible"] is False
    assert model_1["choices"] == ["(random)", "default", "mine"]


def test_generate_for_the_last_import_batch_keeps_the_model_loaded(app, app_db, tiny_model_dir, tmp_path, monkeypatch):
    """Issue 14 item 5: the prompts just uploaded get the answers, and a second run loads nothing."""
    from labeler.services import chat

    loads, real_load = [], chat._load
    monkeypatch.setattr(chat, "_load", lambda path, kind: (loads.append(path), real_load(path, kind))[1])
    upload = tmp_path / "fresh.txt"
    upload.write_text("Fresh prompt A\nFresh prompt B\n", encoding="utf-8")
    call(app, "data_import_prompts", str(upload), user=ADMIN)  # prompts 3 and 4; 1 and 2 have no tiny answers

    fn = endpoint(app, "data_generate")
    by_label = {getattr(block, "label", None): block for block in fn.inputs}
    values = {block: block.value for block in fn.inputs}
    values[by_label["Model"]] = str(tiny_model_dir)
    values[by_label["Answers per prompt"]] = 1
    values[by_label["max_new_tokens"]] = 4
    values[by_label["Which prompts"]] = "the last import batch"
    message, _ = fn.fn(values, request=gr.Request(username=ADMIN))
    assert "Generated **2** answers for the last import batch (2 prompts)" in message
    assert query(app_db, "SELECT prompt_id FROM responses WHERE model != 'fixed' ORDER BY id") == [(3,), (4,)]
    values[by_label["Which prompts"]] = "all without enough answers"
    message, _ = fn.fn(values, request=gr.Request(username=ADMIN))
    assert "Generated **2** answers;" in message  # prompts 1 and 2 now
    assert len(loads) == 1  # the model stayed loaded for the second run


def test_the_parts_handlers_are_called_with_the_context_alone(app_db):
    """Each part's handlers are module functions taking the UIContext: no app to build, no endpoint to find."""
    from labeler.ui.context import ServeSettings, UIContext
    from labeler.ui.tabs import admin, data
    from labeler.ui.tabs.admin import quality
    from labeler.ui.tabs.admin.snapshot import SHOWN
    from labeler.ui.tabs.data import prompts

    ctx = UIContext(ServeSettings(db_path=app_db, model="default"))
    admin_request = gr.Request(username=ADMIN)
    shown = admin.refresh(ctx, admin_request)
    assert len(shown) == len(SHOWN) and shown[0] == [[ADMIN, "admin", "yes"], [ANNOTATOR, "annotator", "yes"]]
    assert "Gold now: `{\"score\": 5}`" in quality.mark_gold(ctx, 1, "5", admin_request)
    assert query(app_db, "SELECT gold_json FROM items WHERE id = 1") == [('{"score": 5}',)]
    summary, table, models, annotators, threshold = data.refresh(ctx, admin_request)
    assert summary.startswith("Project **default**: **2** prompts · **6** answers")
    assert [row[1] for row in table] == ["Prompt two", "Prompt one"]  # newest first
    assert models["choices"][0] == "default" and annotators["choices"] == [ADMIN, ANNOTATOR]
    assert threshold["value"] == 4  # the 1..7 scale's midpoint
    with pytest.raises(gr.Error, match="not an admin"):  # the role check is the handler's own
        prompts.import_shipped(ctx, gr.Request(username=ANNOTATOR))
    assert data.tick(ctx, gr.Request(username=ANNOTATOR)) == (gr.skip(), gr.skip())
