"""Runs of two training processes through the CLI: the real `accelerate launch --multi_gpu --num_processes 2`,
gloo ranks on this CPU (launch.launch_env sets ACCELERATE_USE_CPU=1), tiny models. Each launch costs ~10 s of
start-up on 2 cores, so each test does as few as it can."""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
# tests/ is on sys.path: pytest puts it there for tests/conftest.py (the default "prepend" import mode).
from helpers import check_rank_0_account
from services.labeling_helpers import add_ranked_pairs

from labeler.cli import main
from labeler.services.data import accounts
from labeler.services.execution import launch, run_metrics, runs, supervision
from storage import open_db


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no accelerate default config of this machine's user
    for name in (launch.LAUNCHER_ENV, launch.ACCELERATE_CONFIG_ENV, launch.NUM_PROCESSES_ENV):
        monkeypatch.delenv(name, raising=False)


def seed_labels(db_path: str, n_prompts: int) -> None:
    """Prompts with a good and a bad answer, ranked good first by one annotator."""
    db = open_db(db_path)
    accounts.create_user(db, "ann", "a-long-password")
    add_ranked_pairs(db, n_prompts)


def metric_steps(db, run_id: int, name: str) -> list[int]:
    return [row[0] for row in db.execute("SELECT step FROM metrics WHERE run_id = ? AND name = ? ORDER BY step",
                                         [run_id, name])]


def train(db_path, tmp_path, stage: str, settings: dict) -> int:
    sets = [x for key, value in settings.items() for x in ("--set", f"{key}={value}")]
    return main(["train", stage, "--db", db_path, "--create-db", *sets, "--runs-dir", str(tmp_path / "runs"), "--wait"])


def test_train_rm_on_two_processes(db_path, tmp_path, tiny_encoder_dir, capsys):
    open_db(db_path)
    seed_labels(db_path, 8)
    code = train(db_path, tmp_path, "rm", {"model": tiny_encoder_dir, "num_processes": 2, "steps": 3,
                                           "checkpoint_every": 2, "keep_checkpoints": "true",
                                           "per_device_train_batch_size": 2, "include_rating_pairs": "false",
                                           "test_size": 0.25})
    db = open_db(db_path)
    run = runs.get_run(db, 1)
    assert code == 0 and run.status == "succeeded", (run.error, run_metrics.log_tail(run), capsys.readouterr().out)
    command = run.command
    assert "--multi_gpu" in command and "--num_processes 2" in command and "--main_process_port" in command
    log = run_metrics.log_tail(run, 400)
    assert "rank 1" not in log  # no rank failed
    # One row per step and metric, written by the main process (the Trainer's loss is already the mean
    # over both ranks); the final evaluation once, at the last step.
    assert metric_steps(db, 1, "loss") == [1, 2, 3]
    assert metric_steps(db, 1, "eval_accuracy") == [3]
    assert (run.step, run.total_steps) == (3, 3)
    assert db.execute("SELECT kind FROM models WHERE run_id = 1").fetchone()[0] == "reward"
    # Trainer's checkpoint at step 2 holds both ranks' RNG states, listed in the manifest.
    manifest = json.loads((Path(run.output_dir) / "checkpoints" / "checkpoint-2" / "manifest.json").read_text())
    assert {"rng_state_0.pth", "rng_state_1.pth"} <= set(manifest["files"])


def ranks_of(launcher_pid: int) -> dict[int, psutil.Process]:
    """The training processes under a run's launcher, by their RANK."""
    found = {}
    for child in psutil.Process(launcher_pid).children(recursive=True):
        try:
            rank = child.environ().get("RANK")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if rank is not None and "labeler.worker" in " ".join(child.cmdline()):
            found[int(rank)] = child
    return found


