"""The tabs' handlers called in-process (no server): the same functions the buttons and api_names reach.

Handlers are module functions called directly with the `ctx` fixture (a UIContext) and `as_user(name)`, a
gr.Request carrying the user name, which is all Gradio's login adds; the Data tab's generate and export also take
their form (a part built in a bare gr.Blocks). Only the wiring tests build the app and read its events
(`events(app)`): every event has an api_name, each api_name the tests' handlers stand for runs that handler
(WIRED), and the outputs are those the handlers return.
"""
from __future__ import annotations

import inspect
import json
import sqlite3
import stat
import zipfile
from pathlib import Path

import gradio as gr
import pytest
import yaml

from labeler.services.serving.chat import ModelCache
from labeler.errors import InputError
from labeler.ui import header
from labeler.ui.gold import parse_gold
from labeler.ui.session import quiet_before_password_change
from labeler.ui.tabs import admin, arena, data, labelling, rank, rate
from labeler.ui.tabs.admin import backup, model_registry, project_settings, quality, users
from labeler.ui.tabs.admin.snapshot import SHOWN
from labeler.ui.tabs.chat import model_lists
from labeler.ui.tabs.data import export as data_export
from labeler.ui.tabs.data import generate, label_files
from labeler.ui.tabs.data import prompts as data_prompts
from labeler.ui.tabs.rank import MAX_RESPONSES, order_from_ranks

ADMIN, ANNOTATOR = "root", "ann"


# ---------------------------------------------------------------------------------------------
# Pure helpers


def test_order_from_ranks_groups_ties_best_first():
    # ids 10, 11, 12 with ranks 2, 1, 2: 11 is best, 10 and 12 tie below it.
    assert order_from_ranks([10, 11, 12], ["2", "1", "2"]) == [[11], [10, 12]]
    # Gaps and dense numbering mean the same order: 1, 1, 3 == 1, 1, 2.
    assert order_from_ranks([5, 6, 7], [1, 1, 3]) == order_from_ranks([5, 6, 7], [1, 1, 2]) == [[5, 6], [7]]
    # A full order of four.
    assert order_from_ranks([1, 2, 3, 4], ["4", "3", "2", "1"]) == [[4], [3], [2], [1]]


@pytest.mark.parametrize("ranks, message", [(["1", None], "answer 2 has no rank"), (["1", "3"], "outside 1..2"),
                                            (["1", "x"], "not a whole number"), (["1"], "every answer needs a rank")])
def test_order_from_ranks_rejects_incomplete_or_bad_ranks(ranks, message):
    with pytest.raises(InputError, match=message):
        order_from_ranks([1, 2], ranks)


def test_parse_gold():
    assert parse_gold("6") == {"score": 6}
    assert parse_gold(" 3 > 1 = 2 ") == {"order": [[3], [1, 2]]}
    assert parse_gold('{"order": [[2], [1]]}') == {"order": [[2], [1]]}
    assert parse_gold("") is None
    for bad in ["good", "3 > x", "{not json", "[1, 2]"]:
        with pytest.raises(InputError):
            parse_gold(bad)


# ---------------------------------------------------------------------------------------------
# The app, in-process


@pytest.fixture
def app_db(db_path):
    """A database with an admin, an annotator, 2 prompts x 3 fixed answers and their items."""
    from labeler.services.data import accounts, labeling, prompts
    from storage import open_db, write_transaction

    db = open_db(db_path)
    accounts.create_user(db, ADMIN, "root-password-1", role="admin")
    accounts.create_user(db, ANNOTATOR, "ann-password-1")
    prompts.add_prompts(db, ["Prompt one", "Prompt two"], source="test")
    with write_transaction(db):
        for prompt_id in (1, 2):
            for k in range(3):
                db.execute("INSERT INTO responses (prompt_id, text, model) VALUES (?, ?, 'fixed')",
                           [prompt_id, f"answer {prompt_id}.{k}"])
    labeling.create_items(db, "default", ranking_size=3)
    db.conn.close()
    return db_path


@pytest.fixture
def app(app_db, tiny_model_dir, tmp_path):
    from labeler.ui.app import build_app
    from labeler.ui.context import ServeSettings

    return build_app(ServeSettings(db_path=app_db, model=str(tiny_model_dir), runs_dir=str(tmp_path / "runs")))


