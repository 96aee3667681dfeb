"""Several annotators at once, as threads (one connection each) and as processes: no label lost, none
doubled, no item over its overlap, and the next-item race served one item per user."""
from __future__ import annotations

import multiprocessing
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from labeling_helpers import add_prompt, make_users, set_overlap

from labeler.services.data import labeling
from storage import open_db

P = "default"
USERS = ["ann", "ben", "cat", "dan"]


def label_for(db_path: str, username: str, seconds: float, seed: int, barrier) -> dict:
    """One annotator: take, label (now and then skip or undo) until time is up; report what was stored.

    Module-level so that spawned processes can import it. `barrier` (threading or multiprocessing)
    makes every worker start together, after its imports and connection.
    """
    db = open_db(db_path)
    rng = random.Random(seed)
    barrier.wait()
    stored = {"rating": 0, "ranking": 0}
    actions = 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            kind = rng.choice(["rating", "ranking"])
            item = labeling.next_item(db, P, username, kind)
            if item is None:
                if labeling.next_item(db, P, username, "ranking" if kind == "rating" else "rating") is None:
                    break
                continue
            actions += 1
            # A few ms of "reading": SQLite's busy handler is not fair, and workers that never pause
            # can starve one another for seconds (people labelling take seconds per item anyway).
            time.sleep(rng.uniform(0.0, 0.004))
            roll = rng.random()
            if roll < 0.1:
                labeling.skip_item(db, P, username, item.item_id)
                continue
            request_id = f"{username}-{actions}"
            if kind == "rating":
                result = labeling.submit_rating(db, P, username, item.item_id, rng.randint(1, 7), request_id=request_id)
            else:
                ids = [r["id"] for r in item.responses]
                result = labeling.submit_ranking(db, P, username, item.item_id, [[i] for i in ids], request_id=request_id)
            stored[kind] += result.created
            if roll > 0.93:
                undone = labeling.undo_last_action(db, P, username, kind)
                stored[kind] -= undone is not None and undone.action == "label"  # an undone skip stored nothing
    finally:
        db.conn.close()
    return {"username": username, "stored": stored, "actions": actions}


def _process_main(results, *args) -> None:
    try:
        results.put(label_for(*args))
    except BaseException as error:  # reported, so the parent fails with the cause instead of waiting
        results.put({"error": repr(error)})


def _setup(db_path: str, overlap: int, prompts: int, per_prompt: int = 4) -> None:
    db = open_db(db_path)
    make_users(db, *USERS)
    set_overlap(db, overlap)
    for p in range(prompts):
        add_prompt(db, f"prompt {p}", per_prompt)
    labeling.create_items(db, P)  # per prompt: 4 rating items and 1 ranking item
    db.conn.close()


def _check_invariants(db_path: str, reports: list[dict], overlap: int) -> None:
    db = open_db(db_path)
    q = lambda sql: [tuple(row) for row in db.execute(sql).fetchall()]  # noqa: E731
    labels = """SELECT item_id, user_id FROM ratings UNION ALL SELECT item_id, user_id FROM rankings"""
    # Every done assignment has exactly one label, and every label a done assignment.
    assert q(f"""SELECT a.item_id, a.user_id, COUNT(l.item_id) FROM assignments a
                 LEFT JOIN ({labels}) l ON l.item_id = a.item_id AND l.user_id = a.user_id
                 WHERE a.status = 'done' GROUP BY a.id HAVING COUNT(l.item_id) != 1""") == []
    assert q(f"""SELECT l.item_id, l.user_id FROM ({labels}) l LEFT JOIN assignments a
                 ON a.item_id = l.item_id AND a.user_id = l.user_id AND a.status = 'done' WHERE a.id IS NULL""") == []
    # No label lost or doubled: what each worker saw stored is what the tables hold.
    for report in reports:
        for kind, table in (("rating", "ratings"), ("ranking", "rankings")):
            (rows,) = db.execute(
                f"SELECT COUNT(*) FROM {table} WHERE user_id = (SELECT id FROM users WHERE username = ?)",
                [report["username"]],
            ).fetchone()
            assert rows == report["stored"][kind], (report, kind)
    # No item holds more than `overlap` labels or is labelled twice by one user.
    assert q(f"SELECT item_id FROM ({labels}) GROUP BY item_id HAVING COUNT(*) > {overlap}") == []
    assert q(f"SELECT item_id, user_id FROM ({labels}) GROUP BY item_id, user_id HAVING COUNT(*) > 1") == []
    assert sum(r["stored"]["rating"] + r["stored"]["ranking"] for r in reports) > 0
    db.conn.close()


