"""The built-in stages (SFT, reward model, DPO, PPO) on tiny models, run in-process through the worker's own
entry point (run_worker), with data labelled through the labeling service. Each registers its model with
lineage. The human-reward PPO test has a thread play the annotator and checks the PPO step received exactly
the rewards that the ratings map to."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import torch
from labeling_helpers import add_ranked_pairs

from labeler.services.data import accounts, labeling
from labeler.services.training import jobs
from labeler.services.serving import models
from labeler.services.execution import run_metrics, runs
from labeler.services.labels.human_reward import rating_to_reward
from labeler.worker import run_worker
from storage import open_db


def _seed_labels(db, n_prompts=8):
    """Prompts with a good and a bad answer; the annotator ann ranks good first and rates good 7, bad 2."""
    accounts.create_user(db, "ann", "a-long-password")
    accounts.create_user(db, "boss", "a-long-password", role="admin")
    add_ranked_pairs(db, n_prompts, rate=True)


def _run_in_process(db, stage, settings, tmp_path):
    run = jobs.create_run(db, stage, settings, runs_dir=tmp_path / "runs", start=False, username="boss")
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
    status = run_worker(runs.db_file(db), run.id)
    done = runs.get_run(db, run.id)
    assert status == "succeeded", (done.error, run_metrics.log_tail(done))
    return done


def _check_lineage(db, run, base, kind, snapshot_kind, metric):
    model = models.get_model(db, f"{run.stage}-run{run.id}")
    assert (model["kind"], model["base_model"], model["run_id"]) == (kind, base, run.id)
    assert model["data_snapshot"].startswith(f"{snapshot_kind}:")
    assert model["config"]["stage"] == run.stage and model["config"]["job"]["steps"] == run.total_steps
    assert metric in model["metrics"]
    frame = run_metrics.metrics_frame(db, run.id, [metric])
    assert len(frame) >= 1
    return model


def test_reward_model_stage_registers_with_lineage(db, tmp_path, tiny_encoder_dir, capsys):
    _seed_labels(db)
    run = _run_in_process(db, "rm", {"model": str(tiny_encoder_dir), "steps": 3, "checkpoint_every": 2,
                                     "per_device_train_batch_size": 4, "test_size": 0.25}, tmp_path)
    assert (run.step, run.total_steps) == (3, 3)
    model = _check_lineage(db, run, str(tiny_encoder_dir), "reward", "preferences", "loss")
    assert "eval_accuracy" in model["metrics"]
    # Its checkpoint of step 2 served only to resume it: a run that succeeds deletes them and keeps its model.
    assert not (Path(run.output_dir) / "checkpoints").exists() and Path(model["path"]).is_dir()
    assert f"run {run.id}: checkpoints deleted (" in capsys.readouterr().out
    # 8 ranking pairs; the 8 rating pairs (7 vs 2) with include_rating_pairs say the same as the rankings (same
    # prompt, chosen and rejected), and the export lists a pair once: the snapshot counts 8 rows.
    assert model["data_snapshot"].split(":")[1] == "8"
    # Same labels, same snapshot: lineage is reproducible.
    again = _run_in_process(db, "rm", {"model": str(tiny_encoder_dir), "steps": 1, "checkpoint_every": 0,
                                       "test_size": 0.25}, tmp_path)
    assert models.get_model(db, f"rm-run{again.id}")["data_snapshot"] == model["data_snapshot"]


def test_sft_stage_with_lora_registers_an_adapter(db, tmp_path, tiny_model_dir):
    _seed_labels(db, n_prompts=4)
    run = _run_in_process(db, "sft", {"model": str(tiny_model_dir), "steps": 2, "lora": "true",
                                      "per_device_train_batch_size": 2, "max_length": 64}, tmp_path)
    _check_lineage(db, run, str(tiny_model_dir), "adapter", "sft", "loss")
    assert (Path(run.output_dir) / "model" / "adapter_config.json").exists()


def test_a_policy_trained_by_the_trainer_is_saved_in_its_base_s_dtype(db, tmp_path, tiny_model_dir):
    """The Trainer writes its fp32 master weights; a base stored in bf16 gets a bf16 model back (half the disk,
    and chat and evaluation load it in bf16), whose weights are the trained ones rounded to bf16."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from rlhf.loading import load_tokenizer

    base = tmp_path / "bf16-base"
    AutoModelForCausalLM.from_pretrained(tiny_model_dir).to(torch.bfloat16).save_pretrained(base)
    load_tokenizer(str(tiny_model_dir)).save_pretrained(base)
    _seed_labels(db, n_prompts=4)
    run = _run_in_process(db, "dpo", {"model": str(base), "steps": 2, "per_device_train_batch_size": 2,
                                      "max_length": 64, "include_rating_pairs": "false", "bf16": "false"}, tmp_path)
    folder = Path(models.get_model(db, f"dpo-run{run.id}")["path"])
    weights = load_file(str(folder / "model.safetensors"))
    assert {tensor.dtype for tensor in weights.values()} == {torch.bfloat16}
    assert json.loads((folder / "config.json").read_text())["dtype"] == "bfloat16"
    trained = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    before = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    assert any(not torch.equal(a, b) for a, b in zip(trained.parameters(), before.parameters()))  # it trained


def test_dpo_stage_registers_with_lineage(db, tmp_path, tiny_model_dir):
    _seed_labels(db, n_prompts=4)
    run = _run_in_process(db, "dpo", {"model": str(tiny_model_dir), "steps": 2, "per_device_train_batch_size": 2,
                                      "max_length": 64, "include_rating_pairs": "false"}, tmp_path)
    _check_lineage(db, run, str(tiny_model_dir), "policy", "preferences", "loss")


