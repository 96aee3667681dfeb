"""RLOO: GRPO's sampling with each answer's reward compared to the mean of the others in its group (TRL 1.x's
RLOOTrainer), with the app's CPU defaults (StudioRLOOConfig)."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

from labeler.services.settings.training_stages.base import (ONLINE_FROM_JOB, Stage, StudioOnlineDefaults,
                                                            built_when_asked, check_online_groups, config_attribute,
                                                            generation_batch, groups_per_step, load)


@functools.cache
def studio_config() -> type:
    @dataclass
    class StudioRLOOConfig(StudioOnlineDefaults, load("rlhf.rloo:RLOOConfig")):
        """RLOOConfig with defaults for a CPU run in the app (the fields and their meaning are TRL 1.16's)."""

        beta: float = field(default=0.03, metadata={"help": "KL penalty on the reward (PPO's init_kl_coef; 0: no reference)."})

    return built_when_asked(StudioRLOOConfig)


# The config class, built when first asked for (PEP 562), never by the registry.
__getattr__ = config_attribute(__name__, "StudioRLOOConfig", studio_config)


STAGE = Stage(
    name="rloo", order=6, config_class="labeler.services.settings.training_stages.rloo:StudioRLOOConfig",
    runner="labeler.services.training.runners.online:run_rloo", training_rows="labeler.services.training.stages:training_prompts",
    unit="prompts", label="Leave-one-out RL (RLOO)",
    note="Like GRPO, with each answer compared to the mean of the others.",
    card="RLOO (RLOOTrainer, TRL 1.x API)", metrics=("reward", "kl"),
    form_fields=("learning_rate", "per_device_train_batch_size", "num_iterations", "beta", "normalize_advantages"),
    full_lr=1e-6, lora_lr=1e-5, recipe_batch=generation_batch, samples=True, online_trl=True,
    prompts_per_step=groups_per_step, from_job=ONLINE_FROM_JOB, check=check_online_groups,
)
