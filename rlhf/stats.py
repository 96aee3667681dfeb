"""The verdict's statistics, as pure functions of floats (stdlib only, so the command line and the web app read a
run's verdict without loading torch): Wilson's interval of a proportion, the all-pairs win share of each prompt,
and the interval of a win rate measured over prompts whose answers are compared in clusters.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class WinRate:
    rate: float  # share of comparisons the model won, ties counted half
    low: float  # 95% interval (Wilson score, over prompts)
    high: float
    wins: int
    ties: int
    losses: int
    prompts: int


def wilson_interval(rate: float, n: float, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a proportion `rate` over `n` independent trials (Wilson 1927): unlike rate +- z*se
    it stays inside [0, 1] and is not of zero width at 0% or 100%. (0, 1) for n = 0. `n` may be an effective
    (non-integer) number of trials (`clustered_interval`)."""
    if n <= 0:
        return 0.0, 1.0
    denominator = 1 + z * z / n
    centre = (rate + z * z / (2 * n)) / denominator
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def all_pairs_share(scores: Sequence[float], base_scores: Sequence[float]) -> float:
    """One prompt's win share: every answer of the model against every answer of its base to that prompt, a win
    1, a tie 1/2, averaged over the len(scores) x len(base_scores) pairs. With k answers each this uses k*k
    comparisons where answer i against answer i used k, and it does not depend on the order answers came in."""
    if not scores or not base_scores:
        raise ValueError("all_pairs_share: both models need at least one scored answer to the prompt")
    total = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in scores for b in base_scores)
    return total / (len(scores) * len(base_scores))


def effective_trials(shares: Sequence[float], comparisons: int) -> float:
    """How many independent win/loss trials the per-prompt win shares are worth (Kish's design effect): a mean of
    n shares whose sample variance is s^2 is as certain as p(1 - p) / (s^2 / n) coin flips of rate p. Prompts
    whose answers win some and lose some (shares near the mean) count for more than n; shares of only 0 or 1 (the
    answers of a prompt all alike) count for about n, as one comparison per prompt would. Bounded by `comparisons`
    (all pairs compared over all prompts) and by n when every prompt was won or every one lost (s^2 = 0 there
    says nothing about the prompts not seen)."""
    n = len(shares)
    if n < 2:
        return float(n)
    mean = sum(shares) / n
    variance = sum((s - mean) ** 2 for s in shares) / (n - 1)
    binomial = mean * (1 - mean)
    if binomial == 0:
        return float(n)
    if variance == 0:
        return float(comparisons)
    return min(float(comparisons), binomial * n / variance)


def clustered_interval(shares: Sequence[float], comparisons: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% interval of the mean win share over prompts: Wilson's at the shares' effective number of trials."""
    if not shares:
        return 0.0, 1.0
    return wilson_interval(sum(shares) / len(shares), effective_trials(shares, comparisons), z)


def verdict_word(low: float, high: float, even: float = 0.5) -> str:
    """'better' when the whole interval is above 50%, 'worse' when below, else 'undecided'."""
    if low > even:
        return "better"
    if high < even:
        return "worse"
    return "undecided"
