"""The rows each training stage trains on, read from the database through export's row functions and filters: the
functions the stages name as their `training_rows` (training_stages/), which the runners and the preview call
through Stage.rows, and the split by prompt they share.

Apart from the stage registry on purpose: the registry is facts on the settings' ground floor, and reading rows
needs the export, project and prompt code above it.
"""
from __future__ import annotations

from typing import Any

from labeler.services.export import preference_rows, split_by_prompt, training_options, unpaired_rows
from labeler.services.projects import get_project
from labeler.services.prompts import split_texts
from labeler.services.question_rows import criterion_preferences


def training_prompts(db, project: str, job) -> list[str]:
    """The project's training prompts (split 'train': held-out prompts are never trained on), in the database's
    order; a runner shuffles them by the job's seed (ppo, grpo, rloo)."""
    return split_texts(db, get_project(db, project).id, "train")


def sft_rows(db, project: str, job, **options) -> list[dict]:
    """Well-rated answers (mean score >= sft_min_score, default the scale's midpoint) as prompt + completion."""
    listed = unpaired_rows(db, project, training_options(job, threshold=job.sft_min_score, **options))
    return [{"prompt": r["prompt"], "completion": r["completion"]} for r in listed if r["label"]]


def rm_rows(db, project: str, job, **options) -> list[dict]:
    """Preference pairs: rankings (and, with include_rating_pairs, ratings of two answers to a prompt); with a
    `criterion`, pairs of answers people scored differently on that criterion (one reward model per criterion,
    as Llama 2 trained helpfulness and safety apart)."""
    if job.criterion:
        return criterion_preferences(db, project, job.criterion)
    return preference_rows(db, project, training_options(job, **options))


def dpo_rows(db, project: str, job, **options) -> list[dict]:
    """The reward model's preference pairs (without a criterion), as conversations for a chat model
    (`conversational`)."""
    return preference_rows(db, project, training_options(job, **options))


def kto_rows(db, project: str, job, **options) -> list[dict[str, Any]]:
    """Every rated answer: desirable when its mean score is at least sft_min_score (default the scale's midpoint),
    undesirable below it (export --kind unpaired's rows), in the export's order (the runner shuffles them)."""
    listed = unpaired_rows(db, project, training_options(job, threshold=job.sft_min_score, **options))
    return [{"prompt": r["prompt"], "completion": r["completion"], "label": bool(r["label"])} for r in listed]


def online_dpo_rows(db, project: str, job, **options) -> list[dict]:
    """The project's training prompts (held-out prompts are never trained on) as prompt-only rows, in the
    database's order; the runner shuffles them by the job's seed."""
    return [{"prompt": text} for text in training_prompts(db, project, job)]


def split_for_training(records: list[tuple[str, dict]], test_size: float, seed: int) -> tuple[list, list]:
    """(train, eval) rows as the stage runners split them (runners.common.split_rows): by prompt (export's
    split_by_prompt), and everything trained on when either side would have fewer than 2 rows."""
    train, test = split_by_prompt(records, test_size, seed)
    if len(train) < 2 or len(test) < 2:
        return [row for _, row in records], []
    return train, test
