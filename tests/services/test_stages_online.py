"""The TRL 1.x stages (grpo, rloo, kto) in the app: run in-process through the worker's entry point on a tiny
model, with the job's reward source (a function here), checkpoints through the Trainer, the model registered
with its lineage; KTO on the rated answers (export's unpaired rows)."""
from __future__ import annotations

from pathlib import Path

import pytest
from labeling_helpers import add_ranked_pairs

from labeler.services.data import accounts
from labeler.services.training import jobs, train_configs
from labeler.services.serving import models
from labeler.services.execution import run_metrics, runs
from labeler.errors import InputError
from labeler.worker import run_worker


def _seed(db, n_prompts=4):
    accounts.create_user(db, "ann", "a-long-password")
    accounts.create_user(db, "boss", "a-long-password", role="admin")
    add_ranked_pairs(db, n_prompts, rate=True)  # good answers rated 7, bad ones 2


def _run(db, stage, settings, tmp_path):
    run = jobs.create_run(db, stage, settings, runs_dir=tmp_path / "runs", start=False, username="boss")
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
    status = run_worker(runs.db_file(db), run.id)
    done = runs.get_run(db, run.id)
    assert status == "succeeded", (done.error, run_metrics.log_tail(done))
    return done


ONLINE = {"reward": "function", "answers_per_prompt": 2, "max_new_tokens": 4, "per_device_train_batch_size": 4,
          "steps_per_generation": 1, "eval_samples": 0}


def test_grpo_trains_on_the_job_reward_checkpoints_and_registers(db, tmp_path, tiny_model_dir):
    _seed(db)
    run = _run(db, "grpo", {"model": str(tiny_model_dir), "steps": 2, "checkpoint_every": 2, "keep_checkpoints": True,
                            **ONLINE}, tmp_path)
    # steps counts generation batches: 2 batches x 1 micro-batch x num_iterations 2 = 4 optimizer steps
    assert (run.step, run.total_steps) == (4, 4)
    model = models.get_model(db, f"grpo-run{run.id}")
    assert (model["kind"], model["base_model"]) == ("policy", str(tiny_model_dir))
    assert model["data_snapshot"].startswith("prompts:")
    names = set(run_metrics.metric_names(db, run.id))
    assert {"loss", "reward", "kl", "rewards/function/mean", "completions/mean_length", "reward/function_mean"} <= names
    assert (Path(run.output_dir) / "checkpoints" / "checkpoint-2").exists()
    assert (Path(run.output_dir) / "model" / "model.safetensors").exists()


def test_rloo_with_lora_saves_a_full_model(db, tmp_path, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    _seed(db)
    run = _run(db, "rloo", {"model": str(tiny_model_dir), "steps": 1, "lora": "true", "checkpoint_every": 0,
                            "num_iterations": 1, **ONLINE}, tmp_path)
    folder = Path(run.output_dir) / "model"
    assert not (folder / "adapter_config.json").exists()
    AutoModelForCausalLM.from_pretrained(folder)  # a plain model, no peft needed
    assert "kl" in set(run_metrics.metric_names(db, run.id))


def test_kto_trains_on_rated_answers(db, tmp_path, tiny_model_dir):
    _seed(db, n_prompts=6)
    run = _run(db, "kto", {"model": str(tiny_model_dir), "steps": 2, "per_device_train_batch_size": 4,
                           "max_length": 64, "checkpoint_every": 0, "eval_samples": 0, "test_size": 0.0}, tmp_path)
    model = models.get_model(db, f"kto-run{run.id}")
    assert model["kind"] == "policy" and model["data_snapshot"].startswith("unpaired:")
    assert {"loss", "kl", "rewards/chosen", "rewards/rejected"} <= set(run_metrics.metric_names(db, run.id))


def test_kto_weights_make_the_rarer_kind_count_as_much_as_the_other():
    from labeler.services.training.runners.online import kto_balanced_weights

    # 64 desirable, 368 undesirable (the shipped task at threshold 6): 368 / 64 = 5.75 on each desirable answer.
    assert kto_balanced_weights([True] * 64 + [False] * 368) == {"desirable_weight": 5.75}
    assert kto_balanced_weights([True] * 3 + [False]) == {"undesirable_weight": 3.0}
    assert kto_balanced_weights([True, False]) == {}
    assert kto_balanced_weights([True, True]) == {}  # one kind only: refused before (kto_label_problem)


def test_settings_are_checked_before_a_run_is_queued():
    config = train_configs.resolve_run_config("grpo", {"reward": "function", "loss_type": "bnpo"})
    # the job's group size and answer length are stored as the trainer's (the runner adds nothing)
    assert config["trainer"] == {"loss_type": "bnpo", "num_generations": 4, "max_completion_length": 16}
    with pytest.raises(InputError, match="use_vllm=True: not supported here"):
        train_configs.resolve_run_config("grpo", {"use_vllm": "true"})
    assert train_configs.form_fields("kto") == ["learning_rate", "per_device_train_batch_size", "beta",
                                                "desirable_weight", "undesirable_weight"]


def test_grpo_and_rloo_share_the_app_s_cpu_defaults_and_take_the_job_s_settings():
    import dataclasses

    from labeler.services.training.runners.online import StudioGRPOConfig, StudioRLOOConfig
    from rlhf.grpo import GRPOConfig

    shared = ("learning_rate", "per_device_train_batch_size", "steps_per_generation", "num_generations",
              "max_completion_length", "num_iterations")
    grpo, rloo = (cls(output_dir="unused", report_to="none") for cls in (StudioGRPOConfig, StudioRLOOConfig))
    assert [getattr(grpo, n) for n in shared] == [getattr(rloo, n) for n in shared] == [3e-5, 16, 4, 4, 16, 2]
    assert (grpo.beta, rloo.beta, grpo.generation_batch_size) == (0.05, 0.03, 64)  # 16 prompts x 4 answers
    # the library's fields, in its order: the app changes defaults only
    assert [f.name for f in dataclasses.fields(StudioGRPOConfig)] == [f.name for f in dataclasses.fields(GRPOConfig)]
    # the job's answers per prompt and answer length, stored as the trainer's when the run is resolved (explicit
    # trainer settings win); the runner reads the stored values only
    config = train_configs.resolve_run_config("rloo", {"answers_per_prompt": 2, "max_new_tokens": 8})
    assert config["trainer"] == {"num_generations": 2, "max_completion_length": 8}
    config = train_configs.resolve_run_config("grpo", {"answers_per_prompt": 2, "max_new_tokens": 8,
                                                       "max_completion_length": 4, "beta": 0.1})
    assert config["trainer"] == {"num_generations": 2, "max_completion_length": 4, "beta": 0.1}
