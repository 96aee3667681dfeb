"""Admin and Data tab handlers in-process: a wrong field is a warning that leaves every output as it was
(issue 14 item 7), forms empty after use, upload errors name the file not the server path (item 11), and the
first-login password panel (item 10). The handlers are called directly; test_tabs.WIRED ties each to its api_name
and checks that a refusal's gr.skip() tuple is as long as the event's outputs."""
from __future__ import annotations

import gradio as gr
import pytest
from test_tabs import ADMIN, ANNOTATOR, app_db, as_user, ctx, generate_form, query  # noqa: F401 - fixtures

from labeler.services.serving.chat import ModelCache
from labeler.errors import InputError
from labeler.ui import header
from labeler.ui.tabs.admin import model_registry, project_settings, users
from labeler.ui.tabs.admin.snapshot import SHOWN
from labeler.ui.tabs.data import generate, label_files
from labeler.ui.tabs.data import prompts as data_prompts
from labeler.ui.tabs.data.prompts import without_upload_path

ADMIN_TABS = 4  # data, records, train, admin: whoami's last outputs


def test_a_wrong_setting_warns_and_skips_every_output(app_db, ctx):
    # The toast names the field as the form labels it (issue 49 item 7: it said "field 'likert_max'").
    for args, label in [((5, 1, 1, ""), "Highest score"), ((None, 5, 1, ""), "Lowest score"),
                        ((1, 5, 0, ""), "Annotators per item")]:
        with pytest.warns(UserWarning, match=f"^{label}: ") as warned:
            result = project_settings.save_project(ctx, *args, request=as_user(ADMIN))
        assert "field '" not in str(warned[0].message)
        assert result == tuple(gr.skip() for _ in SHOWN)  # the admin snapshot's widgets, each left as it is
    assert query(app_db, "SELECT likert_min, likert_max, overlap FROM projects") == [(1, 7, 1)]
    # A non-admin is still refused loudly: there is nothing on their screen to keep.
    with pytest.raises(gr.Error, match="not an admin"):
        project_settings.save_project(ctx, 1, 5, 1, "", request=as_user(ANNOTATOR))


def test_add_user_empties_the_form_after_success_and_keeps_it_after_a_refusal(app_db, ctx):
    n_outputs = len(SHOWN) + 2  # the admin snapshot, then the name and password boxes
    result = users.add_user(ctx, "carol", "carol-password-1", "annotator", request=as_user(ADMIN))
    assert len(result) == n_outputs and result[-2:] == ("", "")
    assert ["carol", "annotator", "yes"] in result[0]
    with pytest.warns(UserWarning, match="already exists"):
        again = users.add_user(ctx, "carol", "carol-password-1", "annotator", request=as_user(ADMIN))
    assert again == tuple(gr.skip() for _ in range(n_outputs))  # the typed name and password stay to be fixed


def test_data_tab_warnings_keep_the_tab(app_db, ctx):
    with pytest.warns(UserWarning, match="choose a prompt file first"):
        assert data_prompts.import_prompt_file(ctx, None, request=as_user(ADMIN)) == (gr.skip(), gr.skip())
    with pytest.warns(UserWarning, match="choose a preference file first"):
        assert label_files.import_labels(ctx, None, request=as_user(ADMIN)) == (gr.skip(), gr.skip())


def test_upload_errors_name_the_file_not_the_server_path():
    upload = "/tmp/gradio/" + "ab" * 32 + "/prompts.json"
    error = InputError(f"invalid JSON in {upload}", file=upload, line=3)
    cleaned = without_upload_path(error, upload)
    assert str(cleaned) == "prompts.json, line 3: invalid JSON in prompts.json"
    assert "ab" * 32 not in str(cleaned)


