"""The reward model: a scorer trained on preference pairs (rlhf.reward's RewardTrainer)."""
from __future__ import annotations

from labeler.services.settings.training_stages.base import Stage, fitted_max_length

# Passes over the pairs unless the run sets steps or num_train_epochs: TRL's (and TrainingArguments') default.
# Ouyang et al. 2022 trained one epoch on tens of thousands of comparisons; a team's few hundred are another
# matter. On bench/own_task.py's formal task (about 300 training pairs from 320 judged answers, the chat model),
# one pass ordered 67% of the judge's pairs of held-out answers as the judge does, two 73%, three 77% (4085 pairs,
# bench/reward_vs_judge.py; concise: one 80%, three 84%); PPO from the one-pass model won 69% against the base,
# from the three-pass one 79% and 76% (seeds 0, 1; 2026-12-06, docs/YOUR_TASK.md).
REWARD_MODEL_PASSES = 3.0


STAGE = Stage(
    name="rm", order=2, config_class="rlhf.reward:RewardConfig", runner="labeler.services.training.runners.offline:run_rm",
    training_rows="labeler.services.training.stages:rm_rows", unit="pairs", label="Reward model",
    note="Trains a scorer on the rankings (and, if you like, the ratings): the reward that PPO, GRPO and RLOO use.",
    card="reward modelling (RewardTrainer)", metrics=("loss", "accuracy"),
    form_fields=("learning_rate", "per_device_train_batch_size", "max_length", "center_rewards_coefficient"),
    full_lr=1e-5, lora_lr=1e-4, aka="reward model", default_model="default", answers=False,
    app_defaults=fitted_max_length,  # max_length: the prompt budget + the project's answer length
    frozen_rows=("train_rows", "preferences"), default_passes=REWARD_MODEL_PASSES,
    sequences_per_row=2, logit_tokens="none",  # pairs, scored by a scalar head
)
