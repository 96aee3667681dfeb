"""What every training stage says about itself (`Stage`), and the row helpers the stages share.

A stage's facts live in its own module of this package (sft.py, rm.py, ...), each a `STAGE = Stage(...)`; the
registry (`__init__.py`) lists them. The trainer config class and the runner are named as "module:attribute" and
imported when asked for: they import torch, and the Train tab, the CLI's help and the preview stay light.
"""
from __future__ import annotations

import importlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from labeler.services.errors import InputError
from labeler.services.export import split_by_prompt
from labeler.services.projects import get_project
from labeler.services.prompts import split_texts


# Fewer training rows and a run stops at once (the stage runners' require_rows; the preview and launching refuse it).
MIN_TRAINING_ROWS = 2


def no_app_defaults(trainer_settings: dict, job) -> dict:
    return {}


def no_data_problem(rows: list) -> str | None:
    return None


def per_device_batch(mini: int, accumulation: int) -> dict[str, Any]:
    """A recipe's batch shape on transformers' Trainer (sft, rm, dpo, kto): the same examples per optimizer step,
    fewer per forward pass."""
    return {"per_device_train_batch_size": max(1, mini // 2), "gradient_accumulation_steps": accumulation}


def generation_batch(mini: int, accumulation: int) -> dict[str, Any]:
    """A recipe's batch shape for GRPO and RLOO: mini-batches of `mini` answers, 64 answers per generation batch
    (answer length: the job's max_new_tokens, which becomes max_completion_length)."""
    return {"per_device_train_batch_size": mini, "steps_per_generation": 64 // mini}


# GRPO and RLOO: the job's answers per prompt and answer length are their trainer's group size and completion
# length unless the trainer settings set them (Stage.from_job; stored with the run when it is resolved).
ONLINE_FROM_JOB = {"num_generations": "answers_per_prompt", "max_completion_length": "max_new_tokens"}


def check_online_groups(job, trainer) -> None:
    """People rank each prompt's group of answers: with reward human or mix the trainer's group is the job's."""
    if job.reward in ("human", "mix") and trainer.num_generations != job.answers_per_prompt:
        raise InputError(f"num_generations={trainer.num_generations}: with reward={job.reward} it must equal "
                         f"answers_per_prompt={job.answers_per_prompt} (people rank each prompt's group)",
                         field="num_generations")


def groups_per_step(job, trainer) -> int:
    """Prompts a GRPO or RLOO generation batch answers (on each rank): whole groups (OnlineRLConfig checks it)."""
    return trainer.generation_batch_size // trainer.num_generations


@dataclass(frozen=True)
class Stage:
    """One training stage: its trainer config and runner, its app defaults, the words and charts the app shows
    for it, and which rows it trains on (`rows`, the one function its runner and the preview both call)."""

    name: str
    config_class: str  # "module:Class" of its trainer config
    runner: str  # "module:function" of its run(ctx: StageContext) -> RunResult
    # (db, project, job, **options) -> its training rows after the job's data filters: dicts (sft, rm, dpo, kto)
    # or, for the stages that sample answers, the project's training prompt texts (in the database's order)
    rows: Callable[..., list]
    unit: str  # what a row is, in the preview: "answers", "pairs" or "prompts"
    label: str  # the Train tab's stage radio
    note: str  # the Train tab's line under it
    card: str  # "trained with" on the model card (hub.py)
    metrics: tuple[str, ...]  # the run monitor's default charts
    form_fields: tuple[str, ...]  # the trainer fields the Train tab shows (every other: --set or a file)
    full_lr: float  # a recipe's learning rate, full fine-tuning
    lora_lr: float  # ... and with LoRA
    recipe_batch: Callable[[int, int], dict] = per_device_batch  # (mini, accumulation) -> a recipe's batch fields
    aka: str = ""  # what the name stands for, where it is not said by the name itself (rm: "reward model")
    default_model: str = "default"
    answers: bool = True  # trains a policy that writes answers: evaluated on held-out prompts, max_new_tokens pinned
    samples: bool = False  # samples answers to the project's prompts (ppo, grpo, rloo): a time estimate, a reward
    time_budget: bool = False  # `time_budget` fits its steps (ppo)
    online_trl: bool = False  # a TRL online trainer fed the job's answers per prompt and length (grpo, rloo)
    value_head: bool = False  # its model is saved with a value head beside it
    # the file of rows it freezes at its first start (StageContext.frozen_rows) and its model's snapshot kind, for
    # a model kept from a cancelled run's checkpoint (kept_models); ("", "") when none is recorded
    frozen_rows: tuple[str, str] = ("", "")
    # settings the app gives its trainer unless the user set them: (explicit trainer settings, the run's JobConfig)
    # -> the missing ones
    app_defaults: Callable[[dict, Any], dict] = no_app_defaults
    # why the rows cannot be trained on although there are enough of them, or None (the preview's blocker)
    data_problem: Callable[[list], str | None] = no_data_problem
    # (job, trainer config) -> prompts a step samples answers to, on each rank (the stages that sample)
    prompts_per_step: Callable[[Any, Any], int] | None = None
    # (job, trainer config) -> None, or InputError naming the setting that breaks a rule of the trainer
    check: Callable[[Any, Any], None] | None = None
    # trainer field -> the job field that gives it unless the trainer settings set it (grpo, rloo: ONLINE_FROM_JOB)
    from_job: dict = field(default_factory=dict)
    # steps when the run sets none: this many passes over its training rows, counted when the run is queued
    # (run_settings.resolve_run); None: the job's own default (40)
    default_passes: float | None = None

    def config_cls(self):
        """The trainer config class (imported now: a broken trainer module fails here, loudly)."""
        return _load(self.config_class)

    def run(self, ctx):
        return _load(self.runner)(ctx)


def _load(spec: str):
    module_name, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def training_prompts(db, project: str, job) -> list[str]:
    """The project's training prompts (split 'train': held-out prompts are never trained on), in the database's
    order; a runner shuffles them by the job's seed."""
    return split_texts(db, get_project(db, project).id, "train")


def split_for_training(records: list[tuple[str, dict]], test_size: float, seed: int) -> tuple[list, list]:
    """(train, eval) rows as the stage runners split them (runners.common.split_rows): by prompt (export's
    split_by_prompt), and everything trained on when either side would have fewer than 2 rows."""
    train, test = split_by_prompt(records, test_size, seed)
    if len(train) < 2 or len(test) < 2:
        return [row for _, row in records], []
    return train, test


def steps_per_pass(train_rows: int, per_device: int, accumulation: int) -> int:
    """Optimizer steps in one pass over `train_rows`, as transformers' Trainer counts them: ceil(rows / per-device
    batch) batches, one step per `accumulation` of them (at least 1)."""
    return max(1, math.ceil(math.ceil(train_rows / per_device) / accumulation))


def row_key(row) -> str:
    """The key a run splits its rows on: the prompt itself (prompts are unique per project), as canonical JSON."""
    return json.dumps(row["prompt"], sort_keys=True, ensure_ascii=False)