def test_first_login_shows_only_the_password_panel(app_db, ctx):
    from labeler.services.data import accounts
    from labeler.services.data.accounts import PasswordChangeRequired
    from labeler.services.serving.leaderboard import LeaderboardCache
    from labeler.ui.binding import bind
    from labeler.ui.session import quiet_before_password_change
    from labeler.ui.tabs import admin, arena, labelling, rank, rate
    from labeler.ui.tabs.chat import model_lists
    from storage import open_db

    db = open_db(app_db)
    db.execute("UPDATE users SET must_change_password = 1 WHERE username = ?", [ADMIN])
    db.conn.close()
    text, panel, main, *admin_tabs = header.whoami(ctx, ADMIN_TABS, request=as_user(ADMIN))
    assert panel["visible"] is True and main["visible"] is False
    # The server refuses everything else, whatever the browser shows.
    with pytest.raises(gr.Error, match="one-time password"):
        admin.refresh(ctx, request=as_user(ADMIN))
    # The user tabs' page loads and tab selects (the Rate tab is selected as the page opens) are refused with
    # PasswordChangeRequired, which quiet_before_password_change (their wiring: test_tabs.QUIET_BEFORE_PASSWORD_CHANGE)
    # turns into no change instead of a toast each: the page shows only the password form.
    caches = arena.ArenaCaches(LeaderboardCache())
    loads = [bind(rate.next_item, ctx), bind(rank.next_item, ctx), bind(model_lists.load, ctx),
             bind(arena.load, ctx, caches)]
    selects = [bind(labelling.guidelines, ctx, "rating"), bind(labelling.guidelines, ctx, "ranking")]
    for handler, n_outputs in [*[(load, 3) for load in loads], *[(select, 1) for select in selects]]:
        with pytest.raises(gr.Error, match="one-time password") as refused:
            handler(as_user(ADMIN))
        assert isinstance(refused.value.__cause__, PasswordChangeRequired), handler
        quiet = quiet_before_password_change(handler, n_outputs)(as_user(ADMIN))
        assert quiet == (gr.update() if n_outputs == 1 else (gr.update(),) * n_outputs), handler
    # Their buttons still refuse.
    with pytest.raises(gr.Error, match="one-time password"):
        rate.skip(ctx, "", request=as_user(ADMIN))
    with pytest.raises(gr.Error, match="current password"):
        header.change_own_password(ctx, "wrong", "new-password-1", "new-password-1", request=as_user(ADMIN))
    assert "Log in again" in header.change_own_password(ctx, "root-password-1", "new-password-1", "new-password-1",
                                                        request=as_user(ADMIN))
    text, panel, main, *admin_tabs = header.whoami(ctx, ADMIN_TABS, request=as_user(ADMIN))
    assert panel["visible"] is False and main["visible"] is True
    assert len(admin_tabs) == ADMIN_TABS and all(t["visible"] for t in admin_tabs)
    db = open_db(app_db)
    assert accounts.authenticate(db, ADMIN, "new-password-1") is not None
    db.conn.close()


@pytest.fixture
def fresh_ctx(db_path, tmp_path):
    """The context of a fresh install: one admin, the shipped model 'default' only."""
    from labeler.services.data import accounts
    from labeler.ui.context import ServeSettings, UIContext
    from storage import open_db

    db = open_db(db_path)
    accounts.create_user(db, ADMIN, "root-password-1", role="admin")
    db.conn.close()
    return UIContext(ServeSettings(db_path=db_path, model="default", runs_dir=str(tmp_path / "runs")))


def test_arena_waits_for_a_second_model_that_an_admin_registers(fresh_ctx, db_path, tiny_model_dir):
    """Issue 14 item 6: explain and disable Battle until two chat models exist; register one from Admin."""
    from labeler.services.serving.leaderboard import LeaderboardCache
    from labeler.ui.tabs import arena

    caches = arena.ArenaCaches(LeaderboardCache())
    model_1, model_2, board, note, start, _ = arena.load(fresh_ctx, caches, request=as_user(ADMIN))
    assert start["interactive"] is False and note["visible"] is True and "only one is registered" in note["value"]
    assert model_1["value"] == model_2["value"] == "(random)"  # no model name on screen before a vote
    with pytest.raises(gr.Error, match="only one is registered"):  # the endpoint refuses too
        arena.start_battle(fresh_ctx, caches, "Hi", "(random)", "(random)", 8, request=as_user(ADMIN))

    n_outputs = len(SHOWN) + 2  # the admin snapshot, then the name and folder boxes
    with pytest.warns(UserWarning, match="no such folder"):
        assert model_registry.register_model(fresh_ctx, "mine", "owner/hub-model", "", request=as_user(ADMIN)) == tuple(
            gr.skip() for _ in range(n_outputs))
    result = model_registry.register_model(fresh_ctx, "mine", str(tiny_model_dir), "default", request=as_user(ADMIN))
    assert len(result) == n_outputs and result[-2:] == ("", "")
    assert ["mine", "policy", "default"] == result[SHOWN.index("models_table")][-1][:3]
    assert query(db_path, "SELECT name, kind, base_model FROM models ORDER BY id") == [
        ("default", "base", None), ("mine", "policy", "default")]
    model_1, model_2, board, note, start, _ = arena.load(fresh_ctx, caches, request=as_user(ADMIN))
    assert start["interactive"] is True and note["visible"] is False
    assert model_1["choices"] == ["(random)", "default", "mine"]


