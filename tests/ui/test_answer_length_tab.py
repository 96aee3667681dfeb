"""Issue 45 item 3 in the Data tab: a chat project's first import is followed by its answer length fitted from the
model's own answers (never fatal), shown with where it came from, and refitted by a button. The tiny random model
stands in (it never ends an answer: the cap is the length); the cap is made small to keep the sampling short."""
from __future__ import annotations

import gradio as gr
import pytest
from test_tabs import ADMIN, ANNOTATOR, app, app_db, as_user, ctx, events, generate_form, query  # noqa: F401

from labeler.services.serving import answer_length
from labeler.services.serving.chat import ModelCache
from labeler.ui.tabs.data import generate
from labeler.ui.tabs.data import prompts as data_prompts

ORIGIN = "fitted from 2 of the base model's answers: 0% end within 16 tokens, the cap (the longer ones are cut)"


@pytest.fixture
def small_fit(monkeypatch):
    monkeypatch.setattr(answer_length, "FIT_SAMPLE", 4)
    monkeypatch.setattr(answer_length, "FIT_CAP", 16)  # Refit's
    monkeypatch.setattr(answer_length, "AUTO_FIT_CAP", 16)  # the import's


def test_the_import_is_followed_by_the_fit_of_the_answer_length(app):
    by_name = events(app)
    fit = by_name["data_fit_length_after_import"]
    imports = list(app.fns).index(next(k for k, fn in app.fns.items() if fn.api_name == "data_import_prompts"))
    assert fit.trigger_after == imports  # the browser runs it after each import; it fits only while needed
    refit = by_name["data_refit_length"]
    assert {block.elem_id for block in refit.outputs} >= {"data-answer-length"}


def test_a_chat_projects_first_import_fits_its_length_once(app_db, ctx, tmp_path, small_fit):
    part, values, _ = generate_form(ctx)
    cache = ModelCache(slots=1)
    with pytest.raises(gr.Error, match="not an admin"):
        generate.fit_after_import(ctx, part, cache, values, request=as_user(ANNOTATOR))
    # app_db's two prompts are in; the project's length is still chat's default: the server's model answers them.
    note, tokens, summary = generate.fit_after_import(ctx, part, cache, values, request=as_user(ADMIN))
    assert (note, tokens) == (f"Answer length: **16 tokens**, {ORIGIN}.", 16)
    assert query(app_db, "SELECT answer_tokens, answer_tokens_origin FROM projects") == [(16, ORIGIN)]
    # The next import keeps it: nothing loads, nothing changes.
    upload = tmp_path / "more.txt"
    upload.write_text("A third prompt\n", encoding="utf-8")
    data_prompts.import_prompt_file(ctx, str(upload), request=as_user(ADMIN))
    values[part.model] = "/no/such/model"
    note, tokens, _ = generate.fit_after_import(ctx, part, cache, values, request=as_user(ADMIN))
    assert (note, tokens) == (f"Answer length: **16 tokens**, {ORIGIN}.", 16)


def test_a_model_that_does_not_load_keeps_the_default_and_refit_says_why(app_db, ctx, tmp_path):
    part, values, _ = generate_form(ctx)
    values[part.model] = str(tmp_path / "no-model")
    with pytest.warns(UserWarning, match="kept 128 tokens .* could not be sampled"):  # gr.Warning outside an event
        note, tokens, _ = generate.fit_after_import(ctx, part, ModelCache(slots=1), values, request=as_user(ADMIN))
    assert (note, tokens) == ("Answer length: **128 tokens**, the default for chat projects.", 128)
    assert query(app_db, "SELECT answer_tokens, answer_tokens_origin FROM projects") == [(128, "")]
    with pytest.warns(UserWarning, match="could not be sampled"):
        generate.refit_length(ctx, part, ModelCache(slots=1), values, request=as_user(ADMIN))


def test_refit_replaces_a_length_set_by_hand(app_db, ctx, small_fit):
    from labeler.services.data import projects
    from storage import open_db

    db = open_db(app_db)
    projects.update_project(db, ctx.project, answer_tokens=64)
    db.conn.close()
    part, values, _ = generate_form(ctx)
    cache = ModelCache(slots=1)
    note, tokens, _ = generate.fit_after_import(ctx, part, cache, values, request=as_user(ADMIN))
    assert (note, tokens) == ("Answer length: **64 tokens**, set by hand.", 64)  # a person's length is not refitted
    note, tokens, _ = generate.refit_length(ctx, part, cache, values, request=as_user(ADMIN))
    assert (note, tokens) == (f"Answer length: **16 tokens**, {ORIGIN}.", 16)
    with pytest.raises(gr.Error, match="not an admin"):
        generate.refit_length(ctx, part, cache, values, request=as_user(ANNOTATOR))
