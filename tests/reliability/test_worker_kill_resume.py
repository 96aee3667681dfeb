"""A real training run (PPO on the tiny Llama, the shipped function reward) whose worker is SIGKILLed mid-run:
the run ends failed, the database stays consistent, and `runs resume` finishes it from the newest complete
checkpoint with exactly one metrics point per step and name.

The worker is a real process started by jobs.create_run (no accelerate wrapper, to keep it short); the kill is
of its whole process group, as the OOM killer or `kill -9` would do it.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import wait_until

from labeler.cli import main
from labeler.services.execution import checkpoints, launch, run_metrics, runs, supervision
from labeler.services.training import jobs

pytestmark = pytest.mark.reliability

STEPS = 14
EVERY = 3


def _consistent(db) -> None:
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []


def test_sigkilled_worker_fails_then_resumes_from_its_last_checkpoint(db, tmp_path, monkeypatch, tiny_model_dir,
                                                                   capsys):
    from labeler.services.data import prompts

    monkeypatch.setenv(launch.LAUNCHER_ENV, "python")
    monkeypatch.delenv(checkpoints.SLEEP_ENV, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    prompts.add_prompts(db, [f"Review {i}: this film was" for i in range(8)], source="test")
    settings = {"model": str(tiny_model_dir), "steps": STEPS, "reward": "function", "batch_size": 4,
                "answers_per_prompt": 2, "mini_batch_size": 2, "ppo_epochs": 1, "max_new_tokens": 8,
                "checkpoint_every": EVERY, "samples_per_step": 1, "eval_samples": 0, "seed": 3}
    run = jobs.create_run(db, "ppo", settings, runs_dir=tmp_path / "runs")
    assert run.status == "running" and run.pid
    root = Path(run.output_dir) / "checkpoints"

    # Kill between two checkpoints, after at least one: the steps since the last checkpoint are lost work.
    def mid_run():
        step = runs.get_run(db, run.id).step
        return step if step > EVERY and step % EVERY and step < STEPS - 1 else None

    killed_at = wait_until(mid_run, 240, "a step between two checkpoints", interval=0.05)
    os.killpg(run.pid, signal.SIGKILL)
    wait_until(lambda: not supervision.group_alive(run.pid), 20, "the worker's process group to die", interval=0.05)

    # `runs list` notices the dead worker and marks the run failed, naming why.
    capsys.readouterr()
    assert main(["runs", "list", "--db", runs.db_file(db)]) == 0
    assert re.search(rf"^\s*{run.id}\s+ppo\s+failed", capsys.readouterr().out, re.M)
    failed = runs.get_run(db, run.id)
    assert failed.status == "failed" and "worker process is gone" in failed.error and failed.ended_at
    _consistent(db)
    newest = checkpoints.latest_checkpoint(root)
    assert newest is not None
    resumed_from = checkpoints.checkpoint_step(newest)
    assert 0 < resumed_from <= killed_at and resumed_from % EVERY == 0
    # The killed worker logged metrics past its last checkpoint: those steps are done again, not doubled.
    steps_logged = {r[0] for r in db.execute("SELECT DISTINCT step FROM metrics WHERE run_id = ?", [run.id])}
    assert max(steps_logged) >= killed_at > resumed_from

    capsys.readouterr()
    assert main(["runs", "resume", str(run.id), "--db", runs.db_file(db), "--wait"]) == 0, capsys.readouterr()
    done = runs.get_run(db, run.id)
    assert done.status == "succeeded", (done.error, run_metrics.log_tail(done))
    assert (done.step, done.total_steps) == (STEPS, STEPS)
    assert f"resumed from {newest} at step {resumed_from}" in run_metrics.log_tail(done, 400)
    _consistent(db)
    # One point per step and metric, steps 1..STEPS, for every metric the run logs.
    duplicates = db.execute("SELECT name, step, COUNT(*) FROM metrics WHERE run_id = ? GROUP BY name, step"
                            " HAVING COUNT(*) > 1", [run.id]).fetchall()
    assert duplicates == []
    frame = run_metrics.metrics_frame(db, run.id, ["ppo/loss/total"])
    assert frame["step"].tolist() == list(range(1, STEPS + 1))
    assert [s["step"] for s in run_metrics.samples(db, run.id, limit=100)] == list(range(STEPS, 0, -1))
    # The trained model is registered once, with the run as its lineage.
    assert db.execute("SELECT COUNT(*) FROM models WHERE run_id = ?", [run.id]).fetchone()[0] == 1
    assert not list(root.glob(".tmp-*"))


def _silent_process(*args: str) -> subprocess.Popen:
    """A process that never heartbeats and ignores SIGTERM (as a worker stuck in C code would), leading its own
    process group like a real worker; `args` become its command line."""
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(600)"
    process = subprocess.Popen([sys.executable, "-c", code, *args], start_new_session=True, stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout.readline().strip() == "up"
    return process


def test_a_silent_worker_is_stopped_and_an_unrelated_process_with_its_pid_is_not(db, tmp_path, monkeypatch):
    """A worker alive but silent for STALE_SECONDS was once marked failed and left running, so a resume
    could run two workers on one folder. Now poll stops it; a process that merely has the pid (reused) is left
    alone."""
    from datetime import datetime, timedelta, timezone

    monkeypatch.setattr(supervision, "SILENT_STOP_GRACE_SECONDS", 0.5)
    silent = jobs.create_run(db, "sft", {"steps": 1}, runs_dir=tmp_path, start=False)
    reused = jobs.create_run(db, "sft", {"steps": 1}, runs_dir=tmp_path, start=False)
    worker = _silent_process("-m", "labeler.worker", "--db", runs.db_file(db), "--run-id", str(silent.id))
    stranger = _silent_process("-m", "something.else", "--run-id", str(reused.id))
    try:
        old = (datetime.now(timezone.utc) - timedelta(seconds=supervision.STALE_SECONDS + 5)
               ).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        for run, process in ((silent, worker), (reused, stranger)):
            db.execute("UPDATE runs SET status = 'running', pid = ?, heartbeat_at = ? WHERE id = ?",
                       [process.pid, old, run.id])
        assert sorted(jobs.poll(db)) == [silent.id, reused.id]
        assert worker.wait(timeout=10) == -signal.SIGKILL  # SIGTERM ignored, then SIGKILL after the grace
        assert stranger.poll() is None  # not ours: never signalled
        assert runs.get_run(db, silent.id).status == runs.get_run(db, reused.id).status == "failed"
        stopped = f"no heartbeat for {supervision.STALE_SECONDS:.0f} s, the worker was stopped"
        assert stopped in runs.get_run(db, silent.id).error
        assert "no heartbeat (pid" in runs.get_run(db, reused.id).error
    finally:
        for process in (worker, stranger):
            if process.poll() is None:
                process.kill()
                process.wait()
