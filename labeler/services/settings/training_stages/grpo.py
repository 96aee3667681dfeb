"""GRPO: the policy samples a group of answers per prompt and learns from their rewards relative to the group
(TRL 1.x's GRPOTrainer), with the app's CPU defaults (StudioGRPOConfig)."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

from labeler.services.settings.training_stages.base import (ONLINE_FROM_JOB, Stage, StudioOnlineDefaults,
                                                            built_when_asked, check_online_groups, config_attribute,
                                                            generation_batch, groups_per_step, load)


@functools.cache
def studio_config() -> type:
    @dataclass
    class StudioGRPOConfig(StudioOnlineDefaults, load("rlhf.grpo:GRPOConfig")):
        """GRPOConfig with defaults for a CPU run in the app (the fields and their meaning are TRL 1.16's)."""

        # Measured on the shipped task (function reward, 40 steps, CPU with bf16): beta 0.04 (DeepSeekMath's) gave
        # 94% positive at KL 10.5 on held-out prompts, 0.08 gave 84% at KL 6.0, 0.05 gave 94% at KL 9.6.
        beta: float = field(default=0.05, metadata={"help": "k3 KL coefficient to the base model (0: no reference)."})

    return built_when_asked(StudioGRPOConfig)


# The config class, built when first asked for (PEP 562), never by the registry.
__getattr__ = config_attribute(__name__, "StudioGRPOConfig", studio_config)


STAGE = Stage(
    name="grpo", order=5, config_class="labeler.services.settings.training_stages.grpo:StudioGRPOConfig",
    runner="labeler.services.training.runners.online:run_grpo", training_rows="labeler.services.training.stages:training_prompts",
    unit="prompts", label="Group-relative RL (GRPO)",
    note="Like PPO, but compares several answers to the same prompt instead of learning a value function.",
    card="GRPO (GRPOTrainer, TRL 1.x API)", metrics=("reward", "kl"),
    form_fields=("learning_rate", "per_device_train_batch_size", "num_iterations", "beta", "loss_type",
                 "scale_rewards", "epsilon"),
    full_lr=1e-6, lora_lr=1e-5, recipe_batch=generation_batch, samples=True, online_trl=True,
    prompts_per_step=groups_per_step, from_job=ONLINE_FROM_JOB, check=check_online_groups,
)