def context(db_path, tiny_model_dir, tmp_path):
    """What every tab handler takes first: the UIContext (settings as build_app gets them; no app, no pool)."""
    from labeler.ui.context import ServeSettings, UIContext

    return UIContext(ServeSettings(db_path=db_path, model=str(tiny_model_dir), runs_dir=str(tmp_path / "runs")))


@pytest.fixture
def ctx(app_db, tiny_model_dir, tmp_path):
    return context(app_db, tiny_model_dir, tmp_path)


def as_user(username: str | None) -> gr.Request:
    """The request Gradio passes a handler after a login: the user name is all that login adds."""
    return gr.Request(username=username)


def events(app) -> dict:
    """The built app's events by api_name: for the wiring tests only (the others call the handlers directly)."""
    by_name = {fn.api_name: fn for fn in app.fns.values()}
    assert len(by_name) == len(app.fns), "two events share an api_name"
    return by_name


# Where a Rank item's values are (rank/item_view.item_outputs, in rank_next's output order, checked by
# test_each_api_name_runs_the_handler_the_tests_call): banner, counter, prompt, then per answer slot its column,
# text and rank radio, then comment, guidelines, state, key.
RANK_FIRST_SLOT = 3
RANK_GUIDELINES = -3


def rank_slot(shown: tuple, slot: int) -> tuple:
    """(column, text, rank radio) of answer slot `slot` (1-based) in a Rank handler's outputs."""
    start = RANK_FIRST_SLOT + 3 * (slot - 1)
    return shown[start:start + 3]


def submit_ranks(ctx, state, key, *ranks, comment: str = "", user: str = ANNOTATOR):
    """The Rank tab's submit as Gradio calls it: the request comes before the ranks (rank.handlers.submit)."""
    return rank.submit(ctx, comment, state, key, as_user(user), *ranks)


def query(db_path: str, sql: str, params=()) -> list[tuple]:
    with sqlite3.connect(db_path) as conn:
        return conn.execute(sql, params).fetchall()


def test_every_event_has_an_explicit_api_name(app):
    names = [fn.api_name for fn in app.fns.values()]
    assert all(names), names
    for expected in ["rate_next", "rate_submit", "rate_skip", "rate_undo", "rank_next", "rank_submit",
                     "rank_skip", "rank_undo", "data_import_prompts", "data_generate", "data_export",
                     "data_import_labels", "admin_add_user", "admin_save_project", "admin_mark_gold", "admin_backup"]:
        assert expected in names


# The handler each event runs, for every api_name these tests (and test_header, test_admin_data_tabs,
# test_labelling_fixes, test_admin_merge) call a handler for directly: so those calls test what the browser calls.
WIRED = {
    "rate_next": rate.next_item, "rate_load": rate.load_item, "rate_submit": rate.submit, "rate_skip": rate.skip,
    "rate_undo": rate.undo, "rate_guidelines": labelling.guidelines,
    "rank_next": rank.next_item, "rank_load": rank.load_item, "rank_submit": rank.submit, "rank_skip": rank.skip,
    "rank_undo": rank.undo, "rank_guidelines": labelling.guidelines,
    "rate_select": labelling.on_select, "rank_select": labelling.on_select,
    "arena_load": arena.load, "arena_start": arena.start_battle, "chat_load": model_lists.load,
    "data_import_prompts": data_prompts.import_prompt_file,
    "data_import_shipped": data_prompts.import_shipped, "data_generate": generate.generate_answers,
    "data_apply_heldout_share": data_prompts.apply_heldout_share,
    "data_refit_length": generate.refit_length, "data_fit_length_after_import": generate.fit_after_import,
    "data_export": data_export.export_labels, "data_export_threshold": data_export.export_threshold,
    "data_import_labels": label_files.import_labels,
    "admin_refresh": admin.refresh, "admin_add_user": users.add_user,
    "admin_save_project": project_settings.save_project,
    "admin_mark_gold": quality.mark_gold, "admin_backup": backup.download_backup,
    "admin_register_model": model_registry.register_model, "admin_merge_adapter": model_registry.merge_adapter,
    "whoami": header.whoami, "first_steps": header.first_steps, "first_steps_timer": header.first_steps_tick,
    "first_steps_tick": header.first_steps_tick, "change_own_password": header.change_own_password,
}
# The user tabs' page loads and tab selects: quiet (no toast) while the password is a one-time one.
QUIET_BEFORE_PASSWORD_CHANGE = ["rate_load", "rank_load", "chat_load", "arena_load", "rate_guidelines",
                                "rank_guidelines"]


