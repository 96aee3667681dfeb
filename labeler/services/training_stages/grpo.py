"""GRPO: the policy samples a group of answers per prompt and learns from their rewards relative to the group
(TRL 1.x's GRPOTrainer, the app's CPU defaults in runners/online.py)."""
from __future__ import annotations

from labeler.services.training_stages.base import (ONLINE_FROM_JOB, Stage, check_online_groups, generation_batch,
                                                   groups_per_step, training_prompts)

STAGE = Stage(
    name="grpo", config_class="labeler.services.runners.online:StudioGRPOConfig",
    runner="labeler.services.runners.online:run_grpo", rows=training_prompts, unit="prompts",
    label="Group-relative RL (GRPO)",
    note="Like PPO, but compares several answers to the same prompt instead of learning a value function.",
    card="GRPO (GRPOTrainer, TRL 1.x API)", metrics=("reward", "kl"),
    form_fields=("learning_rate", "per_device_train_batch_size", "num_iterations", "beta", "loss_type",
                 "scale_rewards", "epsilon"),
    full_lr=1e-6, lora_lr=1e-5, recipe_batch=generation_batch, samples=True, online_trl=True,
    prompts_per_step=groups_per_step, from_job=ONLINE_FROM_JOB, check=check_online_groups,
)
