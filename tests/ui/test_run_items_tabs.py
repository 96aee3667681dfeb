"""Issue 37 items 1 and 2, in-process: what the Rate and Rank tabs do with a training run's items (the page load
takes none, the tab select shows one first, the live count renews the hold) and that every keyboard event tells
shortcuts.js it finished after a refusal too."""
from __future__ import annotations

import sqlite3

import gradio as gr
from test_tabs import ADMIN, ANNOTATOR, app, app_db, as_user, ctx, query  # noqa: F401 - fixtures

from labeler.services.training import jobs
from labeler.services.labels.human_reward import HumanRewardQueue
from labeler.ui.tabs import labelling, rank
from labeler.ui.tabs.rank.item_view import show_item as rank_show_item

N_RANK_OUTPUTS = 3 + 3 * 8 + 4  # banner, counter, prompt, 8 slots of 3, comment, guidelines, state, key


def _run_item(db_path, tmp_path) -> tuple[int, int]:
    from storage import open_db

    db = open_db(db_path)
    run_id = jobs.create_run(db, "rloo", {"reward": "mix"}, runs_dir=tmp_path / "runs", start=False).id
    db.conn.close()
    (item_id,) = HumanRewardQueue(db_path, "default", run_id, label_kind="ranking").request(
        ["A run's prompt"] * 2, ["run answer x", "run answer y"])
    return run_id, item_id


def test_page_load_takes_no_run_item_and_the_tab_select_shows_it(app_db, ctx, tmp_path):
    _, run_item = _run_item(app_db, tmp_path)
    loaded = rank.load_item(ctx, request=as_user(ADMIN))
    assert loaded[-2]["item_id"] != run_item
    assert query(app_db, "SELECT COUNT(*) FROM assignments WHERE item_id = ?", [run_item]) == [(0,)]
    # The annotator's page load shows an ordinary item; selecting the Rank tab brings the run's item up.
    shown = rank.load_item(ctx, request=as_user(ANNOTATOR))
    selected = labelling.on_select(ctx, "ranking", rank_show_item, N_RANK_OUTPUTS, shown[-1], as_user(ANNOTATOR))
    assert selected[-2]["item_id"] == run_item
    # Selected again with the run item shown: nothing changes (a half-made ranking stays).
    again = labelling.on_select(ctx, "ranking", rank_show_item, N_RANK_OUTPUTS, selected[-1], as_user(ANNOTATOR))
    assert len(again) == N_RANK_OUTPUTS and all(isinstance(value, type(gr.skip())) for value in again)


def test_the_live_count_renews_the_hold_on_a_run_item(app_db, ctx, tmp_path):
    _, run_item = _run_item(app_db, tmp_path)
    shown = rank.next_item(ctx, request=as_user(ANNOTATOR))
    assert shown[-2]["item_id"] == run_item
    with sqlite3.connect(app_db) as conn:
        conn.execute("UPDATE assignments SET assigned_at = '2000-01-01T00:00:00.000Z' WHERE item_id = ?", [run_item])
    assert labelling.count(ctx, "ranking", shown[-1], as_user(ANNOTATOR))[0].startswith("**0** done")
    assert query(app_db, "SELECT assigned_at > '2001' FROM assignments WHERE item_id = ?", [run_item]) == [(1,)]


def test_every_keyboard_event_signals_done_after_a_success_and_after_a_refusal(app):
    deps = {dep["api_name"]: dep for dep in app.config["dependencies"]}
    for tab in ("rate", "rank"):
        for event in ("submit", "skip", "undo"):
            fn_id = next(dep["id"] for dep in app.config["dependencies"] if dep["api_name"] == f"{tab}_{event}")
            followers = [dep for dep in app.config["dependencies"] if dep.get("trigger_after") == fn_id]
            # Gradio 6.31's front end runs a .then only after a success: one .success and one .failure instead.
            assert sorted((dep["trigger_only_on_success"], dep["trigger_only_on_failure"]) for dep in followers) == [
                (False, True), (True, False)], f"{tab}_{event}"
            assert all(dep["js"] == labelling.DONE_JS for dep in followers)
    # The live count asks shortcuts.js whether the user is active on its own tab (COUNT_JS).
    assert "window.__rlhfStudioActive" in deps["rate_count"]["js"] and 'active("rate")' in deps["rate_count"]["js"]
    assert 'active("rank")' in deps["rank_count"]["js"]


def test_the_live_count_drops_the_banner_of_a_run_that_ended(app_db, ctx, tmp_path):
    """Issue 36 item 11: after a run was cancelled the Rank banner still said the annotator's labels trained it,
    until a Refresh; the live count (every 5 s) reads the banner again."""
    run_id, run_item = _run_item(app_db, tmp_path)
    with sqlite3.connect(app_db) as conn:
        conn.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run_id])
    shown = rank.next_item(ctx, request=as_user(ANNOTATOR))
    assert f"training run **#{run_id}**" in shown[0]
    counter, banner = labelling.count(ctx, "ranking", shown[-1], as_user(ANNOTATOR))
    assert f"training run **#{run_id}**" in banner and counter.startswith("**0** done")
    with sqlite3.connect(app_db) as conn:
        conn.execute("UPDATE runs SET status = 'cancelled' WHERE id = ?", [run_id])
    assert labelling.count(ctx, "ranking", shown[-1], as_user(ANNOTATOR))[1] == ""
