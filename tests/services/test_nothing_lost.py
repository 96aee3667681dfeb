"""Nothing trained is lost (issue 22, item 5): a run whose rewards come from people checkpoints after every step,
a cancelled run keeps the model of its newest checkpoint, a checkpoint being written when the cancel comes is
finished first, and `eval` of a checkpoint (or of a run's final model folder) measures KL against the run's base,
not against the folder itself."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from helpers import wait_until

from labeler.services.execution import checkpoints, launch, run_metrics, runs, supervision
from labeler.services.evals import evaluation
from labeler.services.training import jobs, kept_models
from labeler.services.serving import models
from labeler.services.data import prompts
from labeler.services.evals.evaluation import EvalSettings
from labeler.services.training.stages import checkpoint_due, checkpoint_keep
from labeler.services.settings.job_settings import JobConfig
from storage import open_db

HERE = Path(__file__).resolve().parent
WORDS = "eval_rewards:words"
TOY = {"runner": "toy_runner:run", "model": "toy-linear"}
TINY_PPO = {"steps": 2, "reward": "function", "reward_function": WORDS, "batch_size": 2, "answers_per_prompt": 1,
            "mini_batch_size": 2, "ppo_epochs": 1, "max_new_tokens": 4, "checkpoint_every": 1, "eval_samples": 0}


# ---- when to checkpoint, how many to keep ----------------------------------------------------------------

def test_people_labels_are_checkpointed_after_every_step():
    for reward in ("human", "mix"):
        job = JobConfig(reward=reward, checkpoint_every=10)
        assert [checkpoint_due(job, step) for step in (0, 1, 2, 3, 9, 10, 11)] == [False] + [True] * 6
        assert checkpoint_keep(job) == 1
    job = JobConfig(reward="rm", checkpoint_every=10)  # a function or reward model: every 10th step
    assert [checkpoint_due(job, step) for step in (1, 9, 10, 11, 20, 25)] == [False, False, True, False, True, False]
    assert checkpoint_keep(job) == 2
    off = JobConfig(reward="function", checkpoint_every=0)
    assert not any(checkpoint_due(off, step) for step in range(1, 30))
    assert checkpoint_due(JobConfig(reward="human", checkpoint_every=0), 1)  # people's labels: always


def test_stage_context_keeps_one_checkpoint_of_a_human_run(tmp_path):
    from labeler.services.training.stages import StageContext

    def context(reward):
        return StageContext(run_id=1, db_path="", stage="ppo", project="default", job=JobConfig(reward=reward),
                            trainer_settings={}, output_dir=tmp_path / reward, sink=_WritingSink())

    for reward, kept in (("human", ["checkpoint-3"]), ("rm", ["checkpoint-2", "checkpoint-3"])):
        ctx = context(reward)
        for step in (1, 2, 3):
            ctx.save_checkpoint(step, lambda folder: (folder / "w.safetensors").write_bytes(b"x"))
        assert [p.name for p in checkpoints.complete_checkpoints(ctx.checkpoint_root)] == kept


class _WritingSink:
    writes = True


# ---- a signal that arrives while a checkpoint is written -------------------------------------------------

class _Stop(BaseException):
    pass


def test_a_signal_during_the_block_is_handled_once_the_block_is_done():
    def handler(signum, frame):
        raise _Stop()

    previous = signal.signal(signal.SIGUSR1, handler)
    finished = []
    try:
        with pytest.raises(_Stop):
            with checkpoints.signal_deferred(signal.SIGUSR1):
                os.kill(os.getpid(), signal.SIGUSR1)
                time.sleep(0.05)  # the handler would have run by now
                finished.append("block")
        assert finished == ["block"]
        assert signal.getsignal(signal.SIGUSR1) is handler  # restored
        with checkpoints.signal_deferred(signal.SIGUSR1):  # nothing pending: nothing raised
            finished.append("quiet")
        assert finished == ["block", "quiet"]
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_cancel_during_a_checkpoint_write_waits_for_its_manifest(tmp_path):
    """SIGTERM in the middle of StageContext.save_checkpoint: the checkpoint completes, then the handler runs."""
    from labeler.services.training.stages import StageContext

    ctx = StageContext(run_id=1, db_path="", stage="ppo", project="default", job=JobConfig(reward="human"),
                       trainer_settings={}, output_dir=tmp_path, sink=_WritingSink())

    def write(folder):
        (folder / "a.safetensors").write_bytes(b"a")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
        (folder / "b.safetensors").write_bytes(b"b")

    def handler(signum, frame):
        raise _Stop()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        with pytest.raises(_Stop):
            ctx.save_checkpoint(7, write)
    finally:
        signal.signal(signal.SIGTERM, previous)
    latest = checkpoints.latest_checkpoint(ctx.checkpoint_root)
    assert latest.name == "checkpoint-7"
    assert set(checkpoints.read_manifest(latest)["files"]) == {"a.safetensors", "b.safetensors"}


# ---- a checkpoint's model as a folder of its own -----------------------------------------------------------

def test_export_model_links_the_weights_and_leaves_the_training_state(tmp_path):
    def write(folder):
        (folder / "model.safetensors").write_bytes(b"w" * 100)
        (folder / "config.json").write_text("{}")
        (folder / "trainer_state.pt").write_bytes(b"o" * 200)  # optimizer: not part of the model
        (folder / "job_state.json").write_text('{"position": 4}')
        (folder / "rng_state_0.pth").write_bytes(b"r")

    checkpoint = checkpoints.save_checkpoint(tmp_path / "checkpoints", 3, write)
    target = checkpoints.export_model(checkpoint, tmp_path / "model-step3")
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "model.safetensors"]
    assert (target / "model.safetensors").stat().st_ino == (checkpoint / "model.safetensors").stat().st_ino
    assert (target / "config.json").stat().st_ino != (checkpoint / "config.json").stat().st_ino  # copied
    assert not list(tmp_path.glob(".tmp-*"))
    # The checkpoint rotated away: the exported weights stay.
    checkpoints.save_checkpoint(tmp_path / "checkpoints", 4, write, keep=1)
    assert not checkpoint.exists() and (target / "model.safetensors").read_bytes() == b"w" * 100
    # An incomplete checkpoint is refused, and nothing is written.
    half = tmp_path / "checkpoints" / "checkpoint-9"
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        checkpoints.export_model(half, tmp_path / "model-step9")
    assert not (tmp_path / "model-step9").exists()


# ---- a tiny PPO run: eval of its checkpoint, the model of its newest checkpoint ----------------------------

@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory, tiny_model_dir):
    """A finished 2-step PPO run of the tiny model (function reward) with a checkpoint after each step, kept
    (keep_checkpoints), and held-out prompts; run in-process through the worker's entry point."""
    from labeler.worker import run_worker

    root = tmp_path_factory.mktemp("ppo")
    db_path = str(root / "studio.db")
    db = open_db(db_path)
    prompts.add_prompts(db, ["A training prompt", "Another one", "The film was", "I watched it and"])
    db.execute("UPDATE prompts SET split = 'test' WHERE text IN ('The film was', 'I watched it and')")
    run = jobs.create_run(db, "ppo", {"model": str(tiny_model_dir), **TINY_PPO, "keep_checkpoints": True},
                          runs_dir=root / "runs", start=False)
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
    assert run_worker(db_path, run.id) == "succeeded", run_metrics.log_tail(runs.get_run(db, run.id))
    db.conn.close()
    return db_path, runs.get_run(open_db(db_path), run.id)


