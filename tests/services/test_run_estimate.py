"""The wall-time estimate before a run starts and the time budget (issue 26): the arithmetic from a made-up
micro-step for PPO, GRPO and RLOO, the parsing of time_budget, and what the preview and the CLI do with them (no
model is loaded: the micro-step is injected)."""
from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest
from export_fixtures import build_heldout_db
from helpers import recording

from labeler import forms
from labeler.services.settings import durations
from labeler.services.training import run_estimate
from labeler.errors import InputError
from labeler.services.training.run_estimate import MicroStep
from labeler.services.training.run_preview import apply_time_budget, preview_run
from labeler.services.settings.job_settings import JobConfig
from labeler.services.training.train_configs import resolve_run_config

# 16 answers: generated in 2 s, no-grad passes 1 s, one training mini-batch 3 s; 10 s to load.
MICRO = MicroStep(rows=16, generate_seconds=2.0, forward_seconds=1.0, train_seconds=3.0, setup_seconds=10.0)


@pytest.mark.parametrize("text, seconds", [("20m", 1200), ("1h30m", 5400), ("90s", 90), ("1.5h", 5400),
                                           ("20", 1200), ("2min", 120), ("1h 5m 3s", 3903)])
def test_durations(text, seconds):
    assert durations.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["abc", "20x", "m", "0", "-5m", "5m1h"])
def test_bad_durations_name_the_setting(text):
    with pytest.raises(ValueError, match=r"time_budget="):
        durations.parse_duration(text)


def test_time_budget_is_a_job_setting_checked_like_the_others():
    assert forms.build_config(JobConfig, {"time_budget": "20m"}).time_budget == "20m"
    assert durations.budget_seconds(forms.build_config(JobConfig, {"time_budget": ""}).time_budget) is None
    assert resolve_run_config("ppo", {"time_budget": "1h"})["job"]["time_budget"] == "1h"
    with pytest.raises(InputError) as error:
        resolve_run_config("ppo", {"time_budget": "20 minutes please"})
    assert error.value.field == "time_budget"


def test_step_time_from_a_micro_step():
    # batch 64 = 4 chunks of 16; each: generate 2 + no-grad 1 + 2 epochs x train 3 = 9 s -> 36 s a step.
    assert run_estimate.ppo_step_seconds(MICRO, batch_size=64, ppo_epochs=2) == 36.0
    # batch 32, 4 epochs: 2 chunks x (2 + 1 + 12) = 30 s.
    assert run_estimate.ppo_step_seconds(MICRO, batch_size=32, ppo_epochs=4) == 30.0
    # evaluation: 40 held-out answers by 2 models at 16 answers per 2 s = 2 x 40 / 16 x 2 = 10 s.
    assert run_estimate.eval_seconds(MICRO, answers=40) == 10.0
    step = run_estimate.ppo_step_seconds(MICRO, batch_size=64, ppo_epochs=2)
    estimate = run_estimate.estimate_from_step(MICRO, steps=40, step_seconds=step, eval_answers=40)
    assert estimate.total_seconds == 10 + 40 * 36 + 10  # 1460 s


def test_generation_is_counted_at_the_pace_of_the_run_s_batch():
    # 64 answers generated in one batch in 2 s (the run's batch), not 4 mini-batches of 16 at 2 s each:
    # 64 x 2 / 64 = 2 s of generation + 4 chunks x (no-grad 1 + 2 epochs x 3) = 30 s (36 s counted by mini-batch).
    batched = replace(MICRO, generate_rows=64)
    assert batched.seconds_per_answer == 2.0 / 64
    assert run_estimate.ppo_step_seconds(batched, batch_size=64, ppo_epochs=2) == 30.0
    # GRPO/RLOO: the same 64 answers, 2 passes of 0.5 s, 2 iterations: 2 + 4 x (1 + 6) = 30 s.
    assert run_estimate.online_step_seconds(batched, answers=64, num_iterations=2, no_grad_passes=2) == 30.0
    # evaluation: 40 answers by 2 models at 2 s per 64 answers = 2.5 s
    assert run_estimate.eval_seconds(batched, answers=40) == 2.5


def test_the_heldout_curve_is_spread_over_the_steps():
    # 40 held-out prompts, one answer each every 10 steps, at 2 s per 16 answers: 40 x 0.125 / 10 = 0.5 s a step.
    assert run_estimate.heldout_curve_seconds_per_step(MICRO, heldout_prompts=40, every=10) == 0.5
    assert run_estimate.heldout_curve_seconds_per_step(MICRO, heldout_prompts=40, every=0) == 0.0  # off
    assert run_estimate.heldout_curve_seconds_per_step(MICRO, heldout_prompts=0, every=10) == 0.0  # nothing held out


