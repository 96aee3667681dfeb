"""Reward functions for the evaluation tests, importable as `eval_rewards:NAME` (tests/services is on the path)."""
from __future__ import annotations


def words(prompts, answers) -> list[float]:
    """Words in the answer / 4: a reward whose value the test can recompute from the stored answers."""
    return [len(answer.split()) / 4 for answer in answers]


NOT_A_FUNCTION = 3


def chars(prompts, answers) -> list[float]:
    """Characters in the answer: a second measure of the same answers."""
    return [float(len(answer)) for answer in answers]