def wrapped_chain(fn) -> list:
    """fn, then what it wraps (functools.wraps' __wrapped__), down to the handler: decorators, bind, the handler."""
    chain = [fn]
    while hasattr(chain[-1], "__wrapped__"):
        chain.append(chain[-1].__wrapped__)
    return chain


def test_each_api_name_runs_the_handler_the_tests_call(app):
    by_name = events(app)
    for api_name, handler in WIRED.items():
        assert inspect.unwrap(by_name[api_name].fn) is inspect.unwrap(handler), api_name
    # Every decorator wrapper made by quiet_before_password_change shares its inner function's code.
    quiet_code = quiet_before_password_change(rate.next_item, 1).__code__
    for api_name in QUIET_BEFORE_PASSWORD_CHANGE:
        assert by_name[api_name].fn.__code__ is quiet_code, api_name
    # bind's leading arguments: the guidelines of the tab's own label kind.
    for api_name, kind in [("rate_guidelines", "rating"), ("rank_guidelines", "ranking")]:
        bound = wrapped_chain(by_name[api_name].fn)[1]
        assert inspect.getclosurevars(bound).nonlocals["leading"][1:] == (kind,), api_name
    # A wrapper that stands in for the outputs when it refuses (keep_on_error, quiet_*) answers as many as the
    # event has: a direct call's gr.skip() tuple is then what the browser gets.
    for event in app.fns.values():
        for fn in wrapped_chain(event.fn) if inspect.isfunction(event.fn) else []:
            n_outputs = inspect.getclosurevars(fn).nonlocals.get("n_outputs") if inspect.isfunction(fn) else None
            if n_outputs is not None:
                assert n_outputs == len(event.outputs), event.api_name
    # The output positions the direct tests read.
    rank_ids = [getattr(block, "elem_id", None) for block in by_name["rank_next"].outputs]
    for slot in range(1, MAX_RESPONSES + 1):
        assert rank_slot(rank_ids, slot)[1:] == [f"rank-text-{slot}", f"rank-slot-{slot}"], slot
    assert rank_ids[RANK_GUIDELINES] == "rank-guidelines"
    admin_ids = [getattr(block, "elem_id", None) for block in by_name["admin_refresh"].outputs]
    assert [admin_ids[SHOWN.index(name)] for name in ("guidelines", "ranking_guidelines")] == [
        "admin-guidelines", "admin-ranking-guidelines"]
    assert [getattr(block, "elem_id", None) for block in by_name["first_steps"].outputs] == ["studio-first-steps"]
    assert [getattr(block, "elem_id", None) for block in by_name["whoami"].outputs[:3]] == [
        "studio-whoami", "studio-password-panel", "studio-main"]
    assert {block.id for block in by_name["whoami"].outputs[3:]} == {"admin", "data", "records", "train"}
    for api_name in ("rate_guidelines", "rank_guidelines", "first_steps", "first_steps_tick"):
        assert by_name[api_name].show_progress == "hidden", api_name


def test_admin_tabs_start_hidden(app):
    # Revealed on load for admins only (Gradio 6.31 cannot hide a shown tab from an event).
    tabs = {block.id: block for block in app.blocks.values() if isinstance(block, gr.Tab)}
    assert tabs["rate"].visible and tabs["rank"].visible
    assert not tabs["admin"].visible and not tabs["data"].visible