def test_grpo_and_rloo_step_time_from_the_same_micro_step():
    # A GRPO/RLOO step is one generation batch; PPO's no-grad time (1 s) is two passes, 0.5 s each.
    # 64 answers = 4 chunks of 16; each: generate 2 + 2 passes x 0.5 + 2 iterations x train 3 = 9 s -> 36 s.
    assert run_estimate.online_step_seconds(MICRO, answers=64, num_iterations=2, no_grad_passes=2) == 36.0
    # 32 answers, 1 iteration, no pass (no reference, policy unchanged within the batch): 2 x (2 + 0 + 3) = 10 s.
    assert run_estimate.online_step_seconds(MICRO, answers=32, num_iterations=1, no_grad_passes=0) == 10.0
    # 64 answers, 2 iterations, the reference's pass only: 4 x (2 + 0.5 + 6) = 34 s.
    assert run_estimate.online_step_seconds(MICRO, answers=64, num_iterations=2, no_grad_passes=1) == 34.0
    # the passes: the sampling policy's log-probs when it moves within the batch, the reference's when beta > 0
    assert [run_estimate.online_no_grad_passes(old, beta) for old, beta in
            [(True, 0.04), (True, 0.0), (False, 0.03), (False, 0.0)]] == [2, 1, 1, 0]
    estimate = run_estimate.estimate_from_step(MICRO, steps=10, step_seconds=34.0, eval_answers=40)
    assert estimate.total_seconds == 10 + 10 * 34 + 10  # 360 s: setup, steps, evaluation (as for PPO above)


def test_steps_that_fit_a_budget():
    # 20 min = 1200 s, minus 20 s of setup and evaluation: 1180 / 36 = 32.8 -> 32 steps (1152 + 20 = 1172 s).
    assert run_estimate.steps_for_budget(1200, 36, 20) == 32
    assert run_estimate.steps_for_budget(56, 36, 20) == 1  # exactly one
    with pytest.raises(ValueError, match="too short: one step takes about 36 s"):
        run_estimate.steps_for_budget(55, 36, 20)


def test_format_duration():
    assert [durations.format_duration(s) for s in (42, 75, 1234, 3700)] == ["42 s", "1 min 15 s", "20 min 34 s",
                                                                          "1 h 1 min"]


@pytest.fixture
def labelled(db):
    build_heldout_db(db)
    # 'default': prompts 1 and 9 for training, 2 held out.
    db.execute("INSERT INTO prompts (id, project_id, text, text_hash) VALUES (9, 1, 'Review Jaws', 'hash9')")
    return db


_measured = partial(recording, MICRO)  # _measured(calls): a micro-step measure that records what it was asked


def test_preview_says_how_long_and_fits_the_budget(labelled):
    calls = []
    settings = {"batch_size": 64, "mini_batch_size": 16, "ppo_epochs": 2, "answers_per_prompt": 4, "bf16": False,
                "eval_samples": 0, "heldout_every": 0}
    plain = preview_run(labelled, "default", "ppo", settings, measure=_measured(calls))
    # 40 steps x 36 s + 10 s to load, no evaluation (eval_samples 0) = 1450 s.
    assert plain.estimate.total_seconds == 1450 and plain.steps == 40
    assert "About 24 min 10 s on this machine" in plain.markdown()
    # The micro-step is the run's own: its mini-batch, precision and tokens.
    # The project's answer length (a chat project's 128), as the run would store it.
    assert (calls[0].rows, calls[0].bf16, calls[0].max_new_tokens, calls[0].lora) == (16, False, 128, False)
    assert calls[0].generation_rows == 64  # generation is timed at the run's batch, as the runner generates it

    fitted = preview_run(labelled, "default", "ppo", {**settings, "time_budget": "20m"}, measure=_measured(calls))
    # (1200 - 10) / 36 = 33.05 -> 33 steps: 10 + 33 x 36 = 1198 s.
    assert (fitted.steps, fitted.estimate.total_seconds) == (33, 1198)
    assert not [w for w in fitted.warnings if "time_budget" in w]
    assert "time_budget 20 min 0 s: 33 steps chosen, instead of the 40 asked for" in fitted.markdown()

    # Steps given explicitly are kept when they fit, lowered with a warning when they do not.
    kept = preview_run(labelled, "default", "ppo", {**settings, "time_budget": "20m", "steps": 10}, measure=_measured(calls))
    assert kept.steps == 10 and not [w for w in kept.warnings if "time_budget" in w]
    lowered = preview_run(labelled, "default", "ppo", {**settings, "time_budget": "20m", "steps": 50},
                          measure=_measured(calls))
    assert lowered.steps == 33 and any("more than time_budget 20 min 0 s: 33 steps fit" in w for w in lowered.warnings)


