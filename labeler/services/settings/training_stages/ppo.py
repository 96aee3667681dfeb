"""PPO: our PPOTrainer's loop over the project's prompts, rewarded by the job's reward source (runners/ppo.py),
with the app's KL controller as its defaults."""
from __future__ import annotations

from typing import Any

from labeler.errors import InputError
from labeler.services.settings.training_stages.base import Stage
from rlhf.configs import PPOConfig

# The app's KL controller for every PPO run, unless the user sets it: beta never falls below its start and moves up
# to 20% a step, whatever the batch (horizon = batch_size, so K_beta = 1). Every run starts at KL 0, below any
# target, so the plain controller first lowers beta and then climbs back too late. Measured (40 steps, the shipped
# task, CPU with bf16): with the plain controller (horizon 512, no floor) the function-reward run's KL sat at 9-12
# from step 19 against a target of 6 (beta 0.030 -> 0.035; held-out 88% positive, KL 8.2); with these settings 5.4-7.3
# over the last 10 steps (beta 0.030 -> 0.053; held-out 91% positive, KL 6.9). Rewards from people (centred ranks)
# and the online reward model keep the same spread however good the answers get, so only the controller can hold
# their KL: with the plain controller a mix run's KL reached 22 nats by step 28.
# The horizon follows the batch because the policy moves per optimizer step, not per rollout: a batch of 16 in
# mini-batches of 4 takes as many steps as the default 64 in 16s. A fixed horizon of 64 let beta move only 5% a step
# at batch 16, and the own-task mix runs at that batch ended at KL 12.9-13.2 against the target of 9 (8.2-9.3 with a
# horizon of one batch and a chat-model reward model as their warm start, docs/YOUR_TASK.md).
def app_kl_horizon(trainer_settings: dict) -> int:
    return int(trainer_settings.get("batch_size", PPOConfig.__dataclass_fields__["batch_size"].default))


# PPO's learning rate when people's rankings reward the run (reward human or mix, human_label ranking), unless the
# user or a recipe sets one. A ranking only says which answer of a group is better, so its centred reward keeps its
# spread when every answer is good and the policy keeps moving: at PPOConfig's 6e-5 (tuned on VADER, a reward that
# saturates) five mix runs on the shipped task (3 seeds, ties within 0.05 or 0.1) were 93-100% positive on held-out
# prompts at step 30 with a training KL of 9-14 past the target of 9; the controller then raised beta to 0.15-0.50
# by step 40 and pulled them back to 69-94%. At three quarters of the rate the same sweep (6 runs, 2026-12-04,
# docs/HUMAN_LOOP.md) ended at 82-93%, KL 7.5-11.7.
PEOPLE_RANKING_LEARNING_RATE = 4.5e-5

# PPO's learning rate when a trained reward model rewards the run (reward rm), unless the user or a recipe sets one.
# Its standardised score does not saturate either, so PPOConfig's 6e-5 kept pushing: on bench/own_task.py's concise
# task (16 answers a step, 24 steps) the run at 6e-5 ended at KL 12.7 with beta rising 20% a step from step 11
# (68% against the base; 12.6 and 64% with a MiniLM reward model), while at 2e-5 the concise and formal runs won
# 80% and 83% at KL 9.4 and 10.1 (seed 0; formal at seed 1: 68% at KL 7.9; with reward models trained three
# passes, seeds 0 and 1: concise 83% and 81%, formal 79% and 76%, KL 6.0-7.5; 2026-12-06, docs/YOUR_TASK.md).
REWARD_MODEL_LEARNING_RATE = 2e-5


def app_learning_rate(job) -> float | None:
    """The app's PPO learning rate for the run's reward (None: PPOConfig's, tuned on a function reward). A mix
    run ranked by people that starts from a trained reward model (its reward_model: the newest, stored when it
    is created) takes the reward model's rate: on bench/own_task.py's tasks, such runs at 4.5e-5 won 92% and 81%
    but ran on to held-out KL 12.2 and 10.5 (reward models trained three passes, 2026-12-06, docs/YOUR_TASK.md)."""
    if job.reward == "rm":
        return REWARD_MODEL_LEARNING_RATE
    if job.reward in ("human", "mix") and job.human_label == "ranking":
        return REWARD_MODEL_LEARNING_RATE if job.reward == "mix" and job.reward_model else PEOPLE_RANKING_LEARNING_RATE
    return None


def kl_settings_for(trainer_settings: dict) -> dict:
    """The KL controller settings a PPO run gets unless the user set them (stored with the run when it is
    created: train_configs.resolve_run_config)."""
    start = trainer_settings.get("init_kl_coef", PPOConfig.__dataclass_fields__["init_kl_coef"].default)
    defaults = {"horizon": app_kl_horizon(trainer_settings), "kl_coef_min": start}
    return {name: value for name, value in defaults.items() if name not in trainer_settings}


def app_defaults(trainer_settings: dict, job) -> dict:
    """Every app default a new PPO run gets: the KL controller's, and the learning rate for its reward."""
    out = kl_settings_for(trainer_settings)
    learning_rate = app_learning_rate(job)
    if learning_rate is not None and "learning_rate" not in trainer_settings:
        out["learning_rate"] = learning_rate
    return out


def prompts_per_step(job, trainer: PPOConfig) -> int:
    return trainer.prompts_per_batch(job.answers_per_prompt)


def check(job, trainer: PPOConfig) -> None:
    """PPO's rollout rule (whole groups of answers_per_prompt per batch), checked by the library."""
    try:
        trainer.prompts_per_batch(job.answers_per_prompt)
    except ValueError as error:
        raise InputError(str(error), field="answers_per_prompt") from None


def recipe_batch(mini: int, accumulation: int) -> dict[str, Any]:
    return {"mini_batch_size": mini, "gradient_accumulation_steps": accumulation}


STAGE = Stage(
    name="ppo", order=4, config_class="rlhf.configs:PPOConfig", runner="labeler.services.training.runners.ppo:run_ppo",
    training_rows="labeler.services.training.stages:training_prompts", unit="prompts", label="Reinforce with a reward (PPO)",
    note="Generates answers, scores them with the reward below, and moves the model towards higher rewards while "
         "staying close to where it started (KL).",
    card="PPO (PPOTrainer, TRL 0.11 API)", metrics=("env/reward_mean", "objective/kl"),
    form_fields=("learning_rate", "batch_size", "mini_batch_size", "ppo_epochs", "init_kl_coef", "adap_kl_ctrl",
                 "target"),
    full_lr=3e-6, lora_lr=1.4e-5, recipe_batch=recipe_batch, samples=True, time_budget=True, value_head=True,
    frozen_rows=("prompts", "prompts"), app_defaults=app_defaults, prompts_per_step=prompts_per_step,
    check=check,
)
