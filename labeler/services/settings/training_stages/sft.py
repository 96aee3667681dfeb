"""SFT: fine-tune the policy on the answers people rated well (rlhf.sft's SFTTrainer)."""
from __future__ import annotations

from labeler.services.settings.training_stages.base import Stage, fitted_max_length

# SFTConfig's own max_length. SFT also trains on what people wrote (corrections, answers of their own, imported
# rows), which the model's answer length does not bound: the length follows a longer answer length up, never below
# this.
SFT_LENGTH_FLOOR = 512


def app_defaults(trainer_settings: dict, job) -> dict:
    fitted = fitted_max_length(trainer_settings, job)
    return {"max_length": max(SFT_LENGTH_FLOOR, fitted["max_length"])} if fitted else {}


STAGE = Stage(
    name="sft", order=1, config_class="rlhf.sft:SFTConfig", runner="labeler.services.training.runners.offline:run_sft",
    training_rows="labeler.services.training.stages:sft_rows",
    unit="answers", label="Imitate good answers (SFT)", note="Fine-tunes the model on the answers people rated well.",
    card="supervised fine-tuning (SFTTrainer)", metrics=("loss",),
    form_fields=("learning_rate", "per_device_train_batch_size", "max_length", "completion_only_loss", "packing"),
    full_lr=2e-5, lora_lr=2e-4, frozen_rows=("train_rows", "sft"), logit_tokens="all",
    app_defaults=app_defaults,  # max_length: at least 512, longer for a long answer length
)
