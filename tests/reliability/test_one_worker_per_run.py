"""A run has one worker, ever (issue 25): killing the launcher (the pid in `runs.pid`) left its training process
running; `poll` checked only that pid, marked the run failed, `runs resume` started a second worker on the same
folder, and both finished and registered a model.

Now liveness, cancel and resume look at every process of the run (its process group, and any process running
its worker on this database), and a run registers at most one model.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from helpers import wait_until

from labeler.services.execution import checkpoints, launch, run_metrics, runs, supervision
from labeler.services.training import jobs
from labeler.errors import InputError

pytestmark = pytest.mark.reliability

SERVICES = Path(__file__).resolve().parents[1] / "services"  # toy_runner.py: a stage that trains in seconds
TOY = {"runner": "toy_runner:run", "model": "toy-linear"}


@pytest.fixture
def toy_env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(SERVICES))
    monkeypatch.delenv(checkpoints.SLEEP_ENV, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def test_a_killed_launcher_leaves_a_run_that_stays_running_cannot_be_resumed_twice_and_registers_once(
        db, tmp_path, monkeypatch, toy_env):
    # The real launch: labeler.launcher (accelerate launch) starts the worker as its child, in its group.
    monkeypatch.setenv(launch.LAUNCHER_ENV, "accelerate")
    monkeypatch.setenv("TOY_STEP_SECONDS", "0.25")
    run = jobs.create_run(db, "sft", {**TOY, "steps": 200, "checkpoint_every": 2}, runs_dir=tmp_path / "runs")
    wait_until(lambda: runs.get_run(db, run.id).step >= 3, 180, "step 3", interval=0.05)
    os.kill(run.pid, signal.SIGKILL)  # the launcher alone, as `kill -9 <runs.pid>` does
    wait_until(lambda: not supervision.pid_alive(run.pid), 20, "the launcher to die", interval=0.05)
    workers = supervision.run_processes(db, runs.get_run(db, run.id))
    assert workers and run.pid not in workers, workers  # its worker trains on

    # Liveness sees the worker: the run is not marked failed (which let a resume start a second worker).
    assert jobs.poll(db) == []
    step = runs.get_run(db, run.id).step
    wait_until(lambda: runs.get_run(db, run.id).step > step, 60, "the orphaned worker's next step", interval=0.05)
    assert runs.get_run(db, run.id).status == "running"

    # Marked failed anyway (as an older server did): a resume is refused while a process of the run lives.
    assert runs.finish(db, run.id, "failed", "marked failed while its worker lives")
    with pytest.raises(InputError, match=r"still has processes running \(pids .*runs cancel"):
        jobs.resume_run(db, run.id)
    assert runs.get_run(db, run.id).status == "failed"
    # Cancel reaches the orphaned worker (not only the dead launcher's pid) and keeps the status.
    cancelled = jobs.cancel_run(db, run.id, grace_seconds=10)
    assert cancelled.status == "failed" and supervision.run_processes(db, cancelled) == []
    assert all(not supervision.pid_alive(pid) for pid in workers)
    with pytest.raises(InputError, match="already failed"):  # nothing left to cancel
        jobs.cancel_run(db, run.id)

    # Now it resumes, finishes once, and one model is registered for it.
    monkeypatch.setenv("TOY_STEP_SECONDS", "0")
    monkeypatch.setenv(launch.LAUNCHER_ENV, "python")
    jobs.resume_run(db, run.id)
    done = jobs.wait(db, run.id, timeout=120)
    assert done.status == "succeeded", run_metrics.log_tail(done)
    assert db.execute("SELECT COUNT(*) FROM models WHERE run_id = ?", [run.id]).fetchone()[0] == 1


def _fake_launch(db_path: str, run_id: int) -> tuple[int, int]:
    """(launcher pid, worker pid): a process leading its own group, like supervision.spawn's, whose child runs in the
    same group with a worker's command line; both ignore SIGTERM (stuck in C code). The launcher is then
    SIGKILLed, leaving the worker."""
    args = ["-m", "labeler.worker", "--db", db_path, "--run-id", str(run_id)]
    child = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); "
             "time.sleep(600)")
    code = ("import subprocess, sys, time\n"
            f"p = subprocess.Popen([sys.executable, '-c', {child!r}, *sys.argv[1:]], stdout=subprocess.PIPE, text=True)\n"
            "assert p.stdout.readline().strip() == 'up'\n"
            "print(p.pid, flush=True)\n"
            "time.sleep(600)\n")
    launcher = subprocess.Popen([sys.executable, "-c", code, *args], start_new_session=True, stdout=subprocess.PIPE,
                                text=True)
    worker = int(launcher.stdout.readline())
    launcher.kill()
    launcher.wait()
    return launcher.pid, worker


def test_a_silent_run_whose_launcher_is_gone_has_its_worker_stopped(db, tmp_path, monkeypatch):
    monkeypatch.setattr(supervision, "SILENT_STOP_GRACE_SECONDS", 0.5)
    run = jobs.create_run(db, "sft", {"steps": 1}, runs_dir=tmp_path, start=False)
    launcher, worker = _fake_launch(runs.db_file(db), run.id)
    try:
        old = (datetime.now(timezone.utc) - timedelta(seconds=supervision.STALE_SECONDS + 5)
               ).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        db.execute("UPDATE runs SET status = 'running', pid = ?, heartbeat_at = ? WHERE id = ?",
                   [launcher, old, run.id])
        assert supervision.run_processes(db, runs.get_run(db, run.id)) == [worker]
        assert jobs.poll(db) == [run.id]
        failed = runs.get_run(db, run.id)
        stopped = f"no heartbeat for {supervision.STALE_SECONDS:.0f} s, the worker was stopped"
        assert failed.status == "failed" and stopped in failed.error
        # Stopped although the recorded pid was long gone: SIGTERM ignored, so SIGKILL after the grace.
        wait_until(lambda: not supervision.pid_alive(worker), 10, "the orphaned worker to be stopped", interval=0.05)
    finally:
        if supervision.pid_alive(worker):
            os.kill(worker, signal.SIGKILL)


def test_a_worker_of_the_same_run_id_on_another_database_is_not_this_runs(db, tmp_path, monkeypatch):
    monkeypatch.setattr(jobs, "start_queued", lambda db, max_concurrent=None: [])  # queued, never launched
    run = jobs.create_run(db, "sft", {"steps": 1}, runs_dir=tmp_path, start=False)
    other = str(tmp_path / "other.db")
    launcher, worker = _fake_launch(other, run.id)
    try:
        db.execute("UPDATE runs SET status = 'failed', pid = ? WHERE id = ?", [launcher, run.id])
        assert supervision.run_processes(db, runs.get_run(db, run.id)) == []
        assert jobs.resume_run(db, run.id).status == "queued"
    finally:
        os.kill(worker, signal.SIGKILL)


def test_a_run_registers_at_most_one_model(db, tmp_path):
    from labeler import worker
    from labeler.services.execution.metrics_sink import MetricsSink
    from labeler.services.training.stages import RunResult, StageContext

    run = jobs.create_run(db, "sft", {"steps": 1}, runs_dir=tmp_path, start=False)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    ctx = StageContext(run_id=run.id, db_path=runs.db_file(db), stage="sft", project="default",
                       job=jobs.train_configs.load_job_config(run.config), trainer_settings={},
                       output_dir=tmp_path, sink=MetricsSink(runs.db_file(db), run.id, writes=False))
    result = RunResult(path=str(folder), kind="policy", base_model="default")
    first = worker.register_result(db, ctx, result)
    # The same folder again (an attempt killed after registering, during its evaluation, then resumed): the
    # registration stands, no second one.
    assert worker.register_result(db, ctx, result)["name"] == first["name"]
    other = tmp_path / "other-model"
    other.mkdir()
    (other / "model.safetensors").write_bytes(b"")
    with pytest.raises(RuntimeError, match=f"run {run.id} already registered model '{first['name']}'"):
        worker.register_result(db, ctx, RunResult(path=str(other), kind="policy", base_model="default"))
    assert [r[0] for r in db.execute("SELECT name FROM models WHERE run_id = ?", [run.id])] == [first["name"]]
