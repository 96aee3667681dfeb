"""Issue 24 item 6 in a real browser (headless Chromium): tables of long texts fit their container, so no
column (the *after* answer, the *reward*) is pushed out of sight."""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]
LONG = "a very long answer that goes on and on about the film, " * 12
# For each header cell of a table: how far its right edge is past the table's own visible box (0: in view).
OVERFLOW = """(id) => {
  const root = document.getElementById(id);
  const box = root.querySelector('[role=grid]').getBoundingClientRect();
  return [...root.querySelectorAll('thead th')].map(th => [th.innerText.trim(),
      Math.round(th.getBoundingClientRect().right - box.right)]);
}"""


def seed_long_run(db_path: str) -> int:
    from storage import open_db

    db = open_db(db_path)
    try:
        run_id = db.execute("INSERT INTO runs (project_id, stage, status, started_at, ended_at, step, total_steps)"
                            " VALUES (1, 'ppo', 'succeeded', '2025-01-01T10:00:00.000Z', '2025-01-01T10:05:00.000Z',"
                            " 1, 1)").lastrowid
        db.execute("INSERT INTO run_samples (run_id, step, query, response, reward) VALUES (?, 1, ?, ?, 0.75)",
                   [run_id, "The opening of a long review " + LONG, LONG])
        settings = json.dumps({"prompts": "heldout", "prompts_n": 1, "prompts_hash": "x", "reward": "vader",
                               "samples": 1, "max_new_tokens": 4, "threshold": 0.5, "seed": 0, "bf16": False})
        metrics = json.dumps({"eval/reward_mean": 0.5, "eval/positive_share": 0.5, "eval/kl": 0.1,
                              "eval/length_mean": 4.0, "eval/distinct_2": 1.0})
        for model, run in [("tiny", None), ("ppo-long", run_id)]:
            db.execute("INSERT INTO evaluations (project_id, model, kl_base, run_id, settings_json, metrics_json,"
                       " samples_json) VALUES (1, ?, 'tiny', ?, ?, ?, ?)",
                       [model, run, settings, metrics, json.dumps([{"prompt": "A held-out opening " + LONG,
                                                                     "answer": f"{model}: {LONG}", "reward": 0.5,
                                                                     "kl": 0.0, "length": 4}])])
        return run_id
    finally:
        db.conn.close()


def test_long_answers_keep_every_column_in_view(running_app, login):
    run_id = seed_long_run(running_app.db_path)
    page = login(running_app.url, *running_app.admin, ready="button[role=tab]:has-text('Train')", height=2400)
    page.click("button[role=tab]:has-text('Train')")
    page.click("#train-run input")
    page.click(f"ul[role=listbox] li:has-text('#{run_id} ppo')")
    page.wait_for_function("() => (document.getElementById('train-answers') || {}).innerText?.includes('ppo-long')",
                           timeout=30_000)
    page.wait_for_function("() => (document.getElementById('train-samples') || {}).innerText?.includes('0.75')",
                           timeout=30_000)
    for table in ("train-answers", "train-samples"):
        overflow = page.evaluate(OVERFLOW, table)
        assert [name for name, _ in overflow][-1] in ("after", "reward"), overflow
        assert all(past <= 1 for _, past in overflow), (table, overflow)
    page.close()