def test_evaluation_counts_in_the_estimate(labelled):
    # 1 held-out prompt x 4 answers, by 2 models, 16 answers per 2 s: 1 s of evaluation.
    preview = preview_run(labelled, "default", "ppo", {"batch_size": 64, "mini_batch_size": 16, "answers_per_prompt": 4,
                                                       "eval_samples": 4}, measure=_measured([]))
    assert preview.estimate.eval_seconds == 1.0


def test_the_heldout_curve_counts_in_the_estimate(labelled):
    # 1 held-out prompt, one answer every 2 steps at 16 answers per 2 s: 0.0625 s a step on top of 36 s.
    values = {"batch_size": 64, "mini_batch_size": 16, "ppo_epochs": 2, "answers_per_prompt": 4, "eval_samples": 0}
    curve = preview_run(labelled, "default", "ppo", {**values, "heldout_every": 2}, measure=_measured([]))
    off = preview_run(labelled, "default", "ppo", {**values, "heldout_every": 0}, measure=_measured([]))
    assert (curve.estimate.step_seconds, off.estimate.step_seconds) == (36.0625, 36.0)


def test_apply_time_budget_sets_the_steps_the_run_is_queued_with(labelled):
    values = {"batch_size": 64, "mini_batch_size": 16, "ppo_epochs": 2, "answers_per_prompt": 4, "eval_samples": 0,
              "time_budget": "20m"}
    queued, preview = apply_time_budget(labelled, "default", "ppo", values, measure=_measured([]))
    assert queued == {**values, "steps": 33} and preview.steps == 33
    unchanged, none = apply_time_budget(labelled, "default", "ppo", {"steps": 3}, measure=_measured([]))
    assert (unchanged, none) == ({"steps": 3}, None)
    with pytest.raises(InputError, match="too short") as error:
        apply_time_budget(labelled, "default", "ppo", {**values, "time_budget": "30s"}, measure=_measured([]))
    assert error.value.field == "time_budget"
    with pytest.raises(InputError, match="for ppo runs") as error:
        apply_time_budget(labelled, "default", "rm", {"time_budget": "20m"}, measure=_measured([]))


def test_a_failed_measurement_is_a_warning_in_the_preview_and_an_error_for_a_budget(labelled):
    def broken(settings):
        raise RuntimeError("measuring a micro-step failed: out of memory")
    preview = preview_run(labelled, "default", "ppo", {"batch_size": 64, "answers_per_prompt": 4}, measure=broken)
    assert preview.estimate is None and "no time estimate: measuring a micro-step failed" in preview.warnings[-1]
    with pytest.raises(InputError, match="no time estimate"):
        apply_time_budget(labelled, "default", "ppo", {"batch_size": 64, "answers_per_prompt": 4, "time_budget": "1h"},
                          measure=broken)


def test_the_epoch_warning_follows_the_fitted_steps(labelled):
    # 2 training prompts, 16 prompts a step: 40 steps are 320 passes; a budget of 2 steps is 16 passes.
    values = {"batch_size": 64, "mini_batch_size": 16, "ppo_epochs": 2, "answers_per_prompt": 4, "eval_samples": 0}
    fitted = preview_run(labelled, "default", "ppo", {**values, "time_budget": "90s"}, measure=_measured([]))
    # (90 - 10) / 36 = 2.2 -> 2 steps
    assert fitted.steps == 2 and [w for w in fitted.warnings if "passes" in w] == [
        "16.0 passes over 2 prompts: the model will mostly memorise them. Label more, or lower steps to about 1."]


