"""Issue 37 item 1 through the web API: an admin's page load and an annotator's Rank tab race for a training run's
ranking item. Before, the admin's page load (rank_load, any tab: both tabs load on every page) reserved the item
for 30 minutes and the run waited its whole timeout for nobody; now the annotator who comes to the Rank tab
(rank_select) gets it and the run has its label well within the timeout."""
from __future__ import annotations

import threading
import time

import pytest

gradio_client = pytest.importorskip("gradio_client")
from gradio_client import Client  # noqa: E402

ADMIN = ("race-admin", "race-admin-password-1")
ANNOTATOR = ("race-annotator", "race-annotator-password-1")
QUERY = "Issue 37 race: which answer is best?"
ANSWERS = ["race answer A", "race answer B", "race answer C"]
TIMEOUT_S = 40.0


def _setup(db_path: str) -> int:
    """The race's run: a row marked running with a fresh heartbeat, as a worker that has just claimed it leaves it,
    so the shared app's poll never launches it (a queued one was started: an RLOO run of the default model, 320
    steps, that held the one worker slot and several GB for the rest of the suite)."""
    from labeler.services.data import accounts
    from labeler.services.training import jobs
    from labeler.services.execution import runs
    from storage import open_db

    db = open_db(db_path)
    try:
        accounts.create_user(db, *ADMIN, role="admin")
        accounts.create_user(db, *ANNOTATOR)
        run_id = jobs.create_run(db, "rloo", {"reward": "mix"}, runs_dir=str(db_path) + "-race-runs", start=False).id
        db.execute("UPDATE runs SET status = 'running', heartbeat_at = ? WHERE id = ? AND status = 'queued'",
                   [runs.utc_now(), run_id])
        return run_id
    finally:
        db.conn.close()


def _end(db_path: str, run_id: int) -> None:
    """The race's run ended, and its worker stopped should the app's poll have started it after all."""
    from labeler.services.training import jobs
    from labeler.services.execution import runs
    from storage import open_db

    db = open_db(db_path)
    try:
        if not runs.get_run(db, run_id).finished or runs.get_run(db, run_id).pid:
            jobs.cancel_run(db, run_id, grace_seconds=2.0)
    finally:
        db.conn.close()


def _run_items(db_rows, db_path: str, run_id: int) -> list[int]:
    return [row["id"] for row in db_rows(db_path, "SELECT id FROM items WHERE run_id = ?", [run_id])]


def test_an_admin_page_load_does_not_hold_the_run_item_the_annotator_ranks(running_app, db_rows):
    from labeler.services.labels.human_reward import HumanRewardQueue

    run_id = _setup(running_app.db_path)
    queue = HumanRewardQueue(running_app.db_path, "default", run_id, label_kind="ranking", poll_seconds=0.1)
    result: dict = {}

    def trainer():
        started = time.monotonic()
        result["rewards"] = queue.request_and_wait([QUERY] * 3, ANSWERS, TIMEOUT_S)
        result["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=trainer)
    thread.start()
    try:
        while not _run_items(db_rows, running_app.db_path, run_id):
            time.sleep(0.05)
        (run_item,) = _run_items(db_rows, running_app.db_path, run_id)
        # The admin opens the app (both tabs' page loads run, whichever tab is shown), then the annotator's page
        # loads too and they select the Rank tab.
        admin = Client(running_app.url, auth=ADMIN, verbose=False)
        admin.predict(api_name="/rank_load")
        admin.predict(api_name="/rate_load")
        annotator = Client(running_app.url, auth=ANNOTATOR, verbose=False)
        loaded = annotator.predict(api_name="/rank_load")
        shown = annotator.predict(loaded[-1], api_name="/rank_select")
        assert shown[-1].split(":")[0] == str(run_item)
        assert f"training run **#{run_id}**" not in loaded[0]  # the page load showed an ordinary item
        # Answer k's text and rank radio (gradio_client leaves out the slot's column): rank A, B, C best to worst.
        texts = [shown[3 + 2 * k].split("\n\n", 1)[1] for k in range(3)]
        ranks = [str(sorted(texts).index(text) + 1) for text in texts]
        annotator.predict("", shown[-1], *ranks, api_name="/rank_submit")
        thread.join(TIMEOUT_S + 5)
    finally:
        thread.join(TIMEOUT_S + 5)
        _end(running_app.db_path, run_id)
    holders = db_rows(running_app.db_path, "SELECT u.username, a.status FROM assignments a JOIN users u"
                      " ON u.id = a.user_id WHERE a.item_id = ?", [run_item])
    assert holders == [{"username": ANNOTATOR[0], "status": "done"}]
    assert result["rewards"] == [1.0, 0.0, -1.0]  # A > B > C: centred ranks
    assert result["seconds"] < TIMEOUT_S / 2
