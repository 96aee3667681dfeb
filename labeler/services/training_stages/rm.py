"""The reward model: a scorer trained on preference pairs (rlhf.reward's RewardTrainer)."""
from __future__ import annotations

from labeler.services.export import preference_rows, training_options
from labeler.services.training_stages.base import Stage


def rows(db, project: str, job, **options) -> list[dict]:
    """Preference pairs: rankings (and, with include_rating_pairs, ratings of two answers to a prompt)."""
    return preference_rows(db, project, training_options(job, **options))


STAGE = Stage(
    name="rm", config_class="rlhf.reward:RewardConfig", runner="labeler.services.runners.offline:run_rm", rows=rows,
    unit="pairs", label="Reward model",
    note="Trains a scorer on the rankings (and, if you like, the ratings): the reward that PPO, GRPO and RLOO use.",
    card="reward modelling (RewardTrainer)", metrics=("loss", "accuracy"),
    form_fields=("learning_rate", "per_device_train_batch_size", "max_length", "center_rewards_coefficient"),
    full_lr=1e-5, lora_lr=1e-4, aka="reward model", default_model="default", answers=False,
    frozen_rows=("train_rows", "preferences"), default_passes=1.0,  # one epoch, as Ouyang et al. 2022 train theirs
)
