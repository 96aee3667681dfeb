"""Issue 37 item 4, in-process: views that follow what happened since the page loaded. The Train tab's pickers and
Admin > Models read the registry again when their tab is selected. (Records' Refresh with the filters shown:
test_records_tab; the "Run #N queued" notice that goes once the run has ended: test_train_form_layout_browser.)"""
from __future__ import annotations

import gradio as gr
from test_tabs import ADMIN, app, app_db, as_user, ctx, events  # noqa: F401 - fixtures

from labeler.services.serving import models
from labeler.ui.tabs import train
from labeler.ui.tabs.admin import model_registry
from labeler.ui.tabs.train import monitor


def _register(db_path: str, name: str, kind: str, folder: str) -> None:
    from storage import open_db

    db = open_db(db_path)
    models.register_model(db, name, folder, kind)
    db.conn.close()


def test_a_model_registered_after_the_page_loaded_is_offered_when_the_tab_is_selected(ctx, app_db, tiny_model_dir):
    before = train.load_choices(ctx, request=as_user(ADMIN))
    assert "policy-later" not in before[0]["choices"]
    _register(app_db, "policy-later", "base", str(tiny_model_dir))
    _register(app_db, "rm-later", "reward", str(tiny_model_dir))
    model, reward, inspect_model, run = train.refresh_choices(ctx, request=as_user(ADMIN))
    assert "policy-later" in model["choices"] and "rm-later" in inspect_model["choices"]
    assert "rm:rm-later" in [value for _, value in reward["choices"]]
    # Choices only: what the admin picked stays picked.
    assert not {"value"} & (set(model) | set(reward) | set(inspect_model) | set(run))
    table, base = model_registry.models_view(ctx, request=as_user(ADMIN))
    assert {"policy-later", "rm-later"} <= {row[0] for row in table} and "policy-later" in base["choices"]
    assert "value" not in base


def test_the_tab_selects_are_wired(app):
    by_name = events(app)
    assert [b.elem_id for b in by_name["admin_models_view"].outputs] == ["admin-models", "admin-model-base"]
    assert [b.elem_id for b in by_name["train_refresh_choices"].outputs] == [
        b.elem_id for b in by_name["train_choices"].outputs]
    # The launch notice's fade runs in the browser only (monitor.FADE_NOTICE_JS; tested in
    # tests/e2e/test_train_form_layout_browser.py).
    assert [b.elem_id for b in by_name["train_notice"].outputs] == ["train-notice"]
    assert by_name["train_notice"].fn is None and by_name["train_notice"].js == monitor.FADE_NOTICE_JS

