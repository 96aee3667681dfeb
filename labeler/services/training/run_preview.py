"""What a training run will use, before it is launched: rows or pairs after the data filters,
the train/eval split, the epochs that `steps` implies, and the base model.

A 10-step run on a tiny set trained 10 epochs without a word; the preview says so (and warns) before the run
is queued. It reads the data exactly as the stage runners do: the same settings resolution
(run_settings.resolve_run), the same row function of the stage (training_stages: Stage.rows, which its
runner calls), and the same split by prompt (export.split_by_prompt), without loading a model or building a dataset.

A PPO, GRPO or RLOO run's preview also says how long it will take on this machine, extrapolated from a micro-step
measured in a fresh process (labeler/services/training/run_estimate.py), and so does a DPO or reward-model run's, from a
batch of its own first training pairs timed the same way; for PPO with `time_budget` set it fits the number
of steps to the budget and says what it chose; apply_time_budget makes that choice the run's `steps`.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
from dataclasses import dataclass, field, replace
from typing import Any

import sqlite_utils

from labeler.services.execution import launch
from labeler.services.serving import models
from labeler.services.training import run_estimate, run_settings, train_configs
from labeler.services.settings import training_stages
from labeler.errors import InputError
from labeler.services.evals.evaluation import EvalSettings, base_answers_stored, heldout_prompts
from labeler.services.data.projects import get_project
from labeler.services.training.stages import split_for_training
from labeler.services.settings.training_stages.base import MIN_TRAINING_ROWS, row_key, steps_per_pass
from rlhf.loading import SHORT_NAMES

# More passes than this over the training rows and the preview warns: with a few hundred labels the model then
# mostly memorises them. Three, the reward model's default (training_stages/rm.py), generalised better than one
# on a few hundred pairs; Ouyang et al. 2022 trained theirs one epoch on tens of thousands.
EPOCH_WARNING = 3.0
# Under half a pass over a labelled dataset, a run leaves most of it unread: on the example tasks of
# bench/own_task.py DPO's 40 default steps read a third of 480 pairs (judge's win rate 62% and 54%); one pass
# gave 71% on the concise task (docs/YOUR_TASK.md).
PART_PASS_WARNING = 0.5
MIN_ROWS = MIN_TRAINING_ROWS  # what the stage runners require (runners.common.require_rows)
# The stages that train on the project's training prompts, sampling answers to them, rather than on labels; each
# step's wall time is extrapolated from a measured micro-step. time_budget applies to ppo only.
PROMPT_STAGES = training_stages.names(samples=True)
BUDGET_STAGES = training_stages.names(time_budget=True)
# The stages trained on labels whose wall time is estimated from a measured micro-batch (run_estimate.label_estimate):
# DPO and the reward model, the two paths from rankings the app recommends between (recommended_path.py). SFT and KTO
# have none yet.
LABEL_ESTIMATE_STAGES = ("dpo", "rm")
# Every stage whose preview measures a micro-step for a time estimate (the Train tab's second, slower preview).
ESTIMATED_STAGES = (*PROMPT_STAGES, *LABEL_ESTIMATE_STAGES)


@dataclass(frozen=True)
class RunPreview:
    stage: str
    base_model: str
    base_model_known: bool
    unit: str  # what a row is: "pairs", "answers" or "prompts"
    rows: int  # after the filters
    train_rows: int
    eval_rows: int
    rows_per_step: int  # the effective batch: rows (sft/rm/dpo/kto) or prompts (ppo/grpo/rloo) consumed per step
    steps: int
    # sft/rm/dpo/kto: steps / steps per epoch, as transformers' Trainer counts them (a batch larger than the data
    # is the whole data: 10 steps over 7 rows with batch 8 are 10 epochs); ppo/grpo/rloo: steps * prompts per step
    # / prompts.
    epochs: float
    warnings: list[str] = field(default_factory=list)
    estimate: run_estimate.RunEstimate | None = None  # ppo/grpo/rloo/dpo/rm, when measured: the wall time here
    budget_seconds: float | None = None  # the job's time_budget
    steps_asked: int | None = None  # the steps the settings gave, when the budget changed them
    budget_error: str | None = None  # why no number of steps fits time_budget (or no estimate could be made)
    memory: str | None = None  # the memory estimate's line (run_estimate.memory_text)
    blocker: str | None = None  # why the run would stop at once for want of data (refuse_without_data refuses it)
    # trainer settings the app gives this run because none was set (PPO's KL controller, its learning rate under
    # people's rankings): the form shows the trainer's own defaults, so the preview says where the run differs
    app_settings: dict = field(default_factory=dict)
    # the settings the app, the project or a recipe gave the run, each with where it came from (ResolvedRun)
    settings: str = ""
    command: str = ""  # the `rlhf-studio train ...` command that queues the same run

    def markdown(self) -> str:
        base = f"`{self.base_model}`" + ("" if self.base_model_known else " (not registered: a folder or hub id)")
        split = (f"{self.train_rows} train / {self.eval_rows} eval, split by prompt" if self.eval_rows
                 else f"all {self.train_rows} for training, no eval split")
        lines = [
            f"**This {self.stage} run will use** {self.rows} {self.unit} ({split}); base model {base}.",
            f"{self.steps} steps of up to {self.rows_per_step} {self.unit} = "
            + (f"**{self.epochs:.1f} epochs**." if math.isfinite(self.epochs) else "no data to pass over."),
        ]
        if self.estimate is not None:
            lines.append(estimate_line(self.estimate, self.budget_seconds, self.steps_asked))
        if self.memory:
            lines.append(self.memory)
        if self.settings:
            lines.append(f"Settings this run takes from the app, the project or the recipe (set them to change "
                         f"them): {self.settings}.")
        if self.command:
            lines.append(f"The same run from the command line: `{self.command}`")
        lines += [f"⚠️ {warning}" for warning in self.warnings]
        return "  \n".join(lines)


def estimate_line(estimate: run_estimate.RunEstimate, budget_seconds: float | None, steps_asked: int | None) -> str:
    fmt = run_estimate.format_duration
    text = (f"**About {fmt(estimate.total_seconds)} on this machine**: {estimate.steps} steps of ~"
            f"{fmt(estimate.step_seconds)} + {fmt(estimate.setup_seconds)} to load"
            + (f" + {fmt(estimate.reference_seconds)} for the reference's pass over the pairs"
               if estimate.reference_seconds else "")
            + (f" + {fmt(estimate.eval_seconds)} of evaluation" if estimate.eval_seconds else "")
            + f" (from {estimate.note or 'a micro-step measured now'}; a reward model's scoring and human ratings "
              "not included). "
            + idle_machine_note())
    if budget_seconds is not None:
        chosen = ("" if steps_asked is None else f", instead of the {steps_asked} asked for")
        text += f" time_budget {fmt(budget_seconds)}: {estimate.steps} steps chosen{chosen}."
    return text


def idle_machine_note(load: float | None = None, cores: int | None = None) -> str:
    """What the estimate assumes: a machine doing nothing else. The worker runs at a lower priority than everything
    else (launcher.lower_priority), so other work takes the cores first: an estimate of ~5 min became 34 min at
    load 7-18 on 2 cores. `load` (default: the 1-minute load average) and `cores` (default: those
    this process may use) say how busy the machine is now."""
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # not available on this platform
            load = None
    cores = cores or launch.usable_cores()
    text = "It assumes an otherwise idle machine: training runs at a lower priority than other work"
    if load is not None and load > cores / 2:
        # No factor is promised: a niced run gets what the other work leaves, from most of the CPU to a tenth.
        text += (f", and the load now is {load:.1f} on {cores} cores: the run gets what that work leaves, so it "
                 "may take several times longer")
    return text + "."


def _epoch_warning(steps: int, epochs: float, train_rows: int, unit: str) -> str:
    fewer = max(1, int(steps * EPOCH_WARNING / epochs))
    return (f"{epochs:.1f} passes over {train_rows} {unit}: the model will mostly memorise them. "
            f"Label more, or lower steps to about {fewer}.")


def _part_pass_warning(steps: int, rows_per_step: int, train_rows: int, unit: str, steps_per_epoch: int) -> str:
    return (f"{steps} steps of {rows_per_step} {unit} read {steps * rows_per_step} of the {train_rows} training "
            f"{unit}: most of the labels go unused. For one pass over them set steps to about {steps_per_epoch}.")


def _rows(db: sqlite_utils.Database, project: str, stage: str, job) -> tuple[list[tuple[str, dict]], str]:
    """(prompt key, row) pairs of the stage's training data (its runner's rows), and what a row is called."""
    facts = training_stages.get(stage)
    rows = facts.rows(db, project, job)
    if facts.samples:  # ppo, grpo and rloo sample the project's training prompts, not labels
        return [(text, {"prompt": text}) for text in rows], facts.unit
    # The key the stage runners split on: the prompt itself (prompts are unique per project).
    return [(row_key(r), r) for r in rows], facts.unit


def preview_run(db: sqlite_utils.Database, project: str, stage: str, values: dict[str, Any],
                estimate_time: bool = True, measure=None, source: str | None = None) -> RunPreview:
    """The preview of a run of `stage` with the settings `values` (as the Train form or `--set` give them).

    Bad settings raise the same InputError launching would. For ppo, grpo and rloo with `estimate_time`, a
    micro-step is timed for the wall-time estimate by `measure(MicroStepSettings) -> MicroStep` (default:
    run_estimate's, in a fresh process); without it there is no estimate and time_budget is not applied. For dpo and
    rm with training pairs, `measure(LabelStepSettings) -> LabelMicroStep` (default: run_estimate.measure_label_step).
    """
    resolved = run_settings.resolve_run(db, project, stage, values, source)  # source: the --config file, in errors
    config, job = resolved.config, resolved.job
    trainer = resolved.trainer_config()  # as the runner builds it
    records, unit = _rows(db, project, stage, job)

    if stage in PROMPT_STAGES:
        rows_per_step = training_stages.get(stage).prompts_per_step(job, trainer)
        train_rows, eval_rows = len(records), 0
        epochs = job.steps * rows_per_step / train_rows if train_rows else math.inf
    else:
        per_device, accumulation = trainer.per_device_train_batch_size, trainer.gradient_accumulation_steps
        rows_per_step = per_device * accumulation
        train, test = split_for_training(records, job.test_size, job.seed)
        train_rows, eval_rows = len(train), len(test)
        steps_per_epoch = steps_per_pass(train_rows, per_device, accumulation)
        epochs = job.steps / steps_per_epoch if train_rows else math.inf
    base = job.base_model(stage)
    try:
        known = base in SHORT_NAMES or bool(models.get_model(db, base))
    except InputError:
        known = False

    warnings, blocker = [], None
    if len(records) < MIN_ROWS:
        blocker = (f"only {len(records)} {unit} with these filters: the run would stop at once "
                   f"(it needs at least {MIN_ROWS}).")
        warnings.append(blocker)
    elif epochs > EPOCH_WARNING:
        warnings.append(_epoch_warning(job.steps, epochs, train_rows, unit))
    elif stage not in PROMPT_STAGES and epochs < PART_PASS_WARNING:
        warnings.append(_part_pass_warning(job.steps, rows_per_step, train_rows, unit, steps_per_epoch))
    if len(records) >= MIN_ROWS:
        problem = training_stages.get(stage).data_problem([row for _, row in records])  # e.g. KTO's one-sided labels
        if problem:
            blocker = f"the run would stop at once: {problem}."
            warnings.append(blocker)
    if run_estimate.budget_seconds(job.time_budget) is not None and stage not in BUDGET_STAGES:
        warnings.append(budget_stage_error(stage))
    # What the app, the project and a recipe gave the run (a typed value is the person's own).
    given = {name: where for name, where in resolved.sources.items()
             if where in ("app default", "project", "recipe") and name != "bf16"}
    preview = RunPreview(stage, base, known, unit, len(records), train_rows, eval_rows, rows_per_step, job.steps,
                         epochs, warnings, blocker=blocker, settings=resolved.described(sorted(given)),
                         command=resolved.command(),
                         app_settings={name: resolved.value(name) for name, where in given.items()
                                       if where == "app default"})
    path = str(models.resolve(db, base)) if known else base  # a folder or hub id: read from where it is
    preview = replace(preview, memory=run_estimate.memory_text(
        path, stage, job, trainer, train_configs.recipe_for_parameters,
        reward_model_bytes=run_estimate.reward_model_bytes(db, stage, job)))
    if stage in PROMPT_STAGES and estimate_time and records:
        preview = _with_estimate(db, project, stage, preview, job, trainer, [text for text, _ in records],
                                 measure or run_estimate.measure_micro_step, steps_given="steps" in values)
    elif stage in LABEL_ESTIMATE_STAGES and estimate_time and blocker is None and train_rows:
        preview = _with_label_estimate(db, project, stage, preview, job, trainer, train, eval_rows,
                                       measure or run_estimate.measure_label_step)
    return preview


def refuse_without_data(db: sqlite_utils.Database, project: str, stage: str, values: dict[str, Any]) -> RunPreview:
    """The preview (no time estimate) of a run about to be queued; InputError with the preview's reason when the
    run would stop at once for want of data. An SFT run with annotators=nobody was queued, took the worker slot
    and failed minutes later with "only 0 well-rated answers", which the preview knew before the launch."""
    preview = preview_run(db, project, stage, values, estimate_time=False)
    if preview.blocker is not None:
        raise InputError(f"not launched: {preview.blocker} Change the data settings, or label more first.")
    return preview


def budget_stage_error(stage: str) -> str:
    return f"time_budget is for {', '.join(BUDGET_STAGES)} runs (the stage here is {stage}); set steps instead"


def _micro_step_settings(db, project: str, stage: str, job, trainer, prompts: list[str]):
    """What the run's micro-step is measured with: one mini-batch of its answers, at its answer length."""
    if training_stages.get(stage).ppo_loop:
        rows, tokens, group, estimator = (trainer.mini_batch_size, job.max_new_tokens, job.answers_per_prompt,
                                          trainer.advantage_estimator)
        generation_rows = trainer.batch_size  # the runner generates a whole batch at once
    else:  # grpo, rloo: PPO's leave-one-out step (no value head to train) on one of the Trainer's micro-batches
        rows, tokens, group, estimator = (trainer.per_device_train_batch_size, trainer.max_completion_length,
                                          trainer.num_generations, "rloo")
        generation_rows = trainer.per_device_train_batch_size * trainer.steps_per_generation
    return run_estimate.MicroStepSettings(
        model_path=str(models.resolve(db, job.base_model(stage))), bf16=job.bf16, lora=job.lora, lora_r=job.lora_r,
        lora_alpha=job.lora_alpha, rows=rows, max_new_tokens=tokens, answers_per_prompt=group,
        advantage_estimator=estimator, prompts=tuple(prompts[:rows]),
        chat_template=bool(get_project(db, project).chat_template),
        threads=launch.threads_per_process(job.num_processes or 1), generation_rows=generation_rows,
        **run_estimate.run_settings(db, trainer))  # the run's dtype, 4-bit, checkpointing, attention; a busy device


def _step_seconds(stage: str, micro: run_estimate.MicroStep, trainer, job, heldout: int) -> float:
    """One step of the run from its micro-step: a PPO batch (with its share of the held-out curve, which a
    single-process PPO run draws every job.heldout_every steps), or a GRPO/RLOO generation batch (on each rank)."""
    if training_stages.get(stage).ppo_loop:
        curve = 0.0
        if (job.num_processes or 1) == 1:
            curve = run_estimate.heldout_curve_seconds_per_step(micro, heldout, job.heldout_every)
        return run_estimate.ppo_step_seconds(micro, trainer.batch_size, trainer.ppo_epochs) + curve
    passes = run_estimate.online_no_grad_passes(trainer.needs_old_logps, trainer.beta)
    answers = trainer.per_device_train_batch_size * trainer.steps_per_generation
    return run_estimate.online_step_seconds(micro, answers, trainer.num_iterations, passes)


def _prompt_text(prompt) -> str:
    """A held-out prompt as text for the generation timing: a conversation's turns joined (about its length)."""
    return prompt if isinstance(prompt, str) else "\n".join(str(turn.get("content", "")) for turn in prompt)


def _label_step_settings(db, project: str, stage: str, job, trainer, train: list[dict], heldout: list):
    """What a DPO or reward-model run's micro-batch is measured with: its training pairs (the first few batches are
    timed, and up to run_estimate.LENGTH_SAMPLE of them give the average batch's padded length), its model and
    precision, and (DPO) a batch of held-out answers as its evaluation generates them."""
    policy = training_stages.get(stage).answers
    answers = len(heldout) * job.eval_samples if policy else 0
    batch = EvalSettings.__dataclass_fields__["batch_size"].default  # the evaluation's generation batch
    return run_estimate.LabelStepSettings(
        stage=stage, model_path=str(models.resolve(db, job.base_model(stage))), bf16=job.bf16, lora=job.lora,
        lora_r=job.lora_r, lora_alpha=job.lora_alpha,
        pairs_json=json.dumps(train[:run_estimate.LENGTH_SAMPLE], sort_keys=True, default=str),
        rows=trainer.per_device_train_batch_size,
        max_length=trainer.max_length, max_prompt_length=getattr(trainer, "max_prompt_length", None),
        share_prompt_forward=bool(getattr(trainer, "share_prompt_forward", False)),
        threads=launch.threads_per_process(job.num_processes or 1), max_new_tokens=job.max_new_tokens,
        generate_rows=min(answers, batch), prompts=tuple(_prompt_text(p) for p in heldout[:batch]) if answers else (),
        chat_template=bool(get_project(db, project).chat_template), **run_estimate.run_settings(db, trainer))


def _base_stored(db, project: str, stage: str, job) -> bool:
    """Whether the run's evaluation will reuse its base's stored answers (evaluation.base_answers_stored); a
    measure that cannot be resolved now says no (the evaluation will say why), not a failed preview."""
    try:
        return base_answers_stored(db, project, job, job.base_model(stage))
    except InputError:
        return False


def _with_label_estimate(db, project: str, stage: str, preview: RunPreview, job, trainer, train: list[dict],
                         eval_rows: int, measure) -> RunPreview:
    """The preview of a DPO or reward-model run with its wall-time estimate (run_estimate.label_estimate)."""
    heldout = heldout_prompts(db, project) if training_stages.get(stage).answers else []
    try:
        micro = measure(_label_step_settings(db, project, stage, job, trainer, train, heldout))
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        return replace(preview, warnings=[*preview.warnings, f"no time estimate: {error}"])
    if not training_stages.get(stage).reference_copy:
        reference = "none"
    else:
        reference = "once" if getattr(trainer, "precompute_ref_log_probs", False) else "each_step"
    answers = len(heldout) * job.eval_samples
    estimate = run_estimate.label_estimate(micro, job.steps, trainer.gradient_accumulation_steps, preview.train_rows,
                                           eval_rows, reference, eval_answers=answers,
                                           base_stored=bool(answers) and _base_stored(db, project, stage, job))
    return replace(preview, estimate=estimate)


def _with_estimate(db, project: str, stage: str, preview: RunPreview, job, trainer, prompts: list[str], measure,
                   steps_given: bool) -> RunPreview:
    """The preview with the wall-time estimate, and with steps fitted to job.time_budget when there is one (ppo):
    steps given explicitly are kept when they fit (else lowered, with a warning), otherwise the budget decides."""
    budget = run_estimate.budget_seconds(job.time_budget) if stage in BUDGET_STAGES else None
    try:
        micro = measure(_micro_step_settings(db, project, stage, job, trainer, prompts))
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        reason = f"no time estimate: {error}"
        return replace(preview, warnings=[*preview.warnings, reason], budget_error=reason if budget else None)
    heldout = len(heldout_prompts(db, project))
    step_seconds = _step_seconds(stage, micro, trainer, job, heldout)
    answers = heldout * job.eval_samples
    estimate = run_estimate.estimate_from_step(micro, job.steps, step_seconds, answers,
                                               base_stored=bool(answers) and _base_stored(db, project, stage, job))
    if budget is None:
        return replace(preview, estimate=estimate)
    fixed = estimate.setup_seconds + estimate.eval_seconds
    warnings = list(preview.warnings)
    try:
        fitted = run_estimate.steps_for_budget(budget, estimate.step_seconds, fixed)
    except ValueError as error:
        warnings.append(str(error))
        return replace(preview, estimate=estimate, budget_seconds=budget, warnings=warnings, budget_error=str(error))
    steps = min(job.steps, fitted) if steps_given else fitted
    if steps_given and fitted < job.steps:
        warnings.append(f"steps={job.steps} would take about {run_estimate.format_duration(estimate.total_seconds)}, "
                        f"more than time_budget {run_estimate.format_duration(budget)}: {fitted} steps fit.")
    estimate = replace(estimate, steps=steps)
    epochs = steps * preview.rows_per_step / preview.train_rows if preview.train_rows else math.inf
    stale = _epoch_warning(job.steps, preview.epochs, preview.train_rows, preview.unit)
    if stale in warnings:  # the passes over the prompts are the fitted steps' now
        warnings.remove(stale)
        if epochs > EPOCH_WARNING:
            warnings.append(_epoch_warning(steps, epochs, preview.train_rows, preview.unit))
    return replace(preview, steps=steps, epochs=epochs, estimate=estimate, budget_seconds=budget, warnings=warnings,
                   steps_asked=job.steps if steps != job.steps else None)


def apply_time_budget(db: sqlite_utils.Database, project: str, stage: str, values: dict[str, Any],
                      measure=None) -> tuple[dict[str, Any], RunPreview | None]:
    """The settings a run is queued with: with time_budget set (ppo), `steps` becomes the number that fits, as
    the preview chose it; (settings, the preview) or (the same settings, None) when there is no budget. A budget
    that not even one step fits raises InputError naming time_budget."""
    config = run_settings.resolve_run(db, project, stage, values).config
    if run_estimate.budget_seconds(config["job"].get("time_budget")) is None:
        return values, None
    if stage not in BUDGET_STAGES:
        raise InputError(budget_stage_error(stage), field="time_budget")
    preview = preview_run(db, project, stage, values, measure=measure)
    if preview.budget_error is not None:
        raise InputError(preview.budget_error, field="time_budget")
    if preview.estimate is None:  # no training prompts: the run fails at once anyway, with its own message
        return values, preview
    return {**values, "steps": preview.steps}, preview