def test_rate_submit_stores_one_label_per_request_id_and_returns_the_next_item(app_db, ctx):
    shown = rate.next_item(ctx, request=as_user(ANNOTATOR))
    key = shown[6]
    assert shown[3] == "answer 1.0" and key.startswith("1:")
    after = rate.submit(ctx, 4, " fine ", key, request=as_user(ANNOTATOR))
    # One round trip: the answer is the next item, with its own key, and the counter counts the label.
    assert after[3] == "answer 1.1" and after[6].startswith("2:") and after[1].startswith("**1** done")
    # A double click or a retry sends the same key again: still one label, no error, the same next item.
    again = rate.submit(ctx, 4, " fine ", key, request=as_user(ANNOTATOR))
    assert again[3] == "answer 1.1" and again[1].startswith("**1** done")
    assert query(app_db, "SELECT response_id, score, comment FROM ratings") == [(1, 4.0, "fine")]
    # seconds: the time since the item was shown, measured on the server.
    assert query(app_db, "SELECT seconds >= 0 FROM ratings") == [(1,)]


def test_rate_submit_refuses_an_item_not_shown_to_the_user_and_a_bad_key(app_db, ctx):
    rate.next_item(ctx, request=as_user(ANNOTATOR))  # item 1 is shown
    # Refused with a warning that says why, and the user's item is shown again (the keyboard goes on).
    with pytest.warns(UserWarning, match="item 3 is not assigned to 'ann'"):
        shown = rate.submit(ctx, 4, "", "3:made-up-key", request=as_user(ANNOTATOR))
    assert shown[6].startswith("1:")
    with pytest.raises(gr.Error, match="expected the key of the item shown"):
        rate.submit(ctx, 4, "", "not a key", request=as_user(ANNOTATOR))
    assert query(app_db, "SELECT COUNT(*) FROM ratings") == [(0,)]


def test_keyboard_handlers_hide_the_progress_overlay_and_send_only_the_item(app, app_db, ctx):
    by_name = events(app)
    for api_name in ["rate_submit", "rate_skip", "rate_undo", "rank_submit", "rank_skip", "rank_undo"]:
        assert by_name[api_name].show_progress == "hidden", api_name
    # Rate's submit and skip bypass Gradio's pre/postprocessing and update the first seven widgets only.
    for api_name in ["rate_submit", "rate_skip"]:
        event = by_name[api_name]
        assert (event.preprocess, event.postprocess) == (False, False), api_name
        assert [b.elem_id for b in event.outputs] == [b.elem_id for b in by_name["rate_next"].outputs[:7]]
    shown = rate.next_item(ctx, request=as_user(ANNOTATOR))
    after = rate.submit(ctx, 5, "", shown[6], request=as_user(ANNOTATOR))
    # Plain values only: no banner to show, no score picked, an empty comment box, the next item's key.
    assert after == ("", "**1** done · **5** remaining", "### Prompt\nPrompt one", "answer 1.1", None, "", after[6])
    assert after[6].startswith("2:")


def test_rate_submit_takes_the_score_as_sent_and_the_service_checks_it(app_db, ctx):
    """No Gradio preprocessing: a score off the scale, a text or a fraction is refused by the service's check."""
    key = rate.next_item(ctx, request=as_user(ANNOTATOR))[6]
    for bad, message in [(9, "between 1 and 7"), ("4", "must be a number"), (4.5, "whole number")]:
        with pytest.raises(gr.Error, match=message):
            rate.submit(ctx, bad, "", key, request=as_user(ANNOTATOR))
    with pytest.raises(gr.Error, match="expected the key"):
        rate.submit(ctx, 4, "", 17, request=as_user(ANNOTATOR))
    assert query(app_db, "SELECT COUNT(*) FROM ratings") == [(0,)]
    rate.submit(ctx, 4.0, "", key, request=as_user(ANNOTATOR))  # a slider's float
    assert query(app_db, "SELECT score FROM ratings") == [(4.0,)]


def test_rank_submit_turns_rank_numbers_into_one_ranking(app_db, ctx):
    shown = rank.next_item(ctx, request=as_user(ANNOTATOR))
    state, key = shown[-2], shown[-1]
    ids = state["response_ids"]  # in the order shown
    assert sorted(ids) == [1, 2, 3]
    submit_ranks(ctx, state, key, "3", "1", "1")
    submit_ranks(ctx, state, key, "3", "1", "1")  # a retry: still one ranking
    # Shown second and third tie for best, shown first is worst.
    assert [json.loads(row[0]) for row in query(app_db, "SELECT order_json FROM rankings")] == [
        [sorted(ids[1:]), [ids[0]]]
    ]


