"""A mixed PPO run end to end on a tiny model: people rank the groups the online reward model picks for them
(a thread plays the annotator through the labeling service), the model learns from the rankings during the run,
and the run logs what the Train tab plots."""
from __future__ import annotations

import threading
import time

from labeling_helpers import add_ranked_pairs

from labeler.services.data import accounts, labeling
from labeler.services.training import jobs
from labeler.services.execution import run_metrics, runs
from labeler.worker import run_worker
from storage import open_db


def test_mix_run_asks_people_about_some_groups_and_learns_from_their_rankings(db, db_path, tmp_path, tiny_model_dir):
    accounts.create_user(db, "ann", "a-long-password")
    add_ranked_pairs(db, 4)  # some labels before the run: the online model starts from them
    stop, ranked = threading.Event(), []

    def annotator():
        other = open_db(db_path)
        while not stop.is_set():
            item = labeling.next_item(other, "default", "ann", "ranking")
            if item is None or item.run_id is None:
                time.sleep(0.05)
                continue
            by_length = sorted(item.responses, key=lambda r: -len(r["text"]))  # longer answers first
            labeling.submit_ranking(other, "default", "ann", item.item_id, [[r["id"]] for r in by_length])
            ranked.append(item.item_id)

    thread = threading.Thread(target=annotator)
    thread.start()
    try:
        run = jobs.create_run(db, "ppo", {"model": str(tiny_model_dir), "steps": 2, "reward": "mix",
                                          "batch_size": 8, "answers_per_prompt": 2, "human_share": 0.5,
                                          "rm_refit_every": 1, "mini_batch_size": 4, "ppo_epochs": 1,
                                          "max_new_tokens": 4, "human_timeout": 60, "eval_samples": 0},
                              runs_dir=tmp_path / "runs", start=False)
        db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
        status = run_worker(runs.db_file(db), run.id)
    finally:
        stop.set()
        thread.join()
    done = runs.get_run(db, run.id)
    assert status == "succeeded", (done.error, run_metrics.log_tail(done))
    # 4 groups of 2 answers per batch, half to people: 2 Rank items per step, 2 steps.
    items = db.execute("SELECT kind, priority FROM items WHERE run_id = ?", [run.id]).fetchall()
    assert [tuple(i) for i in items] == [("ranking", 0)] * 4 and len(ranked) == 4
    frame = run_metrics.metrics_frame(db, run.id, ["human/answers_judged", "human/labels_used", "reward/from_human",
                                            "reward/from_rm", "rm_online/agreement"])
    by_name = {name: rows["value"].tolist() for name, rows in frame.groupby("name")}
    assert by_name["human/answers_judged"] == [4.0, 8.0] and by_name["human/labels_used"] == [2.0, 4.0]
    assert by_name["reward/from_human"] == [4.0, 4.0] and by_name["reward/from_rm"] == [4.0, 4.0]
    assert all(0.0 <= a <= 1.0 for a in by_name["rm_online/agreement"])
    assert labeling.waiting_for_run(db, run.id) == 0
