"""What a training run will use, before it is launched (issue 14 item 9): rows or pairs after the data filters,
the train/eval split, the epochs that `steps` implies, and the base model.

A 10-step run on a tiny set trained 10 epochs without a word; the preview says so (and warns) before the run
is queued. It reads the data exactly as the stage runners do: the same settings resolution
(train_configs.resolve_run_config), the same export row functions and filters (stage_runners.export_options),
and the same split by prompt (export.split_by_prompt), without loading a model or building a dataset.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import sqlite_utils

from labeler import forms
from labeler.services import train_configs
from labeler.services.errors import InputError

# More passes than this over the training rows and the preview warns: with a few hundred labels the model then
# mostly memorises them (reward models in particular; Ouyang et al. 2022 train their RM for one epoch).
EPOCH_WARNING = 3.0
MIN_ROWS = 2  # what the stage runners require (stage_runners._require_rows)


@dataclass(frozen=True)
class RunPreview:
    stage: str
    base_model: str
    base_model_known: bool
    unit: str  # what a row is: "pairs", "answers" or "prompts"
    rows: int  # after the filters
    train_rows: int
    eval_rows: int
    rows_per_step: int  # the effective batch: rows (sft/rm/dpo) or prompts (ppo) consumed per optimizer step
    steps: int
    # sft/rm/dpo: steps / steps per epoch, as transformers' Trainer counts them (a batch larger than the data
    # is the whole data: 10 steps over 7 rows with batch 8 are 10 epochs); ppo: steps * prompts per step / prompts.
    epochs: float
    warnings: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        base = f"`{self.base_model}`" + ("" if self.base_model_known else " (not registered: a folder or hub id)")
        split = (f"{self.train_rows} train / {self.eval_rows} eval, split by prompt" if self.eval_rows
                 else f"all {self.train_rows} for training, no eval split")
        lines = [
            f"**This {self.stage} run will use** {self.rows} {self.unit} ({split}); base model {base}.",
            f"{self.steps} steps of up to {self.rows_per_step} {self.unit} = "
            + (f"**{self.epochs:.1f} epochs**." if math.isfinite(self.epochs) else "no data to pass over."),
        ]
        lines += [f"⚠️ {warning}" for warning in self.warnings]
        return "  \n".join(lines)


def _trainer_config(stage: str, trainer_values: dict[str, Any]):
    cls = train_configs.stage_config_class(stage)
    return forms.build_config(cls, train_configs._trainer_defaults(stage, cls, trainer_values))


def _rows(db: sqlite_utils.Database, project: str, stage: str, job) -> tuple[list[tuple[str, dict]], str]:
    """(prompt key, row) pairs of the stage's training data, and what a row is called."""
    from labeler.services import stage_runners
    from labeler.services.export import preference_rows, unpaired_rows
    from labeler.services.projects import get_project

    ctx = SimpleNamespace(job=job)  # export_options reads only the job's data filters
    if stage == "sft":
        rows = [r for r in unpaired_rows(db, project, stage_runners.export_options(ctx, threshold=job.sft_min_score))
                if r["label"]]
        unit = "answers"
    elif stage in ("rm", "dpo"):
        rows, unit = preference_rows(db, project, stage_runners.export_options(ctx)), "pairs"
    else:  # ppo samples the project's training prompts, not labels
        project_id = get_project(db, project).id
        texts = [r[0] for r in db.execute(
            "SELECT text FROM prompts WHERE project_id = ? AND split = 'train' ORDER BY id", [project_id])]
        return [(text, {"prompt": text}) for text in texts], "prompts"
    # The key the stage runners split on: the prompt itself (prompts are unique per project).
    return [(json.dumps(r["prompt"], sort_keys=True, ensure_ascii=False), r) for r in rows], unit


def preview_run(db: sqlite_utils.Database, project: str, stage: str, values: dict[str, Any]) -> RunPreview:
    """The preview of a run of `stage` with the settings `values` (as the Train form or `--set` give them).

    Bad settings raise the same InputError launching would.
    """
    from labeler.services.export import split_by_prompt
    from labeler.services.models import get_model
    from rlhf.loading import SHORT_NAMES

    config = train_configs.resolve_run_config(stage, values)
    job = forms.build_config(train_configs.JobConfig, config["job"])
    trainer = _trainer_config(stage, config["trainer"])
    records, unit = _rows(db, project, stage, job)

    if stage == "ppo":
        batch = getattr(trainer, "batch_size", 1) if trainer is not None else 1
        # Each PPO batch samples answers_per_prompt answers to batch / answers_per_prompt prompts.
        rows_per_step = max(1, batch // job.answers_per_prompt)
        train_rows, eval_rows = len(records), 0
        epochs = job.steps * rows_per_step / train_rows if train_rows else math.inf
    else:
        per_device = getattr(trainer, "per_device_train_batch_size", 8) if trainer is not None else 8
        accumulation = getattr(trainer, "gradient_accumulation_steps", 1) if trainer is not None else 1
        rows_per_step = per_device * accumulation
        train, test = split_by_prompt(records, job.test_size, job.seed)
        # stage_runners.split_rows drops an eval side of fewer than 2 rows and trains on everything.
        if len(train) < 2 or len(test) < 2:
            train, test = [row for _, row in records], []
        train_rows, eval_rows = len(train), len(test)
        # Trainer: ceil(rows / per-device batch) batches per epoch, one optimizer step per `accumulation` of them.
        steps_per_epoch = max(1, math.ceil(math.ceil(train_rows / per_device) / accumulation))
        epochs = job.steps / steps_per_epoch if train_rows else math.inf
    base = job.base_model(stage)
    try:
        known = base in SHORT_NAMES or bool(get_model(db, base))
    except InputError:
        known = False

    warnings = []
    if len(records) < MIN_ROWS:
        warnings.append(f"only {len(records)} {unit} with these filters: the run would stop at once "
                        f"(it needs at least {MIN_ROWS}).")
    elif epochs > EPOCH_WARNING:
        fewer = max(1, int(job.steps * EPOCH_WARNING / epochs))
        warnings.append(f"{epochs:.1f} passes over {train_rows} {unit}: the model will mostly memorise them. "
                        f"Label more, or lower steps to about {fewer}.")
    return RunPreview(stage, base, known, unit, len(records), train_rows, eval_rows, rows_per_step, job.steps,
                      epochs, warnings)