@pytest.fixture
def ctx_eight(db_path, tiny_model_dir, tmp_path):
    """The context of a database whose one ranking item holds 8 answers (labeling.MAX_RANKING_SIZE)."""
    from labeler.services.data import accounts, labeling, prompts
    from storage import open_db, write_transaction

    db = open_db(db_path)
    accounts.create_user(db, ANNOTATOR, "ann-password-1")
    prompts.add_prompts(db, ["Prompt eight"], source="test")
    with write_transaction(db):
        for k in range(8):
            db.execute("INSERT INTO responses (prompt_id, text, model) VALUES (1, ?, 'fixed')", [f"answer {k}"])
    labeling.create_items(db, "default", ranking_size=8, kinds=("ranking",))
    db.conn.close()
    return context(db_path, tiny_model_dir, tmp_path)


def test_rank_view_shows_and_stores_a_ranking_of_eight(ctx_eight, db_path):
    assert MAX_RESPONSES == 8
    shown = rank.next_item(ctx_eight, request=as_user(ANNOTATOR))
    state, key = shown[-2], shown[-1]
    ids = state["response_ids"]
    assert sorted(ids) == list(range(1, 9))
    for slot in range(1, 9):  # every slot shown, each offering ranks 1..8
        column, text, radio = rank_slot(shown, slot)
        assert column["visible"] is True and radio["choices"] == [str(r) for r in range(1, 9)], slot
        assert text.startswith(f"#### Answer {slot}")
    # A missing rank is refused (a ninth value is no rank: the project's questions follow rank_8, the correction
    # first; a rank too many for a smaller item: test_rank_submit_refuses_ranks_for_answers_not_shown).
    with pytest.raises(gr.Error, match="answer 8 has no rank"):
        submit_ranks(ctx_eight, state, key, *"1234567", None)  # as Gradio sends an unpicked radio
    assert query(db_path, "SELECT COUNT(*) FROM rankings") == [(0,)]
    # Shown 1st and 2nd tie for worst (rank 8), the others best to worst in the order shown.
    submit_ranks(ctx_eight, state, key, "8", "8", "1", "2", "3", "4", "5", "6")
    assert [json.loads(row[0]) for row in query(db_path, "SELECT order_json FROM rankings")] == [
        [[ids[2]], [ids[3]], [ids[4]], [ids[5]], [ids[6]], [ids[7]], sorted(ids[:2])]
    ]


def test_rank_submit_api_names_its_eight_ranks_and_only_the_shown_ones_are_needed(app):
    """gradio_client callers pass the comment, the item key and one rank per answer shown; the other ranks
    default to None (the state is not an API parameter), and so do the project's questions after them."""
    info = app.get_api_info()["named_endpoints"]["/rank_submit"]["parameters"]
    assert [(p["parameter_name"], p["parameter_has_default"]) for p in info][:10] == [
        ("comment_value", False), ("key_value", False), *[(f"rank_{k}", True) for k in range(1, 9)],
    ]
    assert all(p["parameter_has_default"] for p in info[10:]) and info[10]["parameter_name"] == "correction"


def test_rank_submit_refuses_ranks_for_answers_not_shown(app_db, ctx):
    *_, state, key = rank.next_item(ctx, request=as_user(ANNOTATOR))  # 3 answers
    with pytest.raises(gr.Error, match="has 3 answers"):
        submit_ranks(ctx, state, key, "1", "2", "3", "4")
    assert query(app_db, "SELECT COUNT(*) FROM rankings") == [(0,)]


def test_handlers_refuse_anonymous_and_annotators_on_admin_actions(app_db, ctx):
    with pytest.raises(gr.Error, match="not logged in"):
        rate.next_item(ctx, request=as_user(None))
    for handler, args in [(users.add_user, ("eve", "eve-password-1", "admin")), (backup.download_backup, ()),
                          (data_prompts.import_shipped, ()), (quality.mark_gold, (1, "5"))]:
        with pytest.raises(gr.Error, match="not an admin"):
            handler(ctx, *args, request=as_user(ANNOTATOR))
    assert query(app_db, "SELECT COUNT(*) FROM users WHERE username = 'eve'") == [(0,)]
    assert query(app_db, "SELECT COUNT(*) FROM prompts") == [(2,)]
    assert query(app_db, "SELECT gold_json FROM items WHERE id = 1") == [(None,)]


