"""Rewards from several criteria: a weighted sum (TRL's `reward_weights`) or one criterion under a constraint on
another (Safe RLHF, Dai et al. 2023: maximise the reward subject to E[constraint score] >= threshold, through a
Lagrange multiplier that grows while the constraint is broken and shrinks to 0 once it holds).

Pure functions of tensors and floats; a trainer keeps the multiplier and logs it.
"""
from __future__ import annotations

from typing import Sequence

import torch


def weighted_rewards(scores: torch.Tensor, weights: Sequence[float]) -> torch.Tensor:
    """scores (C, B): each criterion's score of B answers; weights: C floats. Returns (B,) sum_c w_c * s_c."""
    if scores.dim() != 2 or scores.shape[0] != len(weights):
        raise ValueError(f"scores must be (criteria, batch) with one row per weight: got {tuple(scores.shape)} "
                         f"for {len(weights)} weights")
    return (torch.as_tensor(weights, dtype=scores.dtype, device=scores.device)[:, None] * scores).sum(dim=0)


def lagrangian_rewards(reward: torch.Tensor, constraint: torch.Tensor, threshold: float,
                       multiplier: float) -> torch.Tensor:
    """The reward a policy maximises under `constraint >= threshold` (both (B,)): R + lambda * (C - threshold),
    divided by (1 + lambda) so its scale stays that of one reward however large lambda grows (Safe RLHF's
    normalised objective)."""
    if multiplier < 0:
        raise ValueError(f"a Lagrange multiplier is never negative, got {multiplier}")
    return (reward + multiplier * (constraint - threshold)) / (1.0 + multiplier)


def update_multiplier(multiplier: float, constraint_mean: float, threshold: float, learning_rate: float) -> float:
    """One step of gradient descent on the dual: lambda <- max(0, lambda - lr * (E[C] - threshold)). A broken
    constraint (mean below the threshold) raises lambda; one that holds lowers it, never below 0."""
    return max(0.0, multiplier - learning_rate * (constraint_mean - threshold))