def test_eval_of_a_checkpoint_measures_kl_against_the_runs_base(ppo_run, tiny_model_dir, tmp_path):
    db_path, run = ppo_run
    db = open_db(db_path)
    checkpoint = Path(run.output_dir) / "checkpoints" / "checkpoint-1"
    final = Path(run.output_dir) / "model"
    assert evaluation.kl_base(db, str(checkpoint)) == str(tiny_model_dir)  # the run's base, found by its folder
    assert evaluation.kl_base(db, str(final)) == str(tiny_model_dir)  # a registered model's folder: its base
    assert evaluation.kl_base(db, str(tiny_model_dir)) == str(tiny_model_dir)  # no run's, not registered: itself
    ev = evaluation.evaluate_models(db, [str(checkpoint)], EvalSettings(reward=WORDS, samples=2, max_new_tokens=4))[0]
    assert ev.kl_base == str(tiny_model_dir)
    assert ev.metrics["eval/kl"] == pytest.approx(sum(row["kl"] for row in ev.samples) / len(ev.samples))
    assert ev.metrics["eval/kl"] != 0.0  # one PPO step from the base: not the folder compared with itself


def test_a_ppo_checkpoint_holds_the_weights_and_the_optimizer_once_and_not_the_reference(ppo_run, tiny_model_dir):
    """The size of a checkpoint is the fp32 policy (4 bytes a parameter) plus Adam's two moments (8 bytes a
    trainable parameter), plus small files: the reference model and duplicate weights are not saved."""
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    _, run = ppo_run
    checkpoint = Path(run.output_dir) / "checkpoints" / "checkpoint-2"
    policy = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    n = sum(p.numel() for p in policy.parameters())  # tied embeddings count once
    hidden = policy.config.hidden_size
    tensors = {}
    for path in checkpoint.glob("*.safetensors"):
        with safe_open(str(path), "pt") as f:
            tensors.update({f"{path.name}:{k}": f.get_slice(k).get_shape() for k in f.keys()})
    stored = sum(torch.Size(shape).numel() for shape in tensors.values())
    # The policy once, the value head (hidden + 1) in its own file and again in TRL's layout: nothing else.
    assert stored == n + 2 * (hidden + 1)
    assert not any("ref" in key.split(":")[1] for key in tensors)
    state = torch.load(checkpoint / "trainer_state.pt", weights_only=True)
    moments = sum(v.numel() for entry in state["optimizer"]["state"].values() for k, v in entry.items()
                  if k in ("exp_avg", "exp_avg_sq"))
    # Adam's two moments of every trained parameter, once (RLOO, the default estimator, uses no value head, whose
    # parameters then get no gradient and no optimizer state).
    assert moments == 2 * n
    size = (checkpoint / "trainer_state.pt").stat().st_size
    assert 8 * n < size < 8 * n * 1.05 + 100_000


