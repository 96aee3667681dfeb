"""Rewards from several criteria: a weighted sum (TRL's `reward_weights`) or one criterion under a constraint on
another (Safe RLHF, Dai et al. 2023: maximise the reward subject to E[constraint score] >= threshold, through a
Lagrange multiplier that grows while the constraint is broken and shrinks to 0 once it holds).

Pure functions of tensors and floats; a trainer keeps the multiplier and logs it.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

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


# ---- reward sources (rlhf.rewards' protocol: (queries, responses) -> scores, with last_stats) --------------------

def _scored(source, queries: Sequence[str], responses: Sequence[str]) -> list:
    scores = list(source(queries, responses))
    if len(scores) != len(queries):
        raise ValueError(f"a reward source gave {len(scores)} scores for {len(queries)} answers")
    return scores


class WeightedReward:
    """sum_c w_c * source_c(answer): several criteria's reward models (or functions) as one reward. An answer any
    source left unscored (None) gets None: a sum missing a criterion is not that sum."""

    def __init__(self, sources: Sequence[tuple[str, object, float]]):
        """sources: (name, source, weight) per criterion; the name labels its metric reward/<name>_mean."""
        if not sources:
            raise ValueError("a weighted reward needs at least one source")
        self.names = [name for name, _, _ in sources]
        self.sources = [source for _, source, _ in sources]
        self.weights = [float(weight) for _, _, weight in sources]
        self.last_stats: dict[str, float] = {}

    def __call__(self, queries: Sequence[str], responses: Sequence[str]) -> list:
        per_source = [_scored(source, queries, responses) for source in self.sources]  # (C, B), maybe None
        complete = [i for i in range(len(queries)) if all(scores[i] is not None for scores in per_source)]
        out: list = [None] * len(queries)
        if complete:
            table = torch.tensor([[float(scores[i]) for i in complete] for scores in per_source], dtype=torch.float64)
            for i, value in zip(complete, weighted_rewards(table, self.weights).tolist()):
                out[i] = value
        self.last_stats = {"reward/count": float(len(complete))}
        for name, scores in zip(self.names, per_source):
            present = [s for s in scores if s is not None]
            if present:
                self.last_stats[f"reward/{name}_mean"] = sum(present) / len(present)
        if complete:
            self.last_stats["reward/mean"] = sum(out[i] for i in complete) / len(complete)
        return out


class ConstrainedReward:
    """Safe RLHF's reward under a constraint: each batch first moves the multiplier on that batch's constraint
    mean (update_multiplier), then scores with it (lagrangian_rewards), so a broken constraint weighs on the very
    batch that broke it. The multiplier lives here, is logged as reward/lagrange_multiplier and goes into a run's
    checkpoints through state_dict / load_state_dict: a resumed run goes on from the multiplier it had saved, not
    from 0 (which would let a constraint the run had learnt to respect be broken again for as many batches as
    it took to rise).

    `threshold=None` holds the constraint at the base's own level: the mean of the first batch scored (answers of
    the policy before its first update) becomes the threshold, logged as reward/constraint_threshold and kept in
    the state. A fixed number means a level on the source's scale; for a reward model standardised on its training
    answers 0 is their mean, which is not the base's mean under the run's own sampling (bench/criteria_conflict.py:
    the base's first batch scored 0.10 there, and a run held at 0 let the criterion fall below the base)."""

    def __init__(self, reward, constraint, threshold: float | None, learning_rate: float = 0.1,
                 multiplier: float = 0.0, name: str = "constraint"):
        if learning_rate <= 0:
            raise ValueError(f"the multiplier's learning_rate must be above 0, got {learning_rate}")
        if multiplier < 0:
            raise ValueError(f"a Lagrange multiplier is never negative, got {multiplier}")
        self.reward, self.constraint, self.name = reward, constraint, name
        self.threshold = None if threshold is None else float(threshold)
        self.at_base = threshold is None  # the threshold is measured on the first batch, and saved with the state
        self.learning_rate, self.multiplier = float(learning_rate), float(multiplier)
        self.last_stats: dict[str, float] = {}
        # Under several processes (synchronise): the multiplier all ranks agreed on at the last step, and this
        # rank's constraint scores since then (their sum and count).
        self.agreed_multiplier = self.multiplier
        self.threshold_agreed = not self.at_base
        self.pending_sum, self.pending_count = 0.0, 0

    def state_dict(self) -> dict[str, float]:
        """What a resume needs (plain floats: JSON): the multiplier, and a threshold measured on the base (a fixed
        one and the learning rate are the run's settings)."""
        state = {"lagrange_multiplier": self.multiplier}
        if self.at_base and self.threshold is not None:
            state["constraint_threshold"] = self.threshold
        return state

    def load_state_dict(self, state: dict) -> None:
        multiplier = float(state["lagrange_multiplier"])
        if not multiplier >= 0:  # also refuses NaN
            raise ValueError(f"a saved Lagrange multiplier must be a number >= 0, got {multiplier}")
        threshold = state.get("constraint_threshold")
        if threshold is not None and not math.isfinite(float(threshold)):
            raise ValueError(f"a saved constraint threshold must be a finite number, got {threshold}")
        self.multiplier = self.agreed_multiplier = multiplier
        if self.at_base and threshold is not None:
            self.threshold = float(threshold)
            self.threshold_agreed = True

    def __call__(self, queries: Sequence[str], responses: Sequence[str]) -> list:
        reward = _scored(self.reward, queries, responses)
        constraint = _scored(self.constraint, queries, responses)
        complete = [i for i in range(len(queries)) if reward[i] is not None and constraint[i] is not None]
        out: list = [None] * len(queries)
        stats = dict(getattr(self.reward, "last_stats", {}))
        if complete:
            c = torch.tensor([float(constraint[i]) for i in complete], dtype=torch.float64)
            r = torch.tensor([float(reward[i]) for i in complete], dtype=torch.float64)
            if self.threshold is None:  # the first batch: the base's own answers set the level to hold
                self.threshold = float(c.mean())
            self.multiplier = update_multiplier(self.multiplier, float(c.mean()), self.threshold, self.learning_rate)
            self.pending_sum += float(c.sum())
            self.pending_count += len(complete)
            for i, value in zip(complete, lagrangian_rewards(r, c, self.threshold, self.multiplier).tolist()):
                out[i] = value
            stats[f"reward/{self.name}_mean"] = float(c.mean())
            stats["reward/constraint_satisfied"] = float(c.mean() >= self.threshold)
        stats["reward/lagrange_multiplier"] = self.multiplier
        if self.threshold is not None:
            stats["reward/constraint_threshold"] = self.threshold
        self.last_stats = stats
        return out

    def synchronise(self, sum_over_ranks: Callable[[list[float]], list[float]]) -> None:
        """Under several processes, after every training step (a collective: every rank calls it at the same
        point): the multiplier becomes the one Safe RLHF's update gives on the whole step's batch, the mean of the
        constraint over every rank's answers scored since the last step (`sum_over_ranks` sums a list of floats
        over ranks), from the multiplier all ranks agreed on then; a threshold at the base's level becomes the
        mean over every rank's first batch. Within a step each rank scores with its own provisional update (a
        rank cannot wait for the others' answers inside the rollout stream, whose refills differ per rank); from
        the next step on, every rank scores with the same multiplier and threshold, the ones a checkpoint saves.
        One process does not call it: its batch is the whole batch."""
        total, count = sum_over_ranks([self.pending_sum, float(self.pending_count)])
        self.pending_sum, self.pending_count = 0.0, 0
        if count <= 0:
            return
        mean = total / count
        if not self.threshold_agreed:
            self.threshold, self.threshold_agreed = mean, True
        self.multiplier = self.agreed_multiplier = update_multiplier(self.agreed_multiplier, mean, self.threshold,
                                                                     self.learning_rate)
