"""DPO: tune the policy straight from preference pairs, no reward model (rlhf.dpo's DPOTrainer)."""
from __future__ import annotations

from labeler.services.export import preference_rows, training_options
from labeler.services.training_stages.base import Stage


def rows(db, project: str, job, **options) -> list[dict]:
    """The reward model's preference pairs (rm.py's rows), as conversations for a chat model (`conversational`)."""
    return preference_rows(db, project, training_options(job, **options))


STAGE = Stage(
    name="dpo", config_class="rlhf.dpo:DPOConfig", runner="labeler.services.runners.offline:run_dpo",
    rows=rows,
    unit="pairs", label="Learn from preferences (DPO)",
    note="Tunes the model straight from the preference pairs, with no reward model.",
    card="DPO (DPOTrainer)", metrics=("loss", "rewards/margins"),
    form_fields=("learning_rate", "per_device_train_batch_size", "beta", "loss_type", "max_length"),
    full_lr=1e-6, lora_lr=5e-6, frozen_rows=("train_rows", "preferences"),
)
