"""In a real browser (headless Chromium): a human-reward run's answers come first with a banner saying the
annotator's labels train a model; once the run is cancelled the banner is gone and its items no longer jump the
queue (they stay labellable, in arrival order)."""
from __future__ import annotations

import pytest
from helpers import serving

pytestmark = [pytest.mark.slow, pytest.mark.browser]
ANNOTATOR = ("rhea", "rhea-password-1")


@pytest.fixture(scope="module")
def run_app(tmp_path_factory):
    """A server whose queue holds an older ordinary answer and a running PPO run's answer (priority 100)."""
    from labeler.services.data import accounts, labeling, prompts
    from labeler.services.training import jobs
    from labeler.services.execution import runs
    from labeler.services.data.responses import insert_response
    from storage import open_db, write_transaction

    root = tmp_path_factory.mktemp("run-release")
    db_path = str(root / "studio.db")
    db = open_db(db_path)
    accounts.create_user(db, *ANNOTATOR)
    prompts.add_prompts(db, ["An ordinary prompt", "A prompt from the run"], source="test")
    # In training: the held-out share may hold a new prompt out, and a held-out prompt takes no training label.
    db.execute("UPDATE prompts SET split = 'train'")
    run = jobs.create_run(db, "ppo", {"reward": "human", "human_label": "rating"}, runs_dir=str(root / "runs"),
                          start=False)
    # Running, as a worker that has just claimed it leaves it (a fresh heartbeat: the server's poll keeps it).
    db.execute("UPDATE runs SET status = 'running', heartbeat_at = ? WHERE id = ?", [runs.utc_now(), run.id])
    with write_transaction(db):
        (ordinary, _), (from_run, _) = db.execute("SELECT id, text FROM prompts ORDER BY id").fetchall()
        first = insert_response(db, ordinary, "an ordinary answer, queued first", model="m", source="generated")
        second = insert_response(db, from_run, "the run's answer", model="m", source="ppo", run_id=run.id)
        labeling.insert_item(db, 1, "rating", ordinary, [first])
        labeling.insert_item(db, 1, "rating", from_run, [second], priority=100, run_id=run.id)
    db.conn.close()
    with serving(db_path, root, model="default") as server:
        yield server.url, db_path, run.id


def test_a_cancelled_run_releases_its_items(run_app, login):
    from labeler.services.training import jobs
    from labeler.services.data import labeling
    from labeler.services.execution import runs
    from storage import open_db

    url, db_path, run_id = run_app
    page = login(url, *ANNOTATOR)
    page.wait_for_function("() => document.getElementById('rate-response')?.innerText.includes('answer')")
    # A page load takes no run item (it may not be a labeller's); the labeller's Refresh (as selecting the tab)
    # brings the run's answer first, with the banner naming the run.
    page.click("#rate-refresh")
    page.wait_for_function("() => document.getElementById('rate-response')?.innerText.includes(\"the run's answer\")")
    assert "the run's answer" in page.inner_text("#rate-response")
    assert page.locator("#rate-banner").is_visible()
    assert f"#{run_id}" in page.inner_text("#rate-banner")

    db = open_db(db_path)
    try:
        assert runs.finish(db, run_id, "cancelled", "cancelled by user")
        assert labeling.waiting_for_run(db, run_id) == 0
    finally:
        db.conn.close()
    # A fresh page (another annotator session would see the same): no banner, and the older ordinary answer
    # comes first now that the run's item is back at normal priority. The item this user holds stays theirs,
    # so the check is on a new user's view.
    page.reload()
    page.wait_for_function("() => document.getElementById('rate-response')?.innerText.includes('answer')")
    assert page.locator("#rate-banner").is_hidden()