def test_grpo_preview_says_how_long_from_its_own_micro_step(labelled):
    calls = []
    settings = {"num_iterations": 1, "beta": 0, "answers_per_prompt": 2, "max_new_tokens": 8, "eval_samples": 0,
                "steps": 10}
    preview = preview_run(labelled, "default", "grpo", settings, measure=_measured(calls))
    # The micro-step is one of the Trainer's micro-batches (per_device_train_batch_size 16) of the run's answers
    # (max_new_tokens 8 -> max_completion_length), groups of answers_per_prompt 2 -> num_generations.
    assert (calls[0].rows, calls[0].max_new_tokens, calls[0].answers_per_prompt, calls[0].advantage_estimator) == \
        (16, 8, 2, "rloo")
    # generation batch 16 x 4 = 64 answers: 4 chunks x (generate 2 + 1 pass (the policy's old log-probs: it moves
    # within the batch; no reference at beta 0) x 0.5 + 1 iteration x train 3) = 22 s; 10 + 10 x 22 = 230 s.
    assert (preview.estimate.step_seconds, preview.estimate.total_seconds) == (22.0, 230.0)
    assert "**About 3 min 50 s on this machine**: 10 steps of ~22 s" in preview.markdown()
    # 64 answers of 2 per prompt = 32 prompts a step, over 2 training prompts: 10 x 32 / 2 = 160 passes.
    assert (preview.unit, preview.rows_per_step, preview.epochs) == ("prompts", 32, 160.0)


def test_grpo_and_rloo_count_the_no_grad_passes_their_trainers_make(labelled):
    # Accumulating all 4 x 2 micro-steps of a generation batch: the policy does not move within it, so GRPO
    # skips the old log-probs (1 pass: the reference at beta 0.05): 4 x (2 + 0.5 + 2 x 3) = 34 s; RLOO's KL
    # penalty needs them whenever beta > 0 (0.03): 2 passes, 4 x (2 + 1 + 6) = 36 s.
    values = {"gradient_accumulation_steps": 8, "eval_samples": 0}
    grpo = preview_run(labelled, "default", "grpo", values, measure=_measured([]))
    rloo = preview_run(labelled, "default", "rloo", values, measure=_measured([]))
    assert (grpo.estimate.step_seconds, rloo.estimate.step_seconds) == (34.0, 36.0)
    assert (grpo.estimate.total_seconds, rloo.estimate.total_seconds) == (10 + 40 * 34, 10 + 40 * 36)


def test_time_budget_stays_a_ppo_setting(labelled):
    preview = preview_run(labelled, "default", "grpo", {"time_budget": "20m", "eval_samples": 0},
                          measure=_measured([]))
    assert preview.steps == 40 and preview.budget_seconds is None  # estimated, not fitted
    assert "time_budget is for ppo runs (the stage here is grpo); set steps instead" in preview.warnings
    with pytest.raises(InputError, match="for ppo runs") as error:
        apply_time_budget(labelled, "default", "grpo", {"time_budget": "20m"}, measure=_measured([]))
    assert error.value.field == "time_budget"


def test_a_micro_step_is_measured_on_the_run_s_own_model(tiny_model_dir):
    """The measuring process itself, on the tiny model: every part took time, for the mini-batch asked."""
    settings = run_estimate.MicroStepSettings(
        model_path=str(tiny_model_dir), bf16=False, lora=False, lora_r=8, lora_alpha=16, rows=4, max_new_tokens=3,
        answers_per_prompt=2, advantage_estimator="rloo", prompts=("The film was", "I thought"), chat_template=False,
        threads=1, generation_rows=8)
    micro = run_estimate.measure_micro_step(settings)
    assert (micro.rows, micro.generate_rows) == (4, 8)  # a mini-batch trained, the run's batch generated
    assert min(micro.generate_seconds, micro.forward_seconds, micro.train_seconds, micro.setup_seconds) > 0
    assert run_estimate.measure_micro_step(settings) is micro  # cached: the preview does not measure twice


def test_cli_dry_run_queues_nothing_and_a_budget_sets_the_steps(labelled, db_path, tiny_model_dir, capsys,
                                                                 monkeypatch):
    from labeler.cli import main
    from labeler.services.training import jobs
    from labeler.services.execution import runs

    monkeypatch.setattr(run_estimate, "measure_micro_step", lambda settings: MICRO)
    common = ["train", "ppo", "--db", db_path, "--set", f"model={tiny_model_dir}", "--set", "reward=function",
              "--set", "eval_samples=0"]
    assert main([*common, "--dry-run"]) == 0
    out = capsys.readouterr().out
    # the default recipe: 64 answers in 4 chunks of 16, one pass -> 4 x (2 + 1 + 3) = 24 s a step, and the held-out
    # curve's share (1 prompt every 10 steps at 2 s per 16 answers: 0.0125 s); 40 steps + 10 s = 16 min 10 s
    assert "About 16 min 10 s on this machine: 40 steps of ~24 s" in out and "**" not in out
    # and the memory the run will take on this device, from the tiny model's config (rlhf/memory_estimate.py)
    assert "Memory: about " in out and "GiB (this machine's RAM)" in out and "vocabulary 49,152" in out
    assert runs.list_runs(labelled) == []
    monkeypatch.setattr(jobs, "start_queued", lambda db, *a, **k: [])  # queued, not started: no training here
    assert main([*common, "--set", "time_budget=10m", "--runs-dir", db_path + "-runs"]) == 0
    out = capsys.readouterr().out
    # (600 - 10) / 24.0125 = 24.6 -> 24 steps
    assert "time_budget 10 min 0 s: 24 steps chosen, instead of the 40 asked for" in out
    (run,) = runs.list_runs(labelled)
    assert run.config["job"]["steps"] == 24 and run.config["job"]["time_budget"] == "10m"