def test_the_newest_checkpoint_is_kept_as_a_registered_model(ppo_run, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    db_path, run = ppo_run
    db = open_db(db_path)
    kept = kept_models.keep_newest_checkpoint(db, run.id)
    checkpoint = Path(run.output_dir) / "checkpoints" / "checkpoint-2"
    assert (kept["name"], kept["kind"], kept["base_model"]) == (f"ppo-run{run.id}-step2", "policy", str(tiny_model_dir))
    assert kept["path"] == str(Path(run.output_dir) / "model-step2")
    assert kept["config"]["kept_from"] == {"run": run.id, "step": 2, "status": "succeeded"}
    assert kept["config"]["job"]["steps"] == 2 and kept["run_id"] is None  # the run's one model stays its final
    assert kept["metrics"]["objective/kl"] == run_metrics.metrics_frame(db, run.id, ["objective/kl"])["value"].iloc[-1]
    assert kept["data_snapshot"] == models.get_model(db, f"ppo-run{run.id}")["data_snapshot"]
    weights = Path(kept["path"]) / "model.safetensors"
    assert weights.stat().st_ino == (checkpoint / "model.safetensors").stat().st_ino
    assert not (Path(kept["path"]) / "trainer_state.pt").exists()
    assert f'model_name: "{kept["name"]}"' in (Path(kept["path"]) / "README.md").read_text()  # its model card
    AutoModelForCausalLM.from_pretrained(kept["path"])  # loads as a plain model
    assert evaluation.kl_base(db, kept["name"]) == str(tiny_model_dir)
    # Kept once: a second call returns the same row.
    assert kept_models.keep_newest_checkpoint(db, run.id)["id"] == kept["id"]
    assert [m["name"] for m in kept_models.kept_models(db, run.id)] == [kept["name"]]


# ---- cancel through a real worker process --------------------------------------------------------------------

@pytest.fixture
def worker_env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(HERE))  # the worker finds toy_runner and eval_rewards
    monkeypatch.setenv(launch.LAUNCHER_ENV, "python")
    monkeypatch.delenv(checkpoints.SLEEP_ENV, raising=False)
    monkeypatch.delenv("TOY_STEP_SECONDS", raising=False)


