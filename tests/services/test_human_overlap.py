"""human_overlap: with rewards from people, batch k+1 is generated and queued for rating before the run waits
for batch k's ratings; steps still get exactly the annotator's ratings, and the PPO ratio of the stale batch is
taken against the policy that generated it."""
from __future__ import annotations

import threading
import time

import pytest

from labeler.services.data import accounts, labeling
from labeler.services.training import jobs
from labeler.services.execution import run_metrics, runs
from labeler.services.labels.human_reward import HumanRewardQueue, rating_to_reward
from labeler.services.training.train_configs import load_job_config, resolve_run_config
from labeler.worker import run_worker
from storage import open_db


def test_human_overlap_is_a_job_setting_on_by_default():
    assert load_job_config({}).human_overlap is True
    assert resolve_run_config("ppo", {"human_overlap": "false"})["job"]["human_overlap"] is False


def test_request_ahead_queues_once_and_release_ahead_unqueues(db, db_path, tmp_path):
    run = jobs.create_run(db, "ppo", {"reward": "human"}, runs_dir=tmp_path, start=False)
    queue = HumanRewardQueue(db_path, "default", run.id, poll_seconds=0.05)
    first = queue.request_ahead(["q1", "q2"], ["a1", "a2"])
    queue.request_ahead(["q3"], ["a3"])
    assert labeling.waiting_for_run(db, run.id) == 3
    accounts.create_user(db, "ann", "a-long-password")
    for _ in first:
        item = labeling.next_item(db, "default", "ann", "rating")
        assert item.item_id in first  # queued ahead, oldest batch first
        labeling.submit_rating(db, "default", "ann", item.item_id, 7 if item.item_id == first[0] else 1)
    # The same rollouts are waited for, not queued again: 7 -> +1, 1 -> -1 on the 1..7 scale.
    assert queue.request_and_wait(["q1", "q2"], ["a1", "a2"], timeout=5) == [1.0, -1.0]
    assert db.execute("SELECT COUNT(*) FROM items WHERE run_id = ?", [run.id]).fetchone()[0] == 3
    assert labeling.waiting_for_run(db, run.id) == 1  # the batch queued ahead still jumps the queue...
    queue.release_ahead()
    assert labeling.waiting_for_run(db, run.id) == 0  # ...until the run ends


def test_next_batch_is_queued_before_the_first_is_rated(db, db_path, tmp_path, tiny_model_dir, monkeypatch):
    from labeler.services.labels import human_reward
    from rlhf import ppo

    accounts.create_user(db, "ann", "a-long-password")
    for i in range(4):
        db.execute("INSERT INTO prompts (project_id, text, text_hash) VALUES (1, ?, ?)", [f"Review {i}:", f"h{i}"])
    run = jobs.create_run(db, "ppo", {"model": str(tiny_model_dir), "steps": 2, "reward": "human",
                                      "human_overlap": "true", "human_timeout": 60, "batch_size": 2, "answers_per_prompt": 1, "human_label": "rating",
                                      "mini_batch_size": 2, "ppo_epochs": 1, "max_new_tokens": 4,
                                      "learning_rate": 0.01, "checkpoint_every": 0},
                          runs_dir=tmp_path / "runs", start=False)
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])

    waits = []  # per wait: (item ids waited for, the run's unrated item ids at that moment)
    original_wait = human_reward.HumanRewardQueue.wait

    def recording_wait(self, item_ids, timeout):
        unrated = [r[0] for r in self.db.execute(
            "SELECT id FROM items i WHERE run_id = ? AND NOT EXISTS (SELECT 1 FROM ratings r WHERE r.item_id = i.id)"
            " ORDER BY id", [run.id])]
        waits.append((list(item_ids), unrated))
        return original_wait(self, item_ids, timeout)

    steps = []  # per step: (scores, old_logprobs)
    original_step = ppo.PPOTrainer.step

    def recording_step(self, queries, responses, scores, response_masks=None, old_logprobs=None):
        steps.append(([float(s) for s in scores], old_logprobs))
        return original_step(self, queries, responses, scores, response_masks, old_logprobs)

    monkeypatch.setattr(human_reward.HumanRewardQueue, "wait", recording_wait)
    monkeypatch.setattr(ppo.PPOTrainer, "step", recording_step)
    stop, given, first_waiting = threading.Event(), {}, []

    def annotator():
        other = open_db(db_path)
        started = time.monotonic()
        # Rate nothing until two batches wait (or 20 s passed: then a run without overlap fails the asserts).
        while labeling.waiting_for_run(other, run.id) < 4 and time.monotonic() - started < 20 and not stop.is_set():
            time.sleep(0.05)
        first_waiting.append(labeling.waiting_for_run(other, run.id))
        while not stop.is_set():
            item = labeling.next_item(other, "default", "ann", "rating")
            if item is None or item.run_id is None:
                time.sleep(0.05)
                continue
            score = 7 if item.item_id % 2 else 2  # consecutive items differ: each batch has a reward signal
            labeling.submit_rating(other, "default", "ann", item.item_id, score)
            given[item.item_id] = score

    thread = threading.Thread(target=annotator)
    thread.start()
    try:
        status = run_worker(runs.db_file(db), run.id)
    finally:
        stop.set()
        thread.join()
    done = runs.get_run(db, run.id)
    assert status == "succeeded", (done.error, run_metrics.log_tail(done))
    assert first_waiting == [4]  # both batches were in the rating queue before the first rating
    # When the first batch's rewards were requested, the second batch was already queued, all unrated.
    items = [r[0] for r in db.execute("SELECT id FROM items WHERE run_id = ? ORDER BY id", [run.id])]
    assert len(items) == 4  # no batch generated beyond the last step
    assert waits[0] == (items[:2], items)
    assert [w[0] for w in waits] == [items[:2], items[2:]]
    # Each step got exactly the ratings of its own batch, in order.
    assert [s[0] for s in steps] == [
        pytest.approx([rating_to_reward(given[i], 1, 7) for i in batch]) for batch in (items[:2], items[2:])]
    assert all(lp is not None and len(lp) == 2 for _, lp in steps)
    # Batch 1 was sampled by the policy it is stepped with; batch 2 by the policy before step 1's update.
    staleness = run_metrics.metrics_frame(db, run.id, ["ppo/policy/staleness_kl"])["value"].tolist()
    assert len(staleness) == 2 and abs(staleness[0]) < 1e-6 and abs(staleness[1]) > 1e-5, staleness
    assert labeling.waiting_for_run(db, run.id) == 0
