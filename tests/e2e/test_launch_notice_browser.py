"""Issue 37 item 4 in Chromium, on the real app: the launch's notice ("Run #N started." / "... queued ...") goes
once the status line shows that run ended (it stayed, saying "queued", after the run had finished). Only the page
can show it: the notice is emptied by a browser-side tick (monitor.FADE_NOTICE_JS), no server event."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]
NOTICE = "() => (document.getElementById('train-notice') || {}).innerText || ''"


def test_the_launch_notice_goes_once_its_run_has_ended(running_app, login, db_rows, monkeypatch):
    from labeler.services.execution import launch

    monkeypatch.setenv(launch.LAUNCHER_ENV, "python")  # the server spawns the worker: skip accelerate's start-up
    page = login(running_app.url, *running_app.admin, ready="button[role=tab]:has-text('Train')", height=2400)
    page.click("button[role=tab]:has-text('Train')")
    page.click("#train-stage label:has-text('ppo')")  # VADER's reward: prompts are all a run needs
    page.wait_for_selector("#train-reward", state="visible")
    page.click("#train-reward input")
    page.click("ul[role=listbox] li:has-text('Sentiment (VADER)')")
    model_input = page.locator("#train-model input")
    model_input.fill(running_app.model_name)
    model_input.press("Enter")
    page.click("text=Advanced settings")
    page.fill("#train-advanced textarea", "steps=1\nbatch_size=2\nanswers_per_prompt=2\nmini_batch_size=2\n"
              "ppo_epochs=1\nmax_new_tokens=4\ncheckpoint_every=0")
    page.click("#train-launch")
    page.wait_for_function(f"() => /^Run #\\d+ (started|queued)/.test(({NOTICE})())", timeout=60_000)
    run_id = db_rows(running_app.db_path, "SELECT id FROM runs ORDER BY id DESC LIMIT 1")[0]["id"]
    assert page.evaluate(NOTICE).startswith(f"Run #{run_id} ")
    page.wait_for_function(f"() => (document.getElementById('train-status') || {{}}).innerText?.startsWith("
                           f"'Run #{run_id} ') && /succeeded|failed|cancelled/.test("
                           f"document.getElementById('train-status').innerText)", timeout=240_000)
    # The status line says the run ended: within a few timer ticks (2 s each) the notice is gone.
    page.wait_for_function(f"() => ({NOTICE})().trim() === ''", timeout=15_000)
    page.close()