def test_ppo_with_function_reward_logs_samples_and_checkpoints(db, tmp_path, tiny_model_dir):
    _seed_labels(db, n_prompts=4)
    run = _run_in_process(db, "ppo", {"model": str(tiny_model_dir), "steps": 2, "reward": "function",
                                      "batch_size": 2, "answers_per_prompt": 1, "mini_batch_size": 2, "ppo_epochs": 1, "max_new_tokens": 4,
                                      "checkpoint_every": 1, "samples_per_step": 1, "keep_checkpoints": True},
                                      tmp_path)
    _check_lineage(db, run, str(tiny_model_dir), "policy", "prompts", "ppo/loss/total")
    assert set(run_metrics.metric_names(db, run.id)) >= {"objective/kl", "env/reward_mean", "ppo/mean_scores"}
    samples = run_metrics.samples(db, run.id)
    assert [s["step"] for s in samples] == [2, 1]  # one per step, newest first
    root = Path(run.output_dir) / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["checkpoint-1", "checkpoint-2"]
    assert json.loads((root / "checkpoint-2" / "job_state.json").read_text())["position"] == 4


def test_ppo_with_lora_and_rloo_saves_a_full_model_and_samples_groups(db, tmp_path, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    _seed_labels(db, n_prompts=4)
    run = _run_in_process(db, "ppo", {"model": str(tiny_model_dir), "steps": 1, "reward": "function", "lora": True,
                                      "batch_size": 4, "mini_batch_size": 2, "ppo_epochs": 1, "max_new_tokens": 4,
                                      "advantage_estimator": "rloo", "answers_per_prompt": 2, "checkpoint_every": 0,
                                      "samples_per_step": 4}, tmp_path)
    _check_lineage(db, run, str(tiny_model_dir), "policy", "prompts", "ppo/loss/total")
    final = Path(run.output_dir) / "model"
    assert not (final / "adapter_config.json").exists()  # the adapter is merged into a full model
    merged = AutoModelForCausalLM.from_pretrained(final)
    assert not any("lora" in name for name, _ in merged.named_parameters())
    queries = [s["query"] for s in run_metrics.samples(db, run.id)]
    # answers_per_prompt=2: each prompt is answered twice in the batch (two prompts, two answers each).
    assert len(queries) == 4 and len(set(queries)) == 2 and all(queries.count(q) == 2 for q in queries)


def test_ppo_step_receives_exactly_the_human_ratings(db, db_path, tmp_path, tiny_model_dir, monkeypatch):
    from rlhf import ppo

    _seed_labels(db, n_prompts=4)
    received = []
    original_step = ppo.PPOTrainer.step

    def recording_step(self, queries, responses, scores, response_masks=None, **kwargs):
        received.extend(float(s) for s in scores)
        return original_step(self, queries, responses, scores, response_masks, **kwargs)

    monkeypatch.setattr(ppo.PPOTrainer, "step", recording_step)
    stop = threading.Event()
    given = {}  # item id -> score the annotator gave

    def annotator():
        other = open_db(db_path)
        while not stop.is_set():
            item = labeling.next_item(other, "default", "ann", "rating")
            if item is None or item.run_id is None:
                time.sleep(0.05)
                continue
            score = 1 + len(item.responses[0]["text"]) % 7  # any rule: the test only needs to know it
            labeling.submit_rating(other, "default", "ann", item.item_id, score)
            given[item.item_id] = score

    thread = threading.Thread(target=annotator)
    thread.start()
    try:
        run = _run_in_process(db, "ppo", {"model": str(tiny_model_dir), "steps": 2, "reward": "human",
                                          "human_timeout": 60, "batch_size": 2, "answers_per_prompt": 1, "mini_batch_size": 2,
                                          "human_label": "rating",
                                          "ppo_epochs": 1, "max_new_tokens": 4, "checkpoint_every": 0}, tmp_path)
    finally:
        stop.set()
        thread.join()
    expected = [rating_to_reward(given[i], 1, 7) for i in sorted(given)]
    assert len(received) == 4 and received == pytest.approx(expected)
    assert run_metrics.metrics_frame(db, run.id, ["reward/human_count"])["value"].tolist() == [2.0, 2.0]
    assert labeling.waiting_for_run(db, run.id) == 0


def test_ppo_human_timeout_skips_unrated_rollouts(db, tmp_path, tiny_model_dir):
    """Nobody rates: every batch is skipped at the timeout and the run ends early without a step."""
    _seed_labels(db, n_prompts=2)
    run = jobs.create_run(db, "ppo", {"model": str(tiny_model_dir), "steps": 1, "reward": "human", "human_label": "rating",
                                      "human_timeout": 0.5, "batch_size": 2, "answers_per_prompt": 1, "mini_batch_size": 2,
                                      "max_new_tokens": 3}, runs_dir=tmp_path / "runs", start=False)
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
    # Ask to stop once two batches went unrated, so the loop ends.
    def stop_later():
        other = open_db(runs.db_file(db))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if other.execute("SELECT COUNT(*) FROM items WHERE run_id = ?", [run.id]).fetchone()[0] >= 4:
                jobs.request_stop(other, run.id)
                return
            time.sleep(0.1)

    thread = threading.Thread(target=stop_later)
    thread.start()
    status = run_worker(runs.db_file(db), run.id)
    thread.join()
    assert status == "succeeded"
    assert runs.get_run(db, run.id).step == 0  # no PPO step: nothing was rated
    assert db.execute("SELECT COUNT(*) FROM items WHERE run_id = ? AND priority > 0", [run.id]).fetchone()[0] == 0
