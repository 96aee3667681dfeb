"""KTO: tune the policy from answers labelled desirable or undesirable (TRL 1.x's KTOTrainer), with the app's CPU
defaults (StudioKTOConfig)."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

from labeler.services.settings.training_stages.base import (Stage, built_when_asked, config_attribute,
                                                            fitted_max_length, load)


@functools.cache
def studio_config() -> type:
    @dataclass
    class StudioKTOConfig(load("rlhf.kto:KTOConfig")):
        """KTOConfig with defaults for a CPU run in the app (the fields and their meaning are TRL 1.16's)."""

        learning_rate: float = field(default=5e-5, metadata={"help": "AdamW learning rate (TRL's 1e-6 suits long GPU runs; at 5e-6 the shipped task's 40 steps moved the model by KL 0.01)."})
        per_device_train_batch_size: int = field(default=8, metadata={"help": "Rated answers per step (the KL pairs are made within it)."})
        max_length: int | None = field(default=512, metadata={"help": "Tokens per prompt + answer; the answer is cut at the end."})
        precompute_ref_log_probs: bool = field(default=True, metadata={
            "help": "Run the base model once over the data before training and cache its log-probs (no second model in memory)."})

    return built_when_asked(StudioKTOConfig)


# The config class, built when first asked for (PEP 562), never by the registry.
__getattr__ = config_attribute(__name__, "StudioKTOConfig", studio_config)


def label_problem(labels: list[bool]) -> str | None:
    """Why KTO cannot train on rows with these labels (all desirable, or all undesirable), or None."""
    if labels and (all(labels) or not any(labels)):
        return (f"all {len(labels)} rated answers are {'desirable' if labels[0] else 'undesirable'} with this "
                "threshold; KTO needs both (change sft_min_score or rate more)")
    return None


STAGE = Stage(
    name="kto", order=7, config_class="labeler.services.settings.training_stages.kto:StudioKTOConfig",
    runner="labeler.services.training.runners.online:run_kto", training_rows="labeler.services.training.stages:kto_rows",
    unit="answers", label="Learn from good/bad labels (KTO)",
    note="Tunes the model from answers labelled good or bad (ratings above or below the scale's midpoint).",
    card="KTO (KTOTrainer, TRL 1.x API)", metrics=("loss", "kl"),
    form_fields=("learning_rate", "per_device_train_batch_size", "beta", "desirable_weight", "undesirable_weight"),
    full_lr=1e-6, lora_lr=5e-6, data_problem=lambda rows: label_problem([row["label"] for row in rows]),
    app_defaults=fitted_max_length,  # max_length: the prompt budget + the project's answer length
    sequences_per_row=2, reference_copy=True,  # each row with its KL row
)
