"""RLOO: GRPO's sampling with each answer's reward compared to the mean of the others in its group (TRL 1.x's
RLOOTrainer, the app's CPU defaults in runners/online.py)."""
from __future__ import annotations

from labeler.services.training_stages.base import (ONLINE_FROM_JOB, Stage, check_online_groups, generation_batch,
                                                   groups_per_step, training_prompts)

STAGE = Stage(
    name="rloo", config_class="labeler.services.runners.online:StudioRLOOConfig",
    runner="labeler.services.runners.online:run_rloo", rows=training_prompts, unit="prompts",
    label="Leave-one-out RL (RLOO)", note="Like GRPO, with each answer compared to the mean of the others.",
    card="RLOO (RLOOTrainer, TRL 1.x API)", metrics=("reward", "kl"),
    form_fields=("learning_rate", "per_device_train_batch_size", "num_iterations", "beta", "normalize_advantages"),
    full_lr=1e-6, lora_lr=1e-5, recipe_batch=generation_batch, samples=True, online_trl=True,
    prompts_per_step=groups_per_step, from_job=ONLINE_FROM_JOB, check=check_online_groups,
)
