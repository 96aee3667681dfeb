"""The Train tab in a real browser: an admin launches a tiny PPO run (VADER reward, the e2e app's tiny model),
sees the progress bar reach the last step, the metrics plot and the reward-by-time curve draw their lines (paths
with points, not only axes), and the before/after table of the automatic held-out evaluation, all read back from
SQLite."""
from __future__ import annotations


import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]
SCREENSHOT = "/tmp/rlhf-studio-train-tab.png"
# Points of each drawn line: Vega writes a line as "M x,y L x,y ..."; an empty chart has paths with no "d".
LINE_POINTS = """(selector) => Array.from(document.querySelectorAll(selector + ' g.mark-line path'))
    .map(p => ({points: (p.getAttribute('d') || '').split(/[ML]/).filter(s => /\\d/.test(s)).length,
                stroke: p.getAttribute('stroke')}))"""


def _lines(page, selector):
    return page.evaluate(LINE_POINTS, selector)


def test_launch_a_tiny_run_and_watch_the_plot(running_app, login, db_rows, monkeypatch):
    from labeler.services import jobs, prompts
    from storage import open_db

    monkeypatch.setenv(jobs.LAUNCHER_ENV, "python")  # the server spawns the worker: skip accelerate's start-up
    db = open_db(running_app.db_path)
    prompts.add_prompts(db, ["A held-out opening: the film"], source="e2e-heldout")
    db.execute("UPDATE prompts SET split = 'test' WHERE source = 'e2e-heldout'")  # for the automatic evaluation
    db.conn.close()
    username, password = running_app.admin
    page = login(running_app.url, username, password, ready="button[role=tab]:has-text('Train')", height=2400)
    page.click("button[role=tab]:has-text('Train')")

    page.click("#train-stage label:has-text('ppo')")
    page.wait_for_selector("#train-reward", state="visible")
    page.click("#train-reward label:has-text('function')")
    model_input = page.locator("#train-model input")
    model_input.fill(running_app.model_name)
    model_input.press("Enter")
    page.click("text=Trainer settings")
    page.fill("#train-advanced textarea",
              "steps=3\nbatch_size=2\nanswers_per_prompt=2\nmini_batch_size=2\nppo_epochs=1\nmax_new_tokens=4\ncheckpoint_every=0")
    page.click("#train-launch")

    page.wait_for_function("() => (document.getElementById('train-notice') || {}).innerText?.includes('Run #')",
                           timeout=30_000)
    run = db_rows(running_app.db_path, "SELECT * FROM runs ORDER BY id DESC LIMIT 1")[0]
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
    # One drawn line per plotted metric (env/reward_mean and objective/kl are selected by default), each with a
    # point per step and a colour: Gradio's chart used to get an empty first value and draw bare axes.
    try:
        page.wait_for_function(f"() => ({LINE_POINTS})('#train-plot').filter(l => l.points >= 3 && l.stroke).length >= 2",
                               timeout=30_000)
        page.wait_for_function(f"() => ({LINE_POINTS})('#train-reward-curve').some(l => l.points >= 3)", timeout=30_000)
        page.wait_for_function("() => (document.getElementById('train-comparison') || {}).innerText?.includes('before (base)')",
                               timeout=30_000)
    finally:
        page.screenshot(path=SCREENSHOT, full_page=True)
    comparison = page.locator("#train-comparison").inner_text()
    assert "after" in comparison and f"ppo-run{run['id']}" in comparison and running_app.model_name in comparison

    # Another set of metrics redraws the chart with the new series (its colour domain is rebuilt).
    page.click("#train-metrics label:has-text('objective/kl')")
    page.wait_for_function(f"() => {{ const l = ({LINE_POINTS})('#train-plot'); "
                           "return l.length === 1 && l[0].points >= 3 && l[0].stroke; }", timeout=30_000)

    metrics = db_rows(running_app.db_path, "SELECT DISTINCT step FROM metrics WHERE run_id = ? AND name = 'env/reward_mean'",
                    [run["id"]])
    assert sorted(m["step"] for m in metrics) == [1, 2, 3]
    checked = page.locator("#train-metrics input:checked")
    assert checked.count() >= 1  # the default PPO metrics are selected and plotted
    model = db_rows(running_app.db_path, "SELECT * FROM models WHERE run_id = ?", [run["id"]])
    assert len(model) == 1 and model[0]["base_model"] == running_app.model_name
    evaluations = db_rows(running_app.db_path, "SELECT model, run_id FROM evaluations ORDER BY id")
    assert evaluations[-2:] == [{"model": running_app.model_name, "run_id": None},
                                {"model": model[0]["name"], "run_id": run["id"]}]
