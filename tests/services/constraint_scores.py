"""Reward functions with known values for the constraint resume test, importable as `constraint_scores:NAME`
(tests/services is on the path)."""
from __future__ import annotations


def minus_one(prompts, answers) -> list[float]:
    """-1 for every answer: a constraint `>=0` broken by exactly 1 on every batch, whatever the policy says."""
    return [-1.0 for _ in answers]


def zero(prompts, answers) -> list[float]:
    return [0.0 for _ in answers]


def by_rank(prompts, answers) -> list[float]:
    """The process's rank (RANK, as accelerate launch sets it) for every answer: two ranks that hold a constraint
    at the base's level each measure their own (0 and 1) unless they agree on the whole batch's (0.5)."""
    import os

    return [float(os.environ.get("RANK", "0")) for _ in answers]
