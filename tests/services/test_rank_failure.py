"""A training process that dies: the run's error says which rank, how (signal or exit code), where its log is,
and how to resume, however rank 0 learnt of it (labeler/launcher.py, supervision.record_rank_failure). Real launches
through accelerate launch (gloo ranks on the CPU) of a tiny stage, tests/services/dying_rank_runner.py."""
from __future__ import annotations

from pathlib import Path

import psutil
import pytest
from helpers import check_rank_0_account

from labeler.services.training import jobs
from labeler.services.execution import launch, run_metrics, runs, supervision

pytestmark = pytest.mark.timeout(300)

DYING = {"runner": "dying_rank_runner:run", "model": "toy", "steps": 3, "checkpoint_every": 1}


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no accelerate default config of this machine's user
    for name in (launch.LAUNCHER_ENV, launch.ACCELERATE_CONFIG_ENV, launch.NUM_PROCESSES_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent))  # the worker finds the runner


def run_dying(db, tmp_path, monkeypatch, processes: int, rank: int, how: str) -> runs.Run:
    monkeypatch.setenv("DYING_RANK", str(rank))
    monkeypatch.setenv("DYING_HOW", how)
    run = jobs.create_run(db, "sft", {**DYING, "num_processes": processes}, runs_dir=tmp_path / "runs")
    done = jobs.wait(db, run.id, timeout=240)
    # wait() returns once the launcher has exited (it writes the error last): nothing of the run is left. A process
    # in the middle of exiting has already dropped its command line (what settled() reads) but may not be a zombie
    # yet (a CI run saw it 'running' there): it must be gone within moments, not keep running.
    if psutil.pid_exists(done.pid) and psutil.Process(done.pid).status() != psutil.STATUS_ZOMBIE:
        try:
            psutil.Process(done.pid).wait(timeout=5)
        except psutil.TimeoutExpired:
            raise AssertionError(f"run {done.id}'s launcher (pid {done.pid}) still runs after wait() returned") from None
    return done


def test_a_killed_rank_is_named_with_its_signal_log_and_the_resume_command(db, tmp_path, monkeypatch):
    done = run_dying(db, tmp_path, monkeypatch, processes=2, rank=1, how="SIGKILL")
    assert done.status == "failed"
    assert "--tee 3" in done.command and f"--log_dir {Path(done.output_dir) / 'ranks'}" in done.command
    error = done.error
    assert error.startswith("training process rank 1 (pid "), error
    assert ") was killed by signal 9 (SIGKILL); its log: " in error
    # The log named is rank 1's own (tracebacks; its prints in stdout.log beside it), and only rank 1's.
    log = Path(error.split("its log: ", 1)[1].split(";", 1)[0])
    assert log.name == "stderr.log" and log.parent.name == "1" and log.is_relative_to(Path(done.output_dir) / "ranks")
    assert (log.parent / "stdout.log").read_text() == "rank 1: step 1\n"
    assert "rank 0: step 1" in (log.parent.parent / "0" / "stdout.log").read_text()
    # What rank 0 saw (the lost peer, or the launcher's SIGTERM) is kept after it when it recorded anything, then
    # the resume command. That the words are kept is test_a_rank_0_that_only_lost_its_peer_...'s.
    check_rank_0_account(error, done.id, ("Connection closed by peer", "another training process failed"))
    checkpoint = Path(done.output_dir) / "checkpoints" / "checkpoint-1"
    assert error.endswith(f"; `rlhf-studio runs resume {done.id}` continues from {checkpoint}"), error
    assert "\n" not in error
    # The worker log has every rank's lines too, prefixed by torch elastic with the rank.
    assert "[default1]:rank 1: step 1" in run_metrics.log_tail(done, 400).splitlines()