def test_generate_for_the_last_import_batch_keeps_the_model_loaded(app_db, ctx, tiny_model_dir, tmp_path, monkeypatch):
    """Issue 14 item 5: the prompts just uploaded get the answers, and a second run loads nothing."""
    from labeler.services.serving import inference

    loads = []
    cache = ModelCache(loader=lambda path, kind, device: (loads.append(path), inference.load(path, kind, device))[1])
    upload = tmp_path / "fresh.txt"
    upload.write_text("Fresh prompt A\nFresh prompt B\n", encoding="utf-8")
    data_prompts.import_prompt_file(ctx, str(upload), request=as_user(ADMIN))  # prompts 3, 4; 1, 2 have no tiny answers

    part, values, sampling = generate_form(ctx)
    values[part.model] = str(tiny_model_dir)
    values[part.n_per_prompt] = 1
    values[sampling["max_new_tokens"]] = 4
    values[part.target] = generate.TARGET_LAST_IMPORT
    message, _ = generate.generate_answers(ctx, part, cache, values, request=as_user(ADMIN))
    assert "Generated **2** answers for the last import batch (2 prompts)" in message
    assert query(app_db, "SELECT prompt_id FROM responses WHERE model != 'fixed' ORDER BY id") == [(3,), (4,)]
    values[part.target] = generate.TARGET_ALL
    message, _ = generate.generate_answers(ctx, part, cache, values, request=as_user(ADMIN))
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
    summary, table, models, annotators, threshold, share, answer_tokens, length_note = data.refresh(ctx, admin_request)
    assert summary.startswith("Project **default**: **2** prompts (**2** to train on, **0** held out for evaluation)"
                              " · **6** answers")
    assert "No held-out prompts" in summary and (share, answer_tokens) == (0.1, 128)  # a chat project's length
    assert length_note == "Answer length: **128 tokens**, the default for chat projects."
    assert [row[1] for row in table] == ["Prompt two", "Prompt one"]  # newest first
    assert models["choices"][0] == "default" and annotators["choices"] == [ADMIN, ANNOTATOR]
    assert threshold["value"] == 4  # the 1..7 scale's midpoint
    with pytest.raises(gr.Error, match="not an admin"):  # the role check is the handler's own
        prompts.import_shipped(ctx, gr.Request(username=ANNOTATOR))
    assert data.tick(ctx, gr.Request(username=ANNOTATOR)) == (gr.skip(), gr.skip())


def test_the_data_tab_sets_the_held_out_share_before_the_first_label(app_db, ctx):
    """Issue 33: an admin sees how many prompts are held out and changes the share; labels freeze it."""
    from labeler.services.data import labeling
    from labeler.services.data import prompts as prompt_service
    from storage import open_db

    db = open_db(app_db)
    prompt_service.add_prompts(db, [f"Question number {i} about invoices?" for i in range(40)])
    db.conn.close()
    with pytest.raises(gr.Error, match="not an admin"):
        data_prompts.apply_heldout_share(ctx, 0.3, request=as_user(ANNOTATOR))
    summary, table = data_prompts.apply_heldout_share(ctx, 0.4, request=as_user(ADMIN))
    held = query(app_db, "SELECT COUNT(*) FROM prompts WHERE split = 'test'")[0][0]
    assert held == 21 and f"**{held}** held out for evaluation" in summary  # max(round(0.4 * 42), min(30, 42 // 2))
    assert "Held out: the rule holds 21 of 42 prompts out (at least 30, or half the prompts" in summary
    assert {row[3] for row in table} <= {"train", "held out"} and "held out" in {row[3] for row in table}
    db = open_db(app_db)
    item = labeling.next_item(db, "default", ANNOTATOR, "rating")
    labeling.submit_rating(db, "default", ANNOTATOR, item.item_id, 5)
    db.conn.close()
    with pytest.warns(UserWarning, match="has labels"):
        assert data_prompts.apply_heldout_share(ctx, 0.1, request=as_user(ADMIN)) == (gr.skip(), gr.skip())
    assert query(app_db, "SELECT COUNT(*) FROM prompts WHERE split = 'test'")[0][0] == 21


def test_admin_sets_the_answer_length_and_the_measure(app_db, ctx):
    """Issue 33: the project's answer length and measure from the Admin tab; a measure naming a missing reward
    model is refused naming those there are, and code (module:function) only from the command line."""
    base = (1, 7, 1, "", "", "chat", "arrival")
    shown = project_settings.save_project(ctx, *base, 96, "vader", request=as_user(ADMIN))
    assert shown[SHOWN.index("answer_tokens")] == 96 and shown[SHOWN.index("measure")]["value"] == "vader"
    assert ("people's blind comparisons", "people") in shown[SHOWN.index("measure")]["choices"]
    assert query(app_db, "SELECT answer_tokens, measure FROM projects") == [(96, "vader")]
    with pytest.warns(UserWarning, match="no reward model named 'rm-x'"):
        project_settings.save_project(ctx, *base, 96, "rm:rm-x", request=as_user(ADMIN))
    with pytest.warns(UserWarning, match="command line"):
        project_settings.save_project(ctx, *base, 96, "json:dumps", request=as_user(ADMIN))
    with pytest.warns(UserWarning, match="^Answer length \(tokens\): "):
        project_settings.save_project(ctx, *base, 0, "vader", request=as_user(ADMIN))
    assert query(app_db, "SELECT answer_tokens, measure FROM projects") == [(96, "vader")]
