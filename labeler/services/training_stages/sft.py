"""SFT: fine-tune the policy on the answers people rated well (rlhf.sft's SFTTrainer)."""
from __future__ import annotations

from labeler.services.export import training_options, unpaired_rows
from labeler.services.training_stages.base import Stage


def rows(db, project: str, job, **options) -> list[dict]:
    """Well-rated answers (mean score >= sft_min_score, default the scale's midpoint) as prompt + completion."""
    listed = unpaired_rows(db, project, training_options(job, threshold=job.sft_min_score, **options))
    return [{"prompt": r["prompt"], "completion": r["completion"]} for r in listed if r["label"]]


STAGE = Stage(
    name="sft", config_class="rlhf.sft:SFTConfig", runner="labeler.services.runners.offline:run_sft", rows=rows,
    unit="answers", label="Imitate good answers (SFT)", note="Fine-tunes the model on the answers people rated well.",
    card="supervised fine-tuning (SFTTrainer)", metrics=("loss",),
    form_fields=("learning_rate", "per_device_train_batch_size", "max_length", "completion_only_loss", "packing"),
    full_lr=2e-5, lora_lr=2e-4, frozen_rows=("train_rows", "sft"),
)