def test_prompt_upload_bad_file_names_the_line_and_writes_nothing(app_db, tmp_path, ctx):
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"prompt": 3}\n', encoding="utf-8")
    # A warning toast, not an error: the tab's tables stay (issue 14 item 7); the name is the upload's own.
    with pytest.warns(UserWarning, match="prompts.jsonl, line 2"):
        assert data_prompts.import_prompt_file(ctx, str(bad), request=as_user(ADMIN)) == (gr.skip(), gr.skip())
    assert query(app_db, "SELECT COUNT(*) FROM prompts") == [(2,)]

    good = tmp_path / "more.txt"
    good.write_text("A third prompt\nPrompt one\n", encoding="utf-8")
    summary, table = data_prompts.import_prompt_file(ctx, str(good), request=as_user(ADMIN))
    assert "**3** prompts" in summary
    assert query(app_db, "SELECT text, source FROM prompts WHERE id = 3") == [("A third prompt", "more.txt")]


def generate_form(ctx) -> tuple[generate.GeneratePart, dict, dict]:
    """The Data tab's generate form built alone, its values as the browser sends them by default ({widget: value})
    and its sampling widgets by field name."""
    with gr.Blocks():
        part = generate.build_generate(ctx)
    sampling = dict(zip([spec.name for spec in part.specs], part.settings))
    return part, {widget: widget.value for widget in part.inputs}, sampling


def test_generate_shows_the_projects_answer_length_marked_as_the_projects(app_db, ctx):
    from labeler.services.data import projects
    from storage import open_db

    db = open_db(app_db)
    projects.update_project(db, ctx.project, answer_tokens=32)
    db.conn.close()
    part, values, sampling = generate_form(ctx)
    assert values[sampling["max_new_tokens"]] == 32  # not GenerationSettings' 48: what the answers are made with
    assert sampling["max_new_tokens"].info.startswith("The project's answer length")


def export_form() -> tuple[data_export.ExportPart, dict]:
    """The Data tab's export form built alone and its default values ({widget: value})."""
    with gr.Blocks():
        part = data_export.build_export()
    return part, {widget: widget.value for widget in part.inputs}


def test_generate_with_the_tiny_model_fills_the_queues(app_db, tiny_model_dir, ctx):
    part, values, sampling = generate_form(ctx)
    cache = ModelCache()
    values[part.n_per_prompt] = 2
    values[sampling["max_new_tokens"]] = 4
    values[part.model] = "tiny-dir"
    # An unknown model name is refused before anything is loaded.
    with pytest.warns(UserWarning, match="tiny-dir"):
        generate.generate_answers(ctx, part, cache, values, request=as_user(ADMIN))
    values[part.model] = str(tiny_model_dir)
    message, summary = generate.generate_answers(ctx, part, cache, values, request=as_user(ADMIN))
    assert "Generated **4** answers" in message  # 2 prompts x 2 answers
    assert query(app_db, "SELECT COUNT(*) FROM responses WHERE model != 'fixed'") == [(4,)]
    new_items = query(app_db, "SELECT COUNT(*) FROM items WHERE kind = 'rating'")[0][0]
    assert new_items == 6 + 4


def test_export_preferences_downloads_the_ranking_pairs(app_db, ctx):
    *_, state, key = rank.next_item(ctx, request=as_user(ANNOTATOR))
    ids = state["response_ids"]
    submit_ranks(ctx, state, key, "1", "2", "3")
    part, values = export_form()
    values[part.kind], values[part.fmt] = "preferences", "jsonl"
    path, message = data_export.export_labels(ctx, part, values, request=as_user(ADMIN))
    rows = [json.loads(line) for line in Path(path).read_text().splitlines()]
    text = dict(query(app_db, "SELECT id, text FROM responses"))
    # A strict order of 3 gives 3 pairs: 1st > 2nd, 1st > 3rd, 2nd > 3rd.
    expected = {(text[ids[0]], text[ids[1]]), (text[ids[0]], text[ids[2]]), (text[ids[1]], text[ids[2]])}
    assert {(row["chosen"], row["rejected"]) for row in rows} == expected
    assert {row["prompt"] for row in rows} == {"Prompt one"}
    assert "**3** preferences rows" in message


