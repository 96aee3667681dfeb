"""Issue 37 item 4, in-process: views that follow what happened since the page loaded. The Train tab's pickers and
Admin > Models read the registry again when their tab is selected; the "Run #N queued" notice goes once the run
has ended. (Records' Refresh with the filters shown: test_records_tab.)"""
from __future__ import annotations

import gradio as gr
from test_tabs import ADMIN, ANNOTATOR, app, app_db, as_user, ctx, events  # noqa: F401 - fixtures

from labeler.services import models, runs
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
    assert [b.elem_id for b in by_name["train_notice"].outputs] == ["train-notice"]


def test_the_launch_notice_goes_once_its_run_has_ended(ctx, app_db):
    from storage import open_db

    db = open_db(app_db)
    run_id = db.execute("INSERT INTO runs (project_id, stage, status) VALUES (1, 'rm', 'running')").lastrowid
    db.conn.close()
    notice = f"Run **#{run_id}** queued (another run is in progress)."
    assert isinstance(monitor.fade_notice(ctx, notice, as_user(ADMIN)), type(gr.skip()))
    db = open_db(app_db)
    db.execute("UPDATE runs SET status = 'succeeded' WHERE id = ?", [run_id])
    db.conn.commit()
    assert runs.get_run(db, run_id).finished
    db.conn.close()
    assert monitor.fade_notice(ctx, notice, as_user(ADMIN)) == ""
    # Other notices (a cancel's, an error) stay; an annotator's tick changes nothing.
    assert isinstance(monitor.fade_notice(ctx, f"Run **#{run_id}** cancelled: cancelled.", as_user(ADMIN)),
                      type(gr.skip()))
    assert isinstance(monitor.fade_notice(ctx, notice, as_user(ANNOTATOR)), type(gr.skip()))
