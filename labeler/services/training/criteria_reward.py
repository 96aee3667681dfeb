"""A policy run's reward from several criteria: reward_spec's weighted sums and constraints as one reward source
(rlhf.constraints' WeightedReward and ConstrainedReward), each term a reward model or a function.

    reward=rm:helpful*0.7+rm:safe*0.3          PPO maximises the sum
    reward=rm:helpful,rm:safe>=0               PPO maximises helpful while safe's batch mean is held at >= 0

The run stores the combination as reward=rm with the text as reward_model (reward_spec.parse); the PPO runner
asks `combined_reward` first and falls back to the one-source rewards of runners/common.reward_source.
"""
from __future__ import annotations

from typing import Callable

from labeler.services.serving import models
from labeler.services.settings.job_settings import CONSTRAINT_LR
from labeler.services.settings.reward_spec import Combined, RewardSpec
from rlhf.rewards import FunctionReward, RewardModelReward

def label(spec: RewardSpec) -> str:
    """A term's name in the metrics: the reward model's or the function's (reward/<label>_mean)."""
    name = spec.model or spec.function or spec.source
    return name.replace(":", "_").replace("/", "_")


def build(combined: Combined, source_of: Callable[[RewardSpec], object], constraint_lr: float = CONSTRAINT_LR):
    """The reward source of a combination, each term's source made by `source_of(spec)`; `constraint_lr` is the
    multiplier's step per batch (job_settings.RewardSettings.constraint_lr)."""
    from rlhf.constraints import ConstrainedReward, WeightedReward

    reward = WeightedReward([(label(spec), source_of(spec), weight) for spec, weight in combined.terms])
    if combined.constraint is None:
        return reward
    constraint = combined.constraint
    return ConstrainedReward(reward, source_of(constraint.spec), constraint.threshold, constraint_lr,
                             name=label(constraint.spec))


def combined_reward(db, job):
    """The run's combined reward source, or None when its reward is one source (runners/common.reward_source's)."""
    combined = RewardSpec(job.reward, model=job.reward_model or "").combined if job.reward == "rm" else None
    if combined is None:
        return None

    def source_of(spec: RewardSpec):
        if spec.source == "function":
            return FunctionReward.from_spec(spec.function)
        import torch

        # As a single reward model is loaded (common.reward_source): standardised, in bf16 when the run is.
        path = models.resolve(db, spec.model or models.newest(db, "reward"))
        return RewardModelReward.from_pretrained(path, job.subtract_query_score, score_std=job.rm_score_std,
                                                 dtype=torch.bfloat16 if job.bf16 else None)
    return build(combined, source_of, job.constraint_lr)