def test_threads_label_at_once(db_path):
    # 600 rating + 150 ranking items, 1500 slots: more than 4 threads label in 2.5 s on a shared 2-core box.
    _setup(db_path, overlap=2, prompts=150)
    barrier = threading.Barrier(len(USERS), timeout=60)
    with ThreadPoolExecutor(len(USERS)) as pool:
        reports = list(pool.map(label_for, [db_path] * 4, USERS, [2.5] * 4, range(4), [barrier] * 4))
    assert all(r["actions"] > 0 for r in reports), reports  # every thread took part
    _check_invariants(db_path, reports, overlap=2)


def test_processes_label_at_once(db_path):
    # 60 prompts: the queue may run dry, which checks the end state too (every item at its overlap).
    _setup(db_path, overlap=2, prompts=60)
    users = USERS[:3]
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter each, as separate servers would be
    barrier, results = ctx.Barrier(len(users), timeout=60), ctx.Queue()
    workers = [
        ctx.Process(target=_process_main, args=(results, db_path, user, 2.0, seed, barrier))
        for seed, user in enumerate(users)
    ]
    for worker in workers:
        worker.start()
    reports = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    assert [report.get("error") for report in reports] == [None] * len(users)
    assert [worker.exitcode for worker in workers] == [0] * len(users)
    assert all(r["actions"] > 0 for r in reports), reports  # every process took part
    _check_invariants(db_path, reports, overlap=2)


def test_next_item_race_gives_distinct_items(db_path):
    n = 8
    db = open_db(db_path)
    names = [f"u{i}" for i in range(n)]
    make_users(db, *names)
    add_prompt(db, "p", 5 * n)
    labeling.create_items(db, P, kinds=("rating",))
    db.conn.close()
    barrier = threading.Barrier(n)

    def ask(username: str) -> list[int]:
        conn = open_db(db_path)
        got = []
        for _ in range(5):
            barrier.wait()  # everyone asks at the same moment, five rounds
            item = labeling.next_item(conn, P, username, "rating")
            got.append(item.item_id)
            labeling.submit_rating(conn, P, username, item.item_id, 4)
        conn.conn.close()
        return got

    with ThreadPoolExecutor(n) as pool:
        served = [item for items in pool.map(ask, names) for item in items]
    assert len(served) == 5 * n
    assert len(set(served)) == 5 * n  # overlap 1: no item went to two users


@pytest.mark.parametrize("request_id", ["same-click", None])
def test_double_submit_from_two_threads_stores_one_label(db_path, request_id):
    db = open_db(db_path)
    make_users(db, "ann")
    add_prompt(db, "p", 10)
    labeling.create_items(db, P, kinds=("rating",))
    barrier = threading.Barrier(2)

    def submit(item_id: int) -> labeling.LabelResult:
        conn = open_db(db_path)
        barrier.wait()
        try:
            return labeling.submit_rating(conn, P, "ann", item_id, 5, request_id=request_id)
        finally:
            conn.conn.close()

    for round_ in range(10):
        item = labeling.next_item(db, P, "ann", "rating")
        if request_id is not None:
            request_id = f"click-{round_}"
        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(submit, [item.item_id] * 2))
        assert sorted(r.created for r in results) == [False, True]
        assert results[0].label_id == results[1].label_id
    assert db.execute("SELECT COUNT(*), COUNT(DISTINCT item_id) FROM ratings").fetchone()[:] == (10, 10)
    db.conn.close()