def test_admin_settings_gold_and_backup(app_db, ctx):
    snapshot = project_settings.save_project(ctx, 1, 5, 2, "Be **strict**.", request=as_user(ADMIN))
    assert snapshot[2:6] == (1, 5, 2, "Be **strict**.")
    assert query(app_db, "SELECT likert_min, likert_max, overlap, guidelines FROM projects") == [(1, 5, 2, "Be **strict**.")]
    # The Rate tab now offers 1..5 and shows the new guidelines.
    shown = rate.next_item(ctx, request=as_user(ANNOTATOR))
    assert [value for _, value in shown[4]["choices"]] == [1, 2, 3, 4, 5]
    assert shown[-1] == "Be **strict**."  # the guidelines: the last output (the questions come before)
    # An inverted scale is refused and nothing changes.
    with pytest.warns(UserWarning, match="likert"):
        project_settings.save_project(ctx, 5, 1, 1, "", request=as_user(ADMIN))
    assert query(app_db, "SELECT likert_min, likert_max FROM projects") == [(1, 5)]

    quality.mark_gold(ctx, 1, "4", request=as_user(ADMIN))
    assert query(app_db, "SELECT gold_json FROM items WHERE id = 1") == [(json.dumps({"score": 4}),)]

    backup_path = backup.download_backup(ctx, request=as_user(ADMIN))
    assert query(backup_path, "SELECT username FROM users ORDER BY id") == [(ADMIN,), (ANNOTATOR,)]


def test_export_filters_and_labels_import(app_db, tmp_path, ctx):
    *_, state, key = rank.next_item(ctx, request=as_user(ANNOTATOR))
    submit_ranks(ctx, state, key, "1", "2", "3")
    part, values = export_form()
    # Only the admin's labels: the admin labelled nothing, so there is nothing to export.
    values[part.annotators] = [ADMIN]
    with pytest.raises(gr.Error, match="nothing to export"):
        data_export.export_labels(ctx, part, values, request=as_user(ADMIN))
    values[part.annotators] = [ANNOTATOR]
    values[part.fmt] = "hf"
    values[part.options["license"]] = "CC BY 4.0"  # not a Hub license id: refused, naming the field
    with pytest.raises(gr.Error, match="license"):
        data_export.export_labels(ctx, part, values, request=as_user(ADMIN))
    values[part.options["license"]] = "cc-by-4.0"
    path, message = data_export.export_labels(ctx, part, values, request=as_user(ADMIN))
    assert path.endswith(".zip") and "**3** preferences rows" in message  # a saved datasets folder, zipped
    folder = Path(path[:-len(".zip")])
    # Private like the CSV exports (issue 36 item 8: the zip was 0644, its folders 0755).
    assert {stat.S_IMODE(p.stat().st_mode) for p in [folder, *folder.rglob("*")] if p.is_dir()} == {0o700}
    assert {stat.S_IMODE(p.stat().st_mode) for p in [Path(path), *folder.rglob("*")] if p.is_file()} == {0o600}
    with zipfile.ZipFile(path) as archive:
        card = next(archive.read(name).decode() for name in archive.namelist() if name.endswith("README.md"))
    assert yaml.safe_load(card.split("---")[1])["license"] == "cc-by-4.0"  # the dataset card's front matter

    pairs = tmp_path / "prefs.jsonl"
    pairs.write_text(
        '{"prompt": "Imported prompt", "chosen": "kind answer", "rejected": "rude answer"}\n'
        '{"prompt": "Imported prompt", "chosen": "same", "rejected": "same"}\n',
        encoding="utf-8",
    )
    message, summary = label_files.import_labels(ctx, str(pairs), request=as_user(ADMIN))
    assert "Imported **1** preference pairs" in message and "1 with chosen = rejected dropped" in message
    assert query(app_db, "SELECT COUNT(*) FROM rankings WHERE source != 'annotator'") == [(1,)]
    assert "**3** prompts" in summary and "**2** rankings" in summary