def test_cancel_keeps_the_newest_checkpoint_and_a_resume_still_finishes(db, tmp_path, monkeypatch, worker_env,
                                                                        capsys):
    from labeler.cli import main

    monkeypatch.setenv("TOY_STEP_SECONDS", "0.2")
    run = jobs.create_run(db, "sft", {**TOY, "steps": 12, "checkpoint_every": 2}, runs_dir=tmp_path / "runs")
    root = Path(run.output_dir) / "checkpoints"
    wait_until(lambda: runs.get_run(db, run.id).step >= 5, 90, "step 5")
    assert main(["runs", "cancel", "--db", runs.db_file(db), str(run.id)]) == 0
    cancelled = runs.get_run(db, run.id)
    assert cancelled.status == "cancelled" and cancelled.error == "cancelled by user"
    newest = checkpoints.checkpoint_step(checkpoints.latest_checkpoint(root))
    assert 4 <= newest <= cancelled.step
    (kept,) = kept_models.kept_models(db, run.id)
    assert kept["name"] == f"sft-run{run.id}-step{newest}" and kept["base_model"] == "toy-linear"
    assert Path(kept["path"]) == Path(run.output_dir) / f"model-step{newest}"
    assert f"kept model {kept['name']} (step {newest}): {kept['path']}" in capsys.readouterr().out
    assert (Path(kept["path"]) / "model.safetensors").read_bytes() == (root / f"checkpoint-{newest}" /
                                                                       "model.safetensors").read_bytes()
    frame = run_metrics.metrics_frame(db, run.id, ["loss"])
    assert kept["metrics"]["loss"] == dict(zip(frame["step"], frame["value"]))[newest]  # the loss at that step

    monkeypatch.setenv("TOY_STEP_SECONDS", "0")
    # A worker that outlived the grace period is SIGKILLed: wait until it is gone (resume refuses while it lives).
    wait_until(lambda: not supervision.pid_alive(cancelled.pid), 30, "the cancelled worker to exit")
    jobs.resume_run(db, run.id)
    done = jobs.wait(db, run.id, timeout=180)  # seconds alone; minutes on a machine shared with other test runs
    assert done.status == "succeeded", run_metrics.log_tail(done)
    names = [m["name"] for m in models.list_models(db) if m["name"] != "default"]
    assert names == [kept["name"], f"sft-run{run.id}"]  # the kept model, then the run's own
    assert models.get_model(db, f"sft-run{run.id}")["run_id"] == run.id


def test_a_cancel_during_a_checkpoint_write_keeps_that_checkpoint(db, tmp_path, monkeypatch, worker_env):
    """The cancel comes while the step-4 checkpoint is written (4 s between its files and its manifest) with a
    1 s grace: the worker finishes the checkpoint before it stops, and the cancel waits for it, so step 4 is kept
    (before, SIGKILL after the grace left the half checkpoint and the model of step 2 was kept)."""
    monkeypatch.setenv(checkpoints.SLEEP_ENV, "4@4")
    run = jobs.create_run(db, "sft", {**TOY, "steps": 50, "checkpoint_every": 2}, runs_dir=tmp_path / "runs")
    root = Path(run.output_dir) / "checkpoints"
    wait_until(lambda: any((p / "training_state.pt").exists() for p in root.glob(".tmp-checkpoint-4-*")), 90,
                "the step-4 checkpoint files")
    assert checkpoints.writing(root)
    cancelled = jobs.cancel_run(db, run.id, grace_seconds=1)
    assert cancelled.status == "cancelled"
    assert checkpoints.latest_checkpoint(root).name == "checkpoint-4" and not checkpoints.writing(root)
    (kept,) = kept_models.kept_models(db, run.id)
    assert kept["config"]["kept_from"]["step"] == 4
    assert f"run {run.id}: cancelled" in run_metrics.log_tail(cancelled)  # a clean end after the write, not SIGKILL


