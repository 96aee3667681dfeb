"""Training runs end to end with real worker processes and a tiny injected stage (tests/services/toy_runner.py).

The toy stage is linear regression whose mini-batches come from torch's global RNG, so "the loss curve after a
resume continues the one before" is checked exactly: a cancelled-and-resumed run logs the same losses, step for
step, as an uninterrupted run with the same seed.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_until
import torch

from labeler.services.execution import checkpoints, launch, run_metrics, runs, supervision
from labeler.services.training import jobs
from labeler.errors import InputError

HERE = Path(__file__).resolve().parent
TOY = {"runner": "toy_runner:run", "model": "toy-linear"}


@pytest.fixture(autouse=True)
def _toy_on_path(monkeypatch):
    # The worker is a separate process: it finds toy_runner through PYTHONPATH.
    monkeypatch.setenv("PYTHONPATH", str(HERE))
    monkeypatch.setenv(launch.LAUNCHER_ENV, "python")  # accelerate launch is covered by one test below
    monkeypatch.delenv(checkpoints.SLEEP_ENV, raising=False)
    monkeypatch.delenv("TOY_STEP_SECONDS", raising=False)


def _losses(db, run_id):
    frame = run_metrics.metrics_frame(db, run_id, ["loss"])
    return list(zip(frame["step"].tolist(), frame["value"].tolist()))


def _reference_losses(db, runs_dir, steps, every):
    """The same toy run executed in this process without interruption."""
    from labeler.worker import run_worker

    run = jobs.create_run(db, "sft", {**TOY, "steps": steps, "checkpoint_every": every}, runs_dir=runs_dir, start=False)
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
    assert run_worker(runs.db_file(db), run.id) == "succeeded"
    return _losses(db, run.id)


def test_run_through_accelerate_launch_is_recorded_plotted_and_registered(db, tmp_path, monkeypatch):
    monkeypatch.setenv(launch.LAUNCHER_ENV, "accelerate")
    run = jobs.create_run(db, "sft", {**TOY, "steps": 6, "checkpoint_every": 3, "keep_checkpoints": True},
                          runs_dir=tmp_path / "runs")
    assert run.status == "running" and run.pid
    assert "labeler.launcher" in run.command and "labeler.worker" in run.command  # accelerate launch, in-process
    assert f"--run-id {run.id}" in run.command

    done = jobs.wait(db, run.id, timeout=120)
    assert done.status == "succeeded", run_metrics.log_tail(done)
    assert (done.step, done.total_steps) == (6, 6)
    assert done.started_at and done.ended_at and done.heartbeat_at and done.error == ""
    assert [step for step, _ in _losses(db, run.id)] == [1, 2, 3, 4, 5, 6]
    assert set(run_metrics.metric_names(db, run.id)) == {"loss", "lr"}
    assert "run {}: succeeded".format(run.id) in run_metrics.log_tail(done)
    # The worker uses every core this process may use (accelerate alone would give it OMP_NUM_THREADS=1).
    assert "--num_cpu_threads_per_process {}".format(launch.usable_cores()) in run.command
    log = Path(done.log_path).read_text()
    assert "torch threads {},".format(launch.usable_cores()) in log
    # Each of the worker's own lines says when it was written, so a run's phases can be timed from its log.
    stamped = re.findall(r"^\[(\d\d):(\d\d):(\d\d)\] run {}: (.*)$".format(run.id), log, flags=re.MULTILINE)
    lines = [line for *_, line in stamped]
    trained, finished = (lines.index(f"{what} {done.output_dir}/model")
                         for what in ("trained; model saved at", "succeeded; model at"))
    assert lines[0].startswith("stage sft, torch threads") and trained < finished == len(lines) - 1
    assert all(int(h) < 24 and int(m) < 60 and int(s) < 60 for h, m, s, _ in stamped)
    # Two complete checkpoints kept (steps 3 and 6), each with a manifest.
    assert [p.name for p in checkpoints.complete_checkpoints(Path(done.output_dir) / "checkpoints")] == [
        "checkpoint-3", "checkpoint-6"]
    # Registered with its lineage.
    model = db.execute("SELECT * FROM models WHERE run_id = ?", [run.id]).fetchone()
    assert model["name"] == f"sft-run{run.id}" and model["base_model"] == "toy-linear"
    assert model["data_snapshot"] == "toy:64"
    import json

    metrics = json.loads(model["metrics_json"])
    assert metrics["loss"] == _losses(db, run.id)[-1][1] and metrics["final_loss"] > 0
    assert json.loads(model["config_json"])["job"]["steps"] == 6


def test_queue_runs_one_at_a_time(db, tmp_path, monkeypatch):
    monkeypatch.setenv("TOY_STEP_SECONDS", "0.05")
    first = jobs.create_run(db, "sft", {**TOY, "steps": 5}, runs_dir=tmp_path / "runs")
    second = jobs.create_run(db, "rm", {**TOY, "steps": 3}, runs_dir=tmp_path / "runs")
    assert (first.status, second.status) == ("running", "queued")
    # The first worker starts the second on its way out; nobody needs to poll.
    wait_until(lambda: runs.get_run(db, second.id).status in runs.FINAL, 120, "second run")
    first, second = runs.get_run(db, first.id), runs.get_run(db, second.id)
    assert (first.status, second.status) == ("succeeded", "succeeded")
    assert second.started_at >= first.ended_at


def test_cancel_then_resume_continues_the_loss_curve(db, tmp_path, monkeypatch):
    reference = _reference_losses(db, tmp_path / "ref", steps=12, every=2)
    monkeypatch.setenv("TOY_STEP_SECONDS", "0.3")
    monkeypatch.setenv(launch.LAUNCHER_ENV, "accelerate")  # launcher + worker: cancel must end both
    run = jobs.create_run(db, "sft", {**TOY, "steps": 12, "checkpoint_every": 2}, runs_dir=tmp_path / "runs")
    wait_until(lambda: runs.get_run(db, run.id).step >= 5, 90, "step 5")
    cancelled = jobs.cancel_run(db, run.id, grace_seconds=10)
    assert cancelled.status == "cancelled" and cancelled.ended_at
    assert not supervision.group_alive(cancelled.pid)  # no process of the run's group is left
    # The worker's SIGTERM handler ran: a clean end.
    assert f"run {run.id}: cancelled" in run_metrics.log_tail(cancelled)
    stopped_at = runs.get_run(db, run.id).step
    assert 5 <= stopped_at < 12
    assert runs.get_run(db, run.id).status == "cancelled"  # the worker did not overwrite it

    monkeypatch.setenv("TOY_STEP_SECONDS", "0")
    resumed = jobs.resume_run(db, run.id)
    assert resumed.status == "running"
    done = jobs.wait(db, run.id, timeout=60)
    assert done.status == "succeeded", run_metrics.log_tail(done)
    assert "resumed from" in run_metrics.log_tail(done, 200)
    got = _losses(db, run.id)
    assert [s for s, _ in got] == list(range(1, 13))
    assert got == pytest.approx(reference, abs=1e-6)


def test_sigkill_inside_checkpoint_writing_leaves_last_good_checkpoint(db, tmp_path, monkeypatch):
    reference = _reference_losses(db, tmp_path / "ref", steps=8, every=2)
    monkeypatch.setenv(checkpoints.SLEEP_ENV, "60@4")  # the worker sleeps inside the step-4 checkpoint
    run = jobs.create_run(db, "sft", {**TOY, "steps": 8, "checkpoint_every": 2}, runs_dir=tmp_path / "runs")
    root = Path(run.output_dir) / "checkpoints"
    wait_until(lambda: any((p / "training_state.pt").exists() for p in root.glob(".tmp-checkpoint-4-*")), 60,
                "the step-4 checkpoint files")
    os.killpg(run.pid, signal.SIGKILL)
    wait_until(lambda: not supervision.pid_alive(run.pid), 10, "the worker to die")

    assert jobs.poll(db) == [run.id]
    failed = runs.get_run(db, run.id)
    assert failed.status == "failed" and "gone" in failed.error and failed.ended_at
    assert checkpoints.latest_checkpoint(root).name == "checkpoint-2"
    state = torch.load(root / "checkpoint-2" / "training_state.pt", weights_only=True)
    assert state["step"] == 2
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    monkeypatch.delenv(checkpoints.SLEEP_ENV)
    jobs.resume_run(db, run.id)
    done = jobs.wait(db, run.id, timeout=60)
    assert done.status == "succeeded", run_metrics.log_tail(done)
    assert not list(root.glob(".tmp-*"))  # the half-written folder was cleaned up
    assert _losses(db, run.id) == pytest.approx(reference, abs=1e-6)


def test_early_stop_ends_after_the_current_step_and_keeps_the_model(db, tmp_path, monkeypatch):
    monkeypatch.setenv("TOY_STEP_SECONDS", "0.2")
    run = jobs.create_run(db, "dpo", {**TOY, "steps": 200, "checkpoint_every": 0}, runs_dir=tmp_path / "runs")
    wait_until(lambda: runs.get_run(db, run.id).step >= 2, 60, "step 2")
    jobs.request_stop(db, run.id)
    done = jobs.wait(db, run.id, timeout=60)
    assert done.status == "succeeded" and done.step < 200
    assert db.execute("SELECT COUNT(*) FROM models WHERE run_id = ?", [run.id]).fetchone()[0] == 1
    assert (Path(done.output_dir) / "model" / "model.safetensors").exists()


def test_dead_worker_is_marked_failed_by_poll(db, tmp_path):
    from datetime import datetime, timedelta, timezone

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = jobs.create_run(db, "sft", TOY, runs_dir=tmp_path, start=False)
    silent = jobs.create_run(db, "sft", TOY, runs_dir=tmp_path, start=False)
    fresh = jobs.create_run(db, "sft", TOY, runs_dir=tmp_path, start=False)
    now = datetime.now(timezone.utc)
    old = (now - timedelta(seconds=supervision.STALE_SECONDS + 5)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    db.execute("UPDATE runs SET status='running', pid=?, heartbeat_at=? WHERE id=?",
               [gone.pid, runs.utc_now(), dead.id])
    # Alive pid (this test process) but no heartbeat for over a minute: hung or a reused pid.
    db.execute("UPDATE runs SET status='running', pid=?, heartbeat_at=? WHERE id=?", [os.getpid(), old, silent.id])
    db.execute("UPDATE runs SET status='running', pid=?, heartbeat_at=? WHERE id=?",
               [os.getpid(), runs.utc_now(), fresh.id])
    assert sorted(jobs.poll(db, max_concurrent=5)) == [dead.id, silent.id]
    assert [runs.get_run(db, i).status for i in (dead.id, silent.id, fresh.id)] == ["failed", "failed", "running"]
    assert "gone" in runs.get_run(db, dead.id).error
    assert "heartbeat" in runs.get_run(db, silent.id).error


def test_bad_settings_are_refused_before_anything_is_written(db, tmp_path):
    with pytest.raises(InputError, match="stepz"):
        jobs.create_run(db, "sft", {"stepz": "3"}, runs_dir=tmp_path)
    with pytest.raises(InputError) as error:
        jobs.create_run(db, "sft", {"steps": "many"}, runs_dir=tmp_path)
    assert error.value.field == "steps"
    with pytest.raises(InputError) as error:
        jobs.create_run(db, "ppo", {"reward": "crowd"}, runs_dir=tmp_path)
    assert error.value.field == "reward" and "human" in str(error.value)
    with pytest.raises(InputError) as error:
        jobs.create_run(db, "sft", {"steps": "0"}, runs_dir=tmp_path)
    assert error.value.field == "steps"
    with pytest.raises(InputError, match="stage"):
        jobs.create_run(db, "ppo-v2", {}, runs_dir=tmp_path)
    assert db["runs"].count == 0


def test_cancel_queued_run_and_state_errors(db, tmp_path):
    run = jobs.create_run(db, "sft", TOY, runs_dir=tmp_path, start=False)
    assert jobs.cancel_run(db, run.id).status == "cancelled"
    with pytest.raises(InputError, match="already cancelled"):
        jobs.cancel_run(db, run.id)
    with pytest.raises(InputError, match="only a failed or cancelled"):
        jobs.resume_run(db, jobs.create_run(db, "sft", TOY, runs_dir=tmp_path, start=False).id)


def test_eta_from_average_pace():
    run = runs.Run(id=1, project="default", stage="sft", name="", status="running", config={}, command="", pid=1,
                   log_path="", output_dir="", error="", step=5, total_steps=20, stop_requested=False,
                   created_by=None, created_at="", started_at="2026-01-01T00:00:00.000000Z", ended_at=None,
                   heartbeat_at=None)
    from datetime import datetime, timezone

    now = datetime(2026, 1, 1, 0, 0, 10, tzinfo=timezone.utc)
    # 5 steps in 10 s -> 2 s/step; 15 steps left -> 30 s.
    assert run.eta_seconds(now) == pytest.approx(30.0)
    assert run.fraction == pytest.approx(0.25)


def test_a_recreated_database_never_reuses_an_old_run_folder(tmp_path):
    # Issue 10 item 8: run folders were named by id only, so a new database's run 1 continued the old run 1's
    # checkpoints. Two databases' first runs in one runs folder get different folders.
    from storage import open_db

    firsts = []
    for name in ("old.db", "new.db"):
        db = open_db(str(tmp_path / name))
        run = jobs.create_run(db, "sft", {"steps": 1}, runs_dir=tmp_path / "runs", start=False)
        assert run.id == 1 and Path(run.output_dir).name.startswith("run-1-")
        firsts.append(run.output_dir)
        db.conn.close()
    assert firsts[0] != firsts[1]


def test_log_tail_drops_progress_bar_escapes_and_repeats(db, tmp_path):
    run = jobs.create_run(db, "sft", {**TOY, "steps": 1}, runs_dir=tmp_path / "runs", start=False)
    Path(run.log_path).parent.mkdir(parents=True, exist_ok=True)
    Path(run.log_path).write_text(
        "start\n"
        " 10%|#         | 1/10\r 50%|#####     | 5/10\r100%|##########| 10/10\n"  # tqdm rewriting its line
        "\x1b[A\x1b[2Kloss 0.5\n"                                              # cursor up, clear line
        "loss 0.5\n"
        "done\n"
    )
    assert run_metrics.log_tail(runs.get_run(db, run.id)) == "start\n100%|##########| 10/10\nloss 0.5\ndone"