def test_refresh_resumes_and_a_waiting_run_shows_a_banner(app_db, ctx):
    from labeler.services.data import labeling
    from storage import open_db, write_transaction

    first = rate.next_item(ctx, request=as_user(ANNOTATOR))
    assert first[0] == ""  # no banner (studio.css hides it while empty)
    # A page refresh (a new session) gets the same pending item back from SQLite.
    assert rate.next_item(ctx, request=as_user(ANNOTATOR))[3] == first[3]

    db = open_db(app_db)
    with write_transaction(db):
        run_id = db.execute("INSERT INTO runs (project_id, stage, status) VALUES (1, 'ppo', 'running')").lastrowid
        response_id = db.execute(
            "INSERT INTO responses (prompt_id, text, model, run_id) VALUES (1, 'a rollout', 'policy', ?)", [run_id]
        ).lastrowid
    labeling.create_items(db, "default", [response_id], kinds=("rating",), priority=10, run_id=run_id)
    db.conn.close()
    # Skip the pending item: the run's rollout comes next (higher priority), with the banner.
    shown = rate.skip(ctx, first[6], request=as_user(ANNOTATOR))
    assert shown[3] == "a rollout"
    assert shown[0] == (f"⏳ Your labels are training the model **ppo-run{run_id}** right now (training run "
                        f"**#{run_id}**, waiting for **1** more labels): its answers come first.")


def test_a_ranking_of_a_running_run_says_which_model_it_trains_until_the_run_ends(app_db, ctx):
    from labeler.services.data import labeling
    from storage import open_db, write_transaction

    db = open_db(app_db)
    with write_transaction(db):
        config = json.dumps({"job": {"output_name": "kind-reviewer"}, "trainer": {}})
        run_id = db.execute("INSERT INTO runs (project_id, stage, status, config_json) VALUES (1, 'ppo', 'running', ?)",
                            [config]).lastrowid
        ids = [db.execute("INSERT INTO responses (prompt_id, text, model, run_id) VALUES (2, ?, 'policy', ?)",
                          [f"rollout {k}", run_id]).lastrowid for k in range(2)]
    labeling.create_items(db, "default", ids, kinds=("ranking",), priority=10, run_id=run_id)
    shown = rank.next_item(ctx, request=as_user(ANNOTATOR))
    assert {r["text"] for r in labeling.next_item(db, "default", ANNOTATOR, "ranking").responses} == {"rollout 0",
                                                                                                      "rollout 1"}
    assert shown[0].startswith(f"⏳ Your labels are training the model **kind-reviewer** right now (training run "
                               f"**#{run_id}**")
    # The run ended (cancelled, finished): its items are ordinary ones, no banner.
    db.execute("UPDATE runs SET status = 'cancelled' WHERE id = ?", [run_id])
    db.conn.close()
    assert rank.next_item(ctx, request=as_user(ANNOTATOR))[0] == ""


def test_unpaired_export_threshold_defaults_to_the_scale_midpoint_like_the_cli(app_db, ctx):
    """Issue 14 item 2: the form's threshold box showed 0 and every answer came out good."""
    from labeler.services.labels import export
    from labeler.services.data import labeling
    from storage import open_db

    db = open_db(app_db)
    for score in (2, 3, 6):  # on 1..7: below, below and above the midpoint 4
        item = labeling.next_item(db, "default", ANNOTATOR)
        labeling.submit_rating(db, "default", ANNOTATOR, item.item_id, score)
    cli_rows = export.unpaired_rows(db)  # what `rlhf-studio export --kind unpaired` writes with no --threshold
    db.conn.close()
    assert [row["label"] for row in cli_rows] == [False, False, True]

    loaded = data.load(ctx, request=as_user(ADMIN))
    assert loaded[-4]["value"] == 4.0 and "midpoint" in loaded[-4]["info"]
    part, values = export_form()
    values[part.options["threshold"]] = loaded[-4]["value"]  # what the page shows after loading, sent back
    values[part.kind], values[part.fmt] = "unpaired", "jsonl"
    path, _ = data_export.export_labels(ctx, part, values, request=as_user(ADMIN))
    assert [json.loads(line) for line in Path(path).read_text().splitlines()] == cli_rows
    # z-scores move the scale, and the default with it (0); back off, the midpoint again.
    assert data_export.export_threshold(ctx, True, request=as_user(ADMIN))["value"] == 0.0
    assert data_export.export_threshold(ctx, False, request=as_user(ADMIN))["value"] == 4.0
