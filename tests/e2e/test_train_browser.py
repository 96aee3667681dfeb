"""The Train tab in a real browser: an admin launches a tiny PPO run (VADER reward, the e2e app's tiny model),
sees the progress bar reach the last step and the metrics plot draw lines, all read back from SQLite."""
from __future__ import annotations


import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]
SCREENSHOT = "/tmp/rlhf-studio-train-tab.png"


def _rows(db_path, sql, params=()):
    from storage import open_db

    db = open_db(db_path)
    try:
        return [dict(row) for row in db.execute(sql, params).fetchall()]
    finally:
        db.conn.close()


def test_launch_a_tiny_run_and_watch_the_plot(running_app, browser, monkeypatch):
    from labeler.services import jobs

    monkeypatch.setenv(jobs.LAUNCHER_ENV, "python")  # the server spawns the worker: skip accelerate's start-up
    username, password = running_app.admin
    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    page.goto(running_app.url)
    page.wait_for_selector("input[type=password]", timeout=30_000)
    page.fill("input[type=text]", username)
    page.fill("input[type=password]", password)
    page.click("button:has-text('Login')")
    page.wait_for_selector("button[role=tab]:has-text('Train')", timeout=30_000)
    page.click("button[role=tab]:has-text('Train')")

    page.click("#train-stage label:has-text('ppo')")
    page.wait_for_selector("#train-reward", state="visible")
    page.click("#train-reward label:has-text('function')")
    model_input = page.locator("#train-model input")
    model_input.fill(running_app.model_name)
    model_input.press("Enter")
    page.click("text=Trainer settings")
    page.fill("#train-advanced textarea",
              "steps=3\nbatch_size=2\nmini_batch_size=2\nppo_epochs=1\nmax_new_tokens=4\ncheckpoint_every=0")
    page.click("#train-launch")

    page.wait_for_function("() => (document.getElementById('train-notice') || {}).innerText?.includes('Run #')",
                           timeout=30_000)
    run = _rows(running_app.db_path, "SELECT * FROM runs ORDER BY id DESC LIMIT 1")[0]
    assert run["stage"] == "ppo" and run["created_by"] is not None
    # The timer refreshes the progress bar and the plot from SQLite until the run has finished.
    try:
        page.wait_for_function(
            "() => (document.getElementById('train-progress') || {}).innerText?.includes('step 3 / 3')", timeout=120_000)
    except Exception:
        page.screenshot(path="/tmp/train-fail.png", full_page=True)
        raise
    page.wait_for_function("() => (document.getElementById('train-status') || {}).innerText?.includes('succeeded')",
                           timeout=60_000)
    # Vega draws one line mark per plotted metric (env/reward_mean and objective/kl are selected by default).
    page.wait_for_function(
        "() => document.querySelectorAll('#train-plot g.mark-line path').length >= 2", timeout=30_000)
    page.screenshot(path=SCREENSHOT, full_page=True)

    metrics = _rows(running_app.db_path, "SELECT DISTINCT step FROM metrics WHERE run_id = ? AND name = 'env/reward_mean'",
                    [run["id"]])
    assert sorted(m["step"] for m in metrics) == [1, 2, 3]
    checked = page.locator("#train-metrics input:checked")
    assert checked.count() >= 1  # the default PPO metrics are selected and plotted
    model = _rows(running_app.db_path, "SELECT * FROM models WHERE run_id = ?", [run["id"]])
    assert len(model) == 1 and model[0]["base_model"] == running_app.model_name
