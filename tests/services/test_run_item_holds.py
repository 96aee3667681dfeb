"""Issue 37 item 1: a training run's items go only to people who label them.

An admin's page load (any tab) once reserved a mixed run's ranking item; the annotator got an older ordinary item,
and the run waited 473 s for nobody. Now a page load takes no run item, a held run item lapses after
RUN_ITEM_IDLE_SECONDS without activity (keep_holding renews it), and the next annotator gets it.
"""
from __future__ import annotations

import threading
import time

import pytest

from labeler.services.data import accounts, labeling
from labeler.services.training import jobs
from labeler.errors import InputError
from labeler.services.labels.human_reward import HumanRewardQueue
from storage import open_db

QUERY = "Rank these answers to a prompt"
ANSWERS = ["first answer", "second answer", "third answer"]


@pytest.fixture
def run_id(db, tmp_path):
    accounts.create_user(db, "boss", "a-long-password", role="admin")
    accounts.create_user(db, "ann", "a-long-password")
    accounts.create_user(db, "bob", "a-long-password")
    # An older ordinary ranking item: what a page load may take instead.
    db.execute("INSERT INTO prompts (project_id, text, text_hash) VALUES (1, 'old prompt', 'h-old')")
    for text in ("old a", "old b"):
        db.execute("INSERT INTO responses (prompt_id, text) VALUES (1, ?)", [text])
    labeling.create_items(db, "default", kinds=("ranking",))
    return jobs.create_run(db, "rloo", {"reward": "mix"}, runs_dir=tmp_path, start=False).id


def _queue(db_path, run_id, **kwargs) -> HumanRewardQueue:
    return HumanRewardQueue(db_path, "default", run_id, label_kind="ranking", poll_seconds=0.05, **kwargs)


def _age(db, item_id: int, username: str, seconds: int) -> None:
    """The user's assignment of the item as if shown `seconds` ago (no waiting in a test)."""
    db.execute(f"UPDATE assignments SET assigned_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-{seconds} seconds')"
               " WHERE item_id = ? AND user_id = (SELECT id FROM users WHERE username = ?)", [item_id, username])
    db.conn.commit()


def test_a_page_load_takes_no_run_item_and_the_annotator_gets_it(db, db_path, run_id):
    (run_item,) = _queue(db_path, run_id).request([QUERY] * 3, ANSWERS)
    # The admin's page loads (both tabs load on every page): the old item, never the run's.
    loaded = labeling.next_item(db, "default", "boss", "ranking", run_items=False)
    assert loaded.run_id is None and loaded.item_id != run_item
    assert labeling.next_item(db, "default", "boss", "rating", run_items=False) is None
    # The annotator comes to the Rank tab (select, Refresh, the next item after a label): the run's item first.
    shown = labeling.next_item(db, "default", "ann", "ranking")
    assert (shown.item_id, shown.run_id) == (run_item, run_id)
    # A later page load of the annotator shows the run item they hold (their pending item comes back).
    assert labeling.next_item(db, "default", "ann", "ranking", run_items=False).item_id == run_item


def test_an_idle_holder_loses_a_run_item_to_the_next_annotator(db, db_path, run_id):
    (run_item,) = _queue(db_path, run_id).request([QUERY] * 3, ANSWERS)
    assert labeling.next_item(db, "default", "ann", "ranking").item_id == run_item
    # Within the idle time the hold stands (overlap 1): bob gets the ordinary item.
    _age(db, run_item, "ann", labeling.RUN_ITEM_IDLE_SECONDS - 10)
    ordinary = labeling.next_item(db, "default", "bob", "ranking")
    assert ordinary.run_id is None
    # ann is active on it (the tab's live count): keep_holding renews the hold, so ageing starts again.
    assert labeling.keep_holding(db, "default", "ann", run_item) is True
    assert db.execute("SELECT (julianday('now') - julianday(assigned_at)) * 86400 < 5 FROM assignments"
                      " WHERE item_id = ? AND user_id = (SELECT id FROM users WHERE username = 'ann')",
                      [run_item]).fetchone()[0] == 1
    # Idle past RUN_ITEM_IDLE_SECONDS: the next annotator to ask gets it, ahead of their own pending item.
    _age(db, run_item, "ann", labeling.RUN_ITEM_IDLE_SECONDS + 1)
    assert labeling.next_item(db, "default", "bob", "ranking").item_id == run_item
    shown = labeling.next_item(db, "default", "bob", "ranking")
    order = [[r["id"]] for r in shown.responses]
    labeling.submit_ranking(db, "default", "bob", run_item, order)
    # ann comes back: told the item went to someone else.
    with pytest.raises(InputError, match=f"idle for over {labeling.RUN_ITEM_IDLE_SECONDS} seconds"):
        labeling.submit_ranking(db, "default", "ann", run_item, order)
    # An ordinary item keeps the 30-minute hold, and keep_holding leaves it alone: 10 idle minutes later it is
    # still bob's, and ann's queue is empty.
    assert labeling.keep_holding(db, "default", "bob", ordinary.item_id) is False
    _age(db, ordinary.item_id, "bob", 10 * 60)
    assert labeling.next_item(db, "default", "ann", "ranking") is None


def test_an_admin_page_load_racing_the_annotator_leaves_the_run_its_normal_wait(db_path, run_id):
    """The run queues its ranking item and waits; meanwhile an admin's page loads again and again, and an
    annotator on the Rank tab asks for items and ranks what they get. The run has its ranking well within its
    timeout (before: the admin's page load held the item and the run waited out the whole timeout)."""
    queue = _queue(db_path, run_id)
    timeout = 30.0
    result: dict = {}

    def run():
        started = time.monotonic()
        result["rewards"] = queue.request_and_wait([QUERY] * 3, ANSWERS, timeout)
        result["seconds"] = time.monotonic() - started

    trainer = threading.Thread(target=run)
    trainer.start()
    stop = threading.Event()

    def admin_page_loads():
        db = open_db(db_path)
        while not stop.is_set():
            for kind in labeling.KINDS:
                labeling.next_item(db, "default", "boss", kind, run_items=False)
            time.sleep(0.01)
        db.conn.close()

    admin = threading.Thread(target=admin_page_loads)
    admin.start()
    db = open_db(db_path)
    ranked_run_item = False
    try:
        deadline = time.monotonic() + timeout
        while not ranked_run_item and time.monotonic() < deadline:
            shown = labeling.next_item(db, "default", "ann", "ranking")
            if shown is None:
                time.sleep(0.02)
                continue
            by_text = {r["text"]: r["id"] for r in shown.responses}
            order = [[by_text[t]] for t in sorted(by_text)]  # alphabetical: first, second, third
            labeling.submit_ranking(db, "default", "ann", shown.item_id, order)
            ranked_run_item = shown.run_id == run_id
        trainer.join(timeout)
    finally:
        stop.set()
        admin.join()
        db.conn.close()
    assert ranked_run_item
    # first > second > third: centred ranks +1, 0, -1 (label_kinds.centred_rank_rewards)
    assert result["rewards"] == [1.0, 0.0, -1.0]
    assert result["seconds"] < timeout / 2
