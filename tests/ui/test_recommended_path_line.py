"""The Train tab's line above the stage picker: which path (DPO, or a reward model then PPO) suits the person's
project and this machine (issue 45 item 4)."""
from __future__ import annotations

import gradio as gr
import pytest
from helpers import rank_good_over_bad

from labeler.ui.context import ServeSettings, UIContext
from labeler.ui.tabs import train

ADMIN = "root"


@pytest.fixture
def ctx(db_path, tmp_path):
    """An admin who ranked the two answers of each of 3 prompts in 'default' (3 rankings, 3 pairs); 'other' empty."""
    from labeler.services.data import accounts, projects
    from storage import open_db

    db = open_db(db_path)
    accounts.create_user(db, ADMIN, "root-password-1", role="admin")
    rank_good_over_bad(db, ADMIN, [f"Path prompt {k}" for k in range(3)])
    projects.create_project(db, "other")
    db.conn.close()
    return UIContext(ServeSettings(db_path=db_path, runs_dir=str(tmp_path / "runs")))


def test_the_line_names_the_path_for_the_person_s_project(ctx, monkeypatch):
    from labeler.services.serving import inference
    from labeler.services.data import projects
    from storage import open_db

    monkeypatch.setattr(inference, "host_device", lambda: "cpu")
    line = train.recommended_path_line(ctx, request=gr.Request(username=ADMIN))
    assert line.startswith("Recommended path: **DPO**. On a CPU, DPO is the faster path")
    assert line.endswith("(3 rankings, 3 pairs, 3 training prompts, a CPU.)")  # project 'default'
    db = open_db(ctx.settings.db_path)
    projects.choose_project(db, ADMIN, "other")  # the person's own project, as the header's picker sets it
    db.conn.close()
    assert train.recommended_path_line(ctx, request=gr.Request(username=ADMIN)) == (
        "Recommended path: **DPO**. There are no ranked pairs yet: rank answers first (both paths learn from "
        "rankings); DPO is then the quickest first run. (0 rankings, 0 pairs, 0 training prompts, a CPU.)")


def test_an_annotator_s_page_is_left_alone_and_the_events_are_registered(ctx, db_path):
    from labeler.services.data import accounts
    from labeler.ui.app import build_app
    from storage import open_db

    db = open_db(db_path)
    accounts.create_user(db, "ann", "ann-password-1")
    db.conn.close()
    assert train.recommended_path_line(ctx, request=gr.Request(username="ann")) == gr.skip()
    names = {fn.api_name for fn in build_app(ctx.settings).fns.values()}
    assert {"train_recommended_path", "train_refresh_recommended_path"} <= names  # on page load and tab select