def test_cli_dry_run_of_grpo_says_how_long_and_kto_measures_nothing(labelled, db_path, tiny_model_dir, capsys,
                                                                   monkeypatch):
    from labeler.cli import main
    from labeler.services.execution import runs

    def measure(settings):
        assert settings.rows == 16  # a GRPO micro-batch, never a KTO one
        return MICRO

    monkeypatch.setattr(run_estimate, "measure_micro_step", measure)
    common = ["--db", db_path, "--set", f"model={tiny_model_dir}", "--set", "eval_samples=0", "--dry-run"]
    assert main(["train", "grpo", *common, "--set", "reward=function", "--set", "num_iterations=1"]) == 0
    out = capsys.readouterr().out
    # the app's GRPO defaults, 1 iteration: 4 chunks x (2 + 2 passes x 0.5 + 3) = 24 s; 10 + 40 x 24 = 970 s
    assert "About 16 min 10 s on this machine: 40 steps of ~24 s" in out
    assert main(["train", "kto", *common]) == 0
    out = capsys.readouterr().out
    assert "This kto run will use" in out and "on this machine" not in out
    assert runs.list_runs(labelled) == []


# ---- the micro-step runs the run's own settings; a busy device loads no model ------------------------------
def test_the_preview_times_the_run_s_own_precision_and_memory_settings(labelled):
    calls = []
    settings = {"batch_size": 8, "mini_batch_size": 4, "answers_per_prompt": 4, "bf16": False, "eval_samples": 0,
                "heldout_every": 0, "gradient_checkpointing": True, "attn_implementation": "sdpa",
                "dtype": "bfloat16"}
    preview_run(labelled, "default", "ppo", settings, measure=_measured(calls))
    asked = calls[0]
    assert (asked.dtype, asked.gradient_checkpointing, asked.attn_implementation, asked.load_in_4bit) == (
        "bfloat16", True, "sdpa", False)
    assert asked.busy_run is None  # no run is training: the micro-step is measured
    import types

    qlora = run_estimate.run_settings(labelled, types.SimpleNamespace(load_in_4bit=True, dtype=None))
    assert qlora == {"dtype": None, "load_in_4bit": True, "gradient_checkpointing": False,
                     "attn_implementation": "auto", "busy_run": None}


def test_the_micro_step_loads_and_trains_as_the_run_would(tiny_model_dir, monkeypatch):
    """In the measuring process: LoRA's base in the compute dtype (bf16), the run's checkpointing and attention
    kernel in every PPOConfig it builds. Before, the model was loaded in fp32 and timed with neither."""
    import torch

    from rlhf import ppo

    seen = []
    original = ppo.PPOTrainer.__init__

    def spy(self, config, model, *args, **kwargs):
        frozen = {p.dtype for n, p in model.named_parameters() if not p.requires_grad and "lora_" not in n}
        seen.append((config.gradient_checkpointing, config.attn_implementation, frozen))
        original(self, config, model, *args, **kwargs)

    monkeypatch.setattr(ppo.PPOTrainer, "__init__", spy)
    settings = run_estimate.MicroStepSettings(
        model_path=str(tiny_model_dir), bf16=True, lora=True, lora_r=2, lora_alpha=4, rows=2, max_new_tokens=2,
        answers_per_prompt=1, advantage_estimator="gae", prompts=("The film was",), chat_template=False, threads=1,
        gradient_checkpointing=True, attn_implementation="eager")
    micro = run_estimate._micro_step_in_this_process(settings)
    assert micro.train_seconds > 0 and len(seen) == 2  # the warm-up and the measured step
    assert all(entry == (True, "eager", {torch.bfloat16}) for entry in seen), seen