def test_nothing_to_keep_and_a_checkpoint_that_cannot_be_kept(db, tmp_path):
    queued = jobs.create_run(db, "sft", {**TOY, "steps": 5}, runs_dir=tmp_path / "runs", start=False)
    assert jobs.cancel_run(db, queued.id).status == "cancelled"  # a queued run: nothing trained, nothing kept
    assert kept_models.kept_models(db, queued.id) == []
    assert kept_models.keep_newest_checkpoint(db, queued.id) is None  # no checkpoint folder at all

    # A checkpoint without weights (a stage that saved only its state): the cancel stands, its row says why.
    run = jobs.create_run(db, "sft", {**TOY, "steps": 5}, runs_dir=tmp_path / "runs", start=False)
    checkpoints.save_checkpoint(Path(run.output_dir) / "checkpoints", 2,
                                lambda folder: (folder / "trainer_state.pt").write_bytes(b"s"))
    db.execute("UPDATE runs SET status = 'cancelled', error = 'cancelled by user' WHERE id = ?", [run.id])
    assert kept_models.keep_after_cancel(db, run.id) is None
    error = runs.get_run(db, run.id).error
    assert error.startswith("cancelled by user; its newest checkpoint was not kept as a model: ")
    assert "checkpoint-2: no *.safetensors weights to export" in error
    assert kept_models.kept_models(db, run.id) == [] and not (Path(run.output_dir) / "model-step2").exists()
    # Only a cancelled run: one that finished registered its own model.
    db.execute("UPDATE runs SET status = 'succeeded' WHERE id = ?", [run.id])
    assert kept_models.keep_after_cancel(db, run.id) is None and runs.get_run(db, run.id).error == error


def test_a_cancelled_tiny_ppo_run_keeps_a_model_of_its_last_checkpointed_step(db, tmp_path, tiny_model_dir,
                                                                             worker_env):
    prompts.add_prompts(db, ["A training prompt", "Another one", "The film was", "I watched it and"])
    run = jobs.create_run(db, "ppo", {"model": str(tiny_model_dir), **TINY_PPO, "steps": 1000},
                          runs_dir=tmp_path / "runs")
    root = Path(run.output_dir) / "checkpoints"
    wait_until(lambda: checkpoints.latest_checkpoint(root), 180, "the step-1 checkpoint")
    cancelled = jobs.cancel_run(db, run.id)
    assert cancelled.status == "cancelled", run_metrics.log_tail(cancelled)
    (kept,) = kept_models.kept_models(db, run.id)
    step = kept["config"]["kept_from"]["step"]
    # checkpoint_every=1: the newest checkpoint is the last completed step, or the one before when the cancel
    # came between a step's end and its checkpoint.
    assert step == checkpoints.checkpoint_step(checkpoints.latest_checkpoint(root))
    assert cancelled.step - 1 <= step <= cancelled.step and step >= 1
    assert (kept["name"], kept["base_model"]) == (f"ppo-run{run.id}-step{step}", str(tiny_model_dir))
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(kept["path"])


def test_stop_while_waiting_for_people_keeps_the_model_of_the_last_completed_step(db, tmp_path, tiny_model_dir):
    """`runs stop` of a human-reward run waiting for its second batch's ratings: the run ends, and its model
    is the one of step 1 exactly (the weights of the step-1 checkpoint), registered as the run's model."""
    import threading

    from safetensors.torch import load_file

    from labeler.services.data import accounts, labeling
    from labeler.worker import run_worker

    accounts.create_user(db, "ann", "a-long-password")
    prompts.add_prompts(db, ["A training prompt", "Another one", "A third one"])
    run = jobs.create_run(db, "ppo", {"model": str(tiny_model_dir), **TINY_PPO, "steps": 5, "reward": "human",
                                      "human_label": "rating", "human_timeout": 120, "keep_checkpoints": True},
                          runs_dir=tmp_path / "runs", start=False)
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])

    def annotator():  # rates the first batch (2 rollouts), then waits for the second and asks the run to stop
        other = open_db(runs.db_file(db))
        rated = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            item = labeling.next_item(other, "default", "ann", "rating") if rated < 2 else None
            if item is not None and item.run_id == run.id:
                labeling.submit_rating(other, "default", "ann", item.item_id, 7 if rated else 2)  # unequal: a step
                rated += 1
            elif rated == 2 and runs.get_run(other, run.id).step == 1 and labeling.waiting_for_run(other, run.id):
                jobs.request_stop(other, run.id)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=annotator)
    thread.start()
    status = run_worker(runs.db_file(db), run.id)
    thread.join()
    done = runs.get_run(db, run.id)
    assert status == "succeeded" and done.step == 1, run_metrics.log_tail(done)
    model = models.get_model(db, f"ppo-run{run.id}")
    final = load_file(str(Path(model["path"]) / "model.safetensors"))
    step1 = load_file(str(Path(run.output_dir) / "checkpoints" / "checkpoint-1" / "model.safetensors"))
    assert final.keys() == step1.keys() and all((final[k] == step1[k]).all() for k in final)
    base = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    assert any(not (final[k] == base[k]).all() for k in base if k in final)  # trained: not the base