def test_ppo_on_two_processes_a_killed_rank_fails_the_run_and_resume_finishes_it(db_path, tmp_path, tiny_model_dir,
                                                                                  capsys):
    open_db(db_path)
    seed_labels(db_path, 8)
    settings = {"model": tiny_model_dir, "num_processes": 2, "steps": 3, "reward": "function", "batch_size": 2,
                "answers_per_prompt": 1, "mini_batch_size": 2, "ppo_epochs": 1, "max_new_tokens": 4,
                "checkpoint_every": 1, "keep_checkpoints": "true", "samples_per_step": 4, "eval_samples": 0}
    sets = [x for key, value in settings.items() for x in ("--set", f"{key}={value}")]
    assert main(["train", "ppo", "--db", db_path, *sets, "--runs-dir", str(tmp_path / "runs")]) == 0
    db = open_db(db_path)
    run = runs.get_run(db, 1)
    # Kill rank 1 once step 1's checkpoint is complete.
    first = Path(run.output_dir) / "checkpoints" / "checkpoint-1" / "manifest.json"
    deadline = time.monotonic() + 240
    while not first.exists() and time.monotonic() < deadline and runs.get_run(db, 1).status == "running":
        time.sleep(0.2)
    assert first.exists(), run_metrics.log_tail(runs.get_run(db, 1))
    launcher = psutil.Process(runs.get_run(db, 1).pid)
    ranks = ranks_of(launcher.pid)
    assert sorted(ranks) == [0, 1]
    os.kill(ranks[1].pid, signal.SIGKILL)
    while runs.get_run(db, 1).status == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    # Rank 0 marked the run failed: either its next collective lost the peer (gloo raises), or the launcher saw
    # rank 1 die first and stopped rank 0 with SIGTERM. Then the launcher, once every rank has exited, recorded
    # which rank died and how (labeler/launcher.py); settled() waits for it.
    failed = supervision.settled(db, runs.get_run(db, 1))
    assert failed.status == "failed", run_metrics.log_tail(failed)
    gone, alive = psutil.wait_procs([*ranks.values(), launcher], timeout=60)
    assert not alive
    # The kill lands wherever rank 1 is by then: on this tiny model that can be step 3 or the final save (seen in
    # CI), which fails the run all the same; the resume below finishes it from the newest complete checkpoint.
    assert 1 <= failed.step <= 3
    error = failed.error
    assert error.startswith(f"training process rank 1 (pid {ranks[1].pid}) was killed by signal 9 (SIGKILL); "
                            f"its log: {Path(failed.output_dir) / 'ranks'}/"), error
    rank_log = Path(error.split("its log: ", 1)[1].split(";", 1)[0])
    assert rank_log.name == "stderr.log" and rank_log.parent.name == "1" and rank_log.exists()
    # What rank 0 saw is kept when it recorded anything, then the command that resumes, from the checkpoint that
    # was complete (helpers.check_rank_0_account says when rank 0 records nothing).
    check_rank_0_account(error, 1, ("remote worker", "Connection closed by peer", "another training process failed"))
    checkpoint = Path(error.split("`rlhf-studio runs resume 1` continues from ", 1)[1])
    assert checkpoint.parent == Path(failed.output_dir) / "checkpoints" and (checkpoint / "manifest.json").exists()
    # The newest complete checkpoint: step 1's, or step 2's when rank 1 lived through step 2 (the run's step can be
    # ahead of its last complete checkpoint while that is being written).
    complete = sorted(int(p.parent.name.split("-")[1]) for p in checkpoint.parent.glob("checkpoint-*/manifest.json"))
    assert int(checkpoint.name.split("-")[1]) == complete[-1] <= failed.step

    assert main(["runs", "resume", "1", "--db", db_path, "--wait"]) == 0
    done = runs.get_run(db, 1)
    assert done.status == "succeeded", (done.error, run_metrics.log_tail(done))
    assert f"resumed from {Path(done.output_dir) / 'checkpoints'}" in run_metrics.log_tail(done, 400)
    # Every step's metrics once (the steps after the checkpoint were redone, not added), by the main process.
    assert metric_steps(db, 1, "env/reward_mean") == [1, 2, 3]
    # Each step's samples come from both ranks' batches: 2 answers each, to 4 different prompts, and the
    # ranks move through the prompts together, 4 new prompts a step (position 12 after 3 steps).
    samples = run_metrics.samples(db, 1)
    assert sorted(s["step"] for s in samples) == [1] * 4 + [2] * 4 + [3] * 4
    for step in (1, 2, 3):
        assert len({s["query"] for s in samples if s["step"] == step}) == 4
    state = json.loads((Path(done.output_dir) / "checkpoints" / "checkpoint-3" / "job_state.json").read_text())
    assert state["position"] == 12
    assert (Path(done.output_dir) / "model" / "model.safetensors").exists()


def test_ppo_on_two_processes_holds_a_constraint_at_the_whole_batch_s_level(db_path, tmp_path, tiny_model_dir,
                                                                             monkeypatch):
    # The constraint scores each answer by its rank (tests/services/constraint_scores.py: rank 0 scores 0, rank 1
    # scores 1): held at the base's level, the ranks must agree on the whole first batch's mean, 0.5, where each
    # alone would hold its own 0 or 1.
    services = Path(__file__).resolve().parents[1] / "services"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(services), os.environ.get("PYTHONPATH")])))
    open_db(db_path)
    seed_labels(db_path, 8)
    settings = {"model": tiny_model_dir, "num_processes": 2, "steps": 2, "batch_size": 2, "answers_per_prompt": 1,
                "reward": "constraint_scores:zero,constraint_scores:by_rank>=base", "constraint_lr": 1.0,
                "mini_batch_size": 2, "ppo_epochs": 1, "max_new_tokens": 4, "checkpoint_every": 1,
                "keep_checkpoints": "true", "eval_samples": 0}
    assert train(db_path, tmp_path, "ppo", settings) == 0
    db = open_db(db_path)
    done = runs.get_run(db, 1)
    assert done.status == "succeeded", (done.error, run_metrics.log_tail(done))
    # The main process saves the state every rank agreed on: the threshold 0.5 (alone it would save its own 0),
    # and the multiplier max(0, 0 - 1.0 * (0.5 - 0.5)) = 0 (the whole batch meets it exactly).
    for step in (1, 2):
        state = json.loads((Path(done.output_dir) / "checkpoints" / f"checkpoint-{step}" / "reward_state.json")
                           .read_text())
        assert state == {"lagrange_multiplier": 0.0, "constraint_threshold": 0.5}