def test_a_rank_that_exits_is_named_with_its_exit_code(db, tmp_path, monkeypatch):
    done = run_dying(db, tmp_path, monkeypatch, processes=2, rank=1, how="exit")
    assert done.status == "failed"
    assert done.error.startswith("training process rank 1 (pid "), done.error
    assert ") exited with code 3; its log: " in done.error


def test_a_killed_single_process_is_recorded_not_left_running(db, tmp_path, monkeypatch):
    # Nothing in the process can record a SIGKILL: before the launcher did, the row said running until poll()
    # found the pid gone ("the worker process is gone").
    done = run_dying(db, tmp_path, monkeypatch, processes=1, rank=0, how="SIGKILL")
    assert done.status == "failed"
    assert "--tee" not in done.command  # one process: its log is the worker log
    checkpoint = Path(done.output_dir) / "checkpoints" / "checkpoint-1"
    assert done.error == (f"training process rank 0 was killed by signal 9 (SIGKILL); its log: {done.log_path}; "
                          f"`rlhf-studio runs resume {done.id}` continues from {checkpoint}")


def test_rank_0_keeps_its_own_error_and_a_cancel_is_left_alone(db, tmp_path):
    failure = supervision.RankFailure(rank=0, pid=11, exitcode=1, log=None)
    run = jobs.create_run(db, "sft", {**DYING}, runs_dir=tmp_path / "runs", start=False)
    db.execute("UPDATE runs SET status = 'failed', error = 'ValueError: bad row 3' WHERE id = ?", [run.id])
    assert supervision.record_rank_failure(db, run.id, failure) is None
    assert runs.get_run(db, run.id).error == "ValueError: bad row 3"
    db.execute("UPDATE runs SET status = 'cancelled', error = 'cancelled by user' WHERE id = ?", [run.id])
    killed = supervision.RankFailure(rank=1, pid=12, exitcode=-15, log=None)
    assert supervision.record_rank_failure(db, run.id, killed) is None
    assert (runs.get_run(db, run.id).status, runs.get_run(db, run.id).error) == ("cancelled", "cancelled by user")
    # No checkpoint yet: the resume starts again.
    db.execute("UPDATE runs SET status = 'failed', error = '' WHERE id = ?", [run.id])
    crashed = supervision.RankFailure(rank=2, pid=None, exitcode=-11, log=None)
    message = supervision.record_rank_failure(db, run.id, crashed)
    assert message == (f"training process rank 2 was killed by signal 11 (SIGSEGV); its log: {run.log_path}; "
                       f"`rlhf-studio runs resume {run.id}` starts it again (no complete checkpoint yet)")
    assert runs.get_run(db, run.id).error == message


def test_a_rank_0_that_only_lost_its_peer_gives_way_to_the_rank_that_died(db, tmp_path):
    # torch elastic's clock counts whole seconds: rank 0, failing on the lost connection in the same second as
    # rank 1's exit, can come first as the "root cause". Its recorded error says it lost a peer: rank 1 is named.
    run = jobs.create_run(db, "sft", {**DYING}, runs_dir=tmp_path / "runs", start=False)
    lost = "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:23776."
    db.execute("UPDATE runs SET status = 'failed', error = ? WHERE id = ?", [lost, run.id])
    rank0 = supervision.RankFailure(rank=0, pid=11, exitcode=1, log=None)
    rank1 = supervision.RankFailure(rank=1, pid=12, exitcode=3, log=None)
    message = supervision.record_rank_failure(db, run.id, rank0, [rank1])
    assert message.startswith("training process rank 1 (pid 12) exited with code 3; its log: "), message
    assert f"the other ranks were stopped (rank 0 recorded: {lost})" in message
    # A rank 0 that failed on its own error stays the root cause, whoever else failed after it.
    db.execute("UPDATE runs SET status = 'failed', error = 'ValueError: bad row 3' WHERE id = ?", [run.id])
    assert supervision.record_rank_failure(db, run.id, rank0, [rank1]) is None
    assert runs.get_run(db, run.id).error == "ValueError: bad row 3"
