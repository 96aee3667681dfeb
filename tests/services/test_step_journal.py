"""Checkpoints sized to the work (issue 44, item 3): a people-rewarded PPO run journals every step (the answers
people judged and the rewards they gave), writes its weights and optimizer state only as `checkpoint_share` allows,
and a resumed run trains the journalled steps after its newest weights checkpoint again, asking nobody twice."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from labeler.services.data import accounts, labeling, prompts
from labeler.services.execution import checkpoints, run_metrics, runs, step_journal
from labeler.services.training import jobs
from labeler.services.execution.checkpoints import WeightsPacer
from labeler.services.training.stages import checkpoint_due
from labeler.services.settings.job_settings import JobConfig
from storage import open_db

WORDS = "eval_rewards:words"


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_pacer_writes_weights_at_most_share_of_the_time():
    clock = Clock()
    pacer = WeightsPacer(0.05, clock=clock)
    assert pacer.due()  # nothing measured yet: the first step's weights are written, and timed
    clock.now = 10.0
    with pacer.writing():
        clock.now = 12.0  # the write took 2 s
    # 2 s of writing may come once per 2 / 0.05 = 40 s: 38 s of training after the write ends (12 + 38 = 50)
    clock.now = 49.9
    assert not pacer.due()
    clock.now = 50.0
    assert pacer.due()
    # 2 s out of 40 s = 5%
    assert pacer.took / (pacer.took + 38.0) == pytest.approx(0.05)
    assert WeightsPacer(0.0, clock=clock).due()  # 0: every step
    with pytest.raises(ValueError, match="checkpoint_share"):
        WeightsPacer(1.0)
    job = JobConfig(reward="human")
    assert job.checkpoint_share == 0.05
    assert not checkpoint_due(job, 3, pacer=_never())
    assert not checkpoint_due(JobConfig(reward="rm", checkpoint_every=10), 3, pacer=None)


def _never():
    pacer = WeightsPacer(0.05)
    pacer.due = lambda: False
    return pacer


def test_the_journal_keeps_each_step_and_replaces_a_step_trained_again(db, tmp_path):
    run = jobs.create_run(db, "ppo", {"reward": "human"}, runs_dir=tmp_path, start=False)
    entry = {"prompt": "The film was", "answer": " good", "response": [1, 2], "score": 1.0}
    step_journal.record_step(db, run.id, 1, 2, [entry], [])
    step_journal.record_step(db, run.id, 2, 4, [entry, entry], [entry])
    step_journal.record_step(db, run.id, 2, 5, [entry], [])  # step 2 trained again after a resume
    assert step_journal.steps_after(db, run.id, 0) == [step_journal.JournalStep(1, 2, [entry], []),
                                                       step_journal.JournalStep(2, 5, [entry], [])]
    assert [s.step for s in step_journal.steps_after(db, run.id, 1)] == [2]
    assert 0 < step_journal.journal_bytes(db, run.id) < 1000


def test_resume_after_steps_with_no_weights_checkpoint_trains_them_again(db, tmp_path, tiny_model_dir, monkeypatch,
                                                                         capsys):
    """Weights at step 1 only; the run dies inside step 3. Resumed, it loads checkpoint-1, trains steps 2 and 3
    again on the answers and rewards people gave (journalled), and finishes: no item is queued again."""
    from labeler.services.training.runners import ppo as ppo_runner
    from labeler.worker import run_worker

    accounts.create_user(db, "ann", "a-long-password")
    prompts.add_prompts(db, ["A training prompt", "Another one", "A third one"])
    run = jobs.create_run(db, "ppo", {"model": str(tiny_model_dir), "steps": 3, "reward": "human",
                                      "human_label": "rating", "human_timeout": 120, "batch_size": 2,
                                      "answers_per_prompt": 1, "mini_batch_size": 2, "ppo_epochs": 1,
                                      "max_new_tokens": 4, "eval_samples": 0},
                          runs_dir=tmp_path / "runs", start=False)
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
    done = threading.Event()

    def annotator():  # rates every item of the run as it comes, 7 and 2 in turn (unequal rewards: real steps)
        other = open_db(runs.db_file(db))
        rated = 0
        while not done.is_set():
            item = labeling.next_item(other, "default", "ann", "rating")
            if item is not None and item.run_id == run.id:
                labeling.submit_rating(other, "default", "ann", item.item_id, 7 if rated % 2 else 2)
                rated += 1
            time.sleep(0.05)

    # weights after the first step only (a slow disk: the pacer never allows another write)
    monkeypatch.setattr(WeightsPacer, "due", lambda self: self.took is None)
    real_step = ppo_runner.ppo_step

    def dies_in_step_3(trainer, batch, stats, overlap):
        if trainer.current_step == 2:
            raise RuntimeError("the machine went down")
        return real_step(trainer, batch, stats, overlap)

    monkeypatch.setattr(ppo_runner, "ppo_step", dies_in_step_3)
    thread = threading.Thread(target=annotator)
    thread.start()
    try:
        assert run_worker(runs.db_file(db), run.id) == "failed"
        root = Path(run.output_dir) / "checkpoints"
        assert [checkpoints.checkpoint_step(c) for c in checkpoints.complete_checkpoints(root)] == [1]
        journal = step_journal.steps_after(db, run.id, 1)
        assert [s.step for s in journal] == [2, 3] and all(len(s.batch) == 2 for s in journal)
        items = db.execute("SELECT COUNT(*) FROM items WHERE run_id = ?", [run.id]).fetchone()[0]
        ratings = db.execute("SELECT COUNT(*) FROM ratings JOIN items ON items.id = ratings.item_id "
                             "WHERE items.run_id = ?", [run.id]).fetchone()[0]

        monkeypatch.setattr(ppo_runner, "ppo_step", real_step)
        db.execute("UPDATE runs SET status = 'running', error = '' WHERE id = ?", [run.id])
        assert run_worker(runs.db_file(db), run.id) == "succeeded", run_metrics.log_tail(runs.get_run(db, run.id))
    finally:
        done.set()
        thread.join()
    finished = runs.get_run(db, run.id)
    assert finished.step == 3
    log = capsys.readouterr().out
    assert "trained the 2 journalled steps after the checkpoint again (steps 2-3)" in log
    # nobody was asked again: the same items, the same labels
    assert db.execute("SELECT COUNT(*) FROM items WHERE run_id = ?", [run.id]).fetchone()[0] == items
    assert db.execute("SELECT COUNT(*) FROM ratings JOIN items ON items.id = ratings.item_id WHERE items.run_id = ?",
                      [run.id]).fetchone()[0] == ratings
    # every step's metrics, once
    steps = [row[0] for row in db.execute("SELECT DISTINCT step FROM metrics WHERE run_id = ? AND name = "
                                          "'env/reward_mean' ORDER BY step", [run.id])]
    assert steps == [1, 2, 3]
