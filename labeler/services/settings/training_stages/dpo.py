"""DPO: tune the policy straight from preference pairs, no reward model (rlhf.dpo's DPOTrainer)."""
from __future__ import annotations

from labeler.services.settings.training_stages.base import PROMPT_BUDGET, Stage, fitted_max_length


# DPO's learning rate in the app unless the user or a recipe sets one (a recipe's is for a larger model on a GPU), for
# full fine-tuning (LoRA keeps DPOConfig's). On the example tasks of bench/own_task.py (the default model, ~300 pairs
# of 128-token answers from 70 x 4 ranked answers, one pass), DPOConfig's 5e-6 moved the policy little (KL 0.8-1.5),
# 2e-5 used under half of the KL budget of 10 (KL 4.5, 73% against the base by the task's judge), 4e-5 overran it
# (KL 13.5 on formal), and 3e-5 used it on both tasks and two seeds: KL 6.3-9.3, 75-88% (docs/YOUR_TASK.md). Offline
# DPO has no KL controller: a project with many more pairs takes more steps and moves further.
APP_LEARNING_RATE = 3e-5


def app_defaults(trainer_settings: dict, job) -> dict:
    """The app's learning rate (full fine-tuning), and max_length fitted to the project's answer length with the
    prompt budget DPO itself keeps (its max_prompt_length, 256 unless set: the same as PROMPT_BUDGET)."""
    out = fitted_max_length(trainer_settings, job, trainer_settings.get("max_prompt_length") or PROMPT_BUDGET)
    if not job.lora and "learning_rate" not in trainer_settings:
        out["learning_rate"] = APP_LEARNING_RATE
    return out


STAGE = Stage(
    name="dpo", order=3, config_class="rlhf.dpo:DPOConfig", runner="labeler.services.training.runners.offline:run_dpo",
    training_rows="labeler.services.training.stages:dpo_rows",
    unit="pairs", label="Learn from preferences (DPO)",
    note="Tunes the model straight from the preference pairs, with no reward model.",
    card="DPO (DPOTrainer)", metrics=("loss", "rewards/margins"),
    form_fields=("learning_rate", "per_device_train_batch_size", "beta", "loss_type", "max_length"),
    full_lr=1e-6, lora_lr=5e-6, frozen_rows=("train_rows", "preferences"), app_defaults=app_defaults,
    default_passes=1.0, sequences_per_row=2, reference_copy=True,
)