def test_a_preview_loads_no_model_while_a_run_trains_on_the_device(labelled, tiny_model_dir, monkeypatch, tmp_path):
    from labeler.services.execution import runs

    run_id = runs.insert_run(labelled, "ppo", {}, "default", None, "busy", tmp_path)
    labelled.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run_id])

    def no_process(*args, **kwargs):
        raise AssertionError("a model was about to be loaded on a busy device")

    monkeypatch.setattr(run_estimate.subprocess, "run", no_process)
    monkeypatch.setattr(run_estimate, "_micro_step_in_this_process", no_process)
    preview = preview_run(labelled, "default", "ppo", {"model": str(tiny_model_dir), "batch_size": 8,
                                                       "mini_batch_size": 4, "answers_per_prompt": 4, "bf16": False})
    assert preview.estimate is not None and preview.estimate.total_seconds > 0
    assert f"not measured: run {run_id} is training on this machine, so no model was loaded" in preview.markdown()


def test_model_free_micro_step_by_hand():
    from rlhf.memory_estimate import ModelShape

    # 1000 weights, a tied 10 x 8 embedding/head: 920 in the blocks; 2 rows of 6 prompt + 4 answer tokens, 1 thread
    shape = ModelShape(parameters=1000, vocab_size=10, hidden_size=8, intermediate_size=16, layers=2, heads=2, kv_heads=1)
    settings = run_estimate.MicroStepSettings(
        model_path="unused", bf16=False, lora=False, lora_r=8, lora_alpha=16, rows=2, max_new_tokens=4,
        answers_per_prompt=1, advantage_estimator="gae", prompts=("a",), chat_template=False, threads=1, busy_run=3)
    micro = run_estimate.model_free_micro_step(settings, shape, device_type="cpu", prompt_tokens=6)
    rate = run_estimate.CPU_FLOPS_PER_THREAD
    # one pass: 2 rows x (2 x 920 x 10 tokens + 2 x 80 x 4 answer tokens) = 2 x (18400 + 640) = 38080 FLOPs
    assert micro.forward_seconds == pytest.approx(2 * 38080 / rate)  # policy and reference
    assert micro.train_seconds == pytest.approx(3 * 38080 / rate)  # forward + backward (2x)
    # generation: 2 answers x 4 tokens x 2 x 1000 FLOPs at a quarter of the rate
    assert micro.generate_seconds == pytest.approx(16000 / (rate * 0.25)) and micro.generate_rows == 2
    assert micro.setup_seconds == pytest.approx(4000 / run_estimate.LOAD_BYTES_PER_SECOND)  # fp32 weights
    assert "run 3 is training on this machine" in micro.note and "10-token rows" in micro.note
    lora = run_estimate.model_free_micro_step(replace(settings, lora=True, gradient_checkpointing=True), shape,
                                              device_type="cuda", prompt_tokens=6)
    # LoRA: no base weight gradients (2x a forward); checkpointing recomputes the forward (x 4/3); a GPU's rate
    assert lora.train_seconds == pytest.approx(38080 * 2 * 4 / 3 / run_estimate.GPU_FLOPS)
    assert lora.setup_seconds == pytest.approx(2000 / run_estimate.LOAD_BYTES_PER_SECOND)
    assert "on this GPU" in lora.note


def test_memory_shape_counts_the_reference_in_its_dtype_and_qlora_s_parts():
    import types

    from labeler.services.training.run_estimate import train_shape

    trainer = types.SimpleNamespace(mini_batch_size=4, rollout_forward_batch_size=4, batch_size=8, dtype=None,
                                    load_in_4bit=False, gradient_checkpointing=False, attn_implementation="sdpa")
    job = types.SimpleNamespace(bf16=True, lora=False, lora_r=16, max_new_tokens=32)
    full = train_shape("ppo", job, trainer, "cpu")
    assert (full.reference, full.reference_bytes, full.load_bytes, full.compute_bytes) == (True, 2, 4, 2)
    fp32 = train_shape("ppo", replace_ns(job, bf16=False), trainer, "cpu")
    assert (fp32.reference_bytes, fp32.compute_bytes) == (None, 4)  # the copy is the policy's fp32
    qlora = train_shape("ppo", replace_ns(job, lora=True), replace_ns(trainer, load_in_4bit=True), "cuda")
    assert (qlora.quantized_4bit, qlora.lora_r, qlora.reference) == (True, 16, False)


def replace_ns(namespace, **changes):
    import types

    return types.SimpleNamespace(**{**vars(namespace), **changes})
