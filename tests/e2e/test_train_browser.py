"""The Train tab in a real browser: an admin launches a tiny PPO run (VADER reward, the e2e app's tiny model),
sees the progress bar reach the last step, the metrics plot and the reward-by-time curve draw their lines (paths
with points, not only axes) at every refresh once the first step is logged, each chart naming its metric in a
legend (issue 24 item 2), and the before/after table of the automatic held-out evaluation, all read back from
SQLite."""
from __future__ import annotations


import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]
SCREENSHOT = "/tmp/rlhf-studio-train-tab.png"
# Points of each drawn line (labeler/ui/charts.py draws a series as an SVG polyline named by data-series).
LINE_POINTS = """(selector) => Array.from(document.querySelectorAll(selector + ' polyline.studio-chart-line'))
    .map(p => ({points: (p.getAttribute('points') || '').trim().split(/\\s+/).filter(Boolean).length,
                stroke: p.getAttribute('stroke'), name: p.dataset.series}))"""
# Records, at every change of the plot's DOM (each refresh), how many lines it drew and the legend's names.
WATCH_PLOT = """() => {
  window.__plotStates = [];
  const look = () => {
    const root = document.getElementById('train-plot');
    if (!root) return;
    window.__plotStates.push({
      lines: root.querySelectorAll('polyline.studio-chart-line').length,
      legend: [...root.querySelectorAll('.studio-chart-legend-item text')].map(t => t.textContent),
    });
  };
  new MutationObserver(look).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def _lines(page, selector):
    return page.evaluate(LINE_POINTS, selector)


def test_launch_a_tiny_run_and_watch_the_plot(running_app, login, db_rows, monkeypatch):
    from labeler.services.execution import launch
    from labeler.services.data import prompts
    from storage import open_db

    monkeypatch.setenv(launch.LAUNCHER_ENV, "python")  # the server spawns the worker: skip accelerate's start-up
    db = open_db(running_app.db_path)
    prompts.add_prompts(db, ["A held-out opening: the film"], source="e2e-heldout")
    db.execute("UPDATE prompts SET split = 'test' WHERE source = 'e2e-heldout'")  # for the automatic evaluation
    db.conn.close()
    username, password = running_app.admin
    page = login(running_app.url, username, password, ready="button[role=tab]:has-text('Train')", height=2400)
    page.click("button[role=tab]:has-text('Train')")

    page.click("#train-stage label:has-text('ppo')")
    page.wait_for_selector("#train-reward", state="visible")
    page.click("#train-reward input")  # the Reward picker: VADER's sentiment of the answer
    page.click("ul[role=listbox] li:has-text('Sentiment (VADER)')")
    model_input = page.locator("#train-model input")
    model_input.fill(running_app.model_name)
    model_input.press("Enter")
    page.click("text=Advanced settings")
    page.fill("#train-advanced textarea",
              "steps=3\nbatch_size=2\nanswers_per_prompt=2\nmini_batch_size=2\nppo_epochs=1\nmax_new_tokens=4\ncheckpoint_every=0")
    page.evaluate(WATCH_PLOT)
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
    # One drawn line per plotted metric (the reward and the KL by default), each with a point per step, a colour
    # and its name: Gradio's chart used to get an empty first value and draw bare axes, and to blank every
    # other refresh.
    try:
        page.wait_for_function(f"() => ({LINE_POINTS})('#train-plot').filter(l => l.points >= 3 && l.stroke).length >= 2",
                               timeout=30_000)
        names = [line["name"] for line in _lines(page, "#train-plot")]
        assert names[:2] == ["env/reward_mean", "objective/kl"]
        states = page.evaluate("() => window.__plotStates")
        drawn = [i for i, state in enumerate(states) if state["lines"] > 0]
        assert drawn, states
        # From the first refresh that had a logged step on, every refresh drew lines, named in the legend.
        assert all(state["lines"] >= 1 for state in states[drawn[0]:]), states
        assert all("mean reward" in state["legend"] for state in states[drawn[0]:]), states
        # The reward curve's x labels are round numbers, no two of them run together.
        labels = page.evaluate("() => [...document.querySelectorAll('#train-reward-curve .studio-chart-xtick')]"
                               ".map(t => { const b = t.getBoundingClientRect(); return [t.textContent, b.left, b.right]; })")
        assert len(labels) >= 2 and all(a[2] < b[1] for a, b in zip(labels, labels[1:])), labels
        page.wait_for_function(f"() => ({LINE_POINTS})('#train-reward-curve').some(l => l.points >= 3)", timeout=30_000)
        page.wait_for_function("() => (document.getElementById('train-comparison') || {}).innerText?.includes('before (base)')",
                               timeout=30_000)
    finally:
        page.screenshot(path=SCREENSHOT, full_page=True)
    comparison = page.locator("#train-comparison").inner_text()
    assert "after" in comparison and f"ppo-run{run['id']}" in comparison and running_app.model_name in comparison

    # The full metric list is one click away; picking one metric plots only that one.
    page.click("text=All metrics")
    page.click("#train-metrics label:has-text('Reward (mean per answer)')")  # in words (run_views.metric_words)
    page.wait_for_function(f"() => {{ const l = ({LINE_POINTS})('#train-plot'); "
                           "return l.length === 1 && l[0].points >= 3 && l[0].name === 'objective/kl'; }", timeout=30_000)

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
