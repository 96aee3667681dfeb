"""The verdict's statistics (rlhf/stats.py), against hand-worked values."""
from __future__ import annotations

import random

import pytest

from rlhf.stats import all_pairs_share, clustered_interval, effective_trials, verdict_word, wilson_interval


def test_wilson_interval_by_hand():
    # 5 of 10: z = 1.96, z^2 = 3.8416; denominator 1 + 3.8416/10 = 1.38416; centre (0.5 + 0.19208)/1.38416 = 0.5;
    # half 1.96 * sqrt(0.25/10 + 3.8416/400)/1.38416 = 1.96 * sqrt(0.034604)/1.38416 = 0.263410 -> [0.2366, 0.7634]
    assert wilson_interval(0.5, 10) == pytest.approx((0.236590, 0.763410), abs=1e-6)
    # an effective, non-integer number of trials is taken as it is: n = 18 at 0.75 (see below)
    assert wilson_interval(0.75, 18.0) == pytest.approx((0.519182, 0.892876), abs=1e-6)
    assert wilson_interval(0.3, 0) == (0.0, 1.0)


def test_all_pairs_share_by_hand():
    # model [1, 2] vs base [1.5, 2]: 1<1.5 lost, 1<2 lost, 2>1.5 won, 2=2 tie -> (0 + 0 + 1 + 0.5) / 4 = 0.375
    assert all_pairs_share([1.0, 2.0], [1.5, 2.0]) == 0.375
    # one answer each is the single comparison
    assert all_pairs_share([3.0], [1.0]) == 1.0 and all_pairs_share([1.0], [1.0]) == 0.5
    with pytest.raises(ValueError, match="at least one"):
        all_pairs_share([], [1.0])


def test_all_pairs_share_does_not_depend_on_the_answers_order():
    rng = random.Random(0)
    model, base = [rng.random() for _ in range(4)], [rng.random() for _ in range(4)]
    shuffled = list(reversed(model))
    assert all_pairs_share(shuffled, base) == all_pairs_share(model, base)
    # equals the float loop over every pair, written out
    loop = 0.0
    for a in model:
        for b in base:
            loop += 1.0 if a > b else (0.5 if a == b else 0.0)
    assert all_pairs_share(model, base) == pytest.approx(loop / 16)


def test_effective_trials_and_the_clustered_interval_by_hand():
    # shares 0.5, 1, 0.75, 0.75: mean 0.75; sample variance ((-0.25)^2 + 0.25^2 + 0 + 0) / 3 = 0.041667;
    # the mean's variance 0.041667 / 4 = 0.0104167; p(1 - p) = 0.1875 -> 0.1875 / 0.0104167 = 18 trials
    shares = [0.5, 1.0, 0.75, 0.75]
    assert effective_trials(shares, 64) == pytest.approx(18.0)
    low, high = clustered_interval(shares, 64)
    assert (low, high) == pytest.approx((0.519182, 0.892876), abs=1e-6)
    # Counting the 4 prompts as 4 coin flips (Wilson over prompts, the old interval) says far less:
    old_low, old_high = wilson_interval(0.75, 4)
    assert old_low < 0.31 and old_high > 0.95 and high - low < (old_high - old_low) / 1.7
    assert verdict_word(low, high) == "better" and verdict_word(old_low, old_high) == "undecided"
    # bounded by the pairs compared
    assert effective_trials(shares, 10) == 10.0


def test_effective_trials_edge_cases():
    assert effective_trials([1.0, 1.0, 1.0], 48) == 3.0  # every prompt won: about the prompts, no more
    assert effective_trials([0.0, 0.0], 32) == 2.0
    assert effective_trials([0.75, 0.75, 0.75], 48) == 48.0  # every prompt 12 of 16: every pair counts
    assert effective_trials([0.4], 16) == 1.0
    assert clustered_interval([], 0) == (0.0, 1.0)
    # prompts all won or all lost by their answers (shares 0 or 1) are worth n trials: the old interval
    assert effective_trials([1.0, 0.0, 1.0, 1.0], 64) == pytest.approx(0.1875 * 4 / 0.25)  # = 3: variance 1/4


def test_verdict_word():
    assert verdict_word(0.55, 0.8) == "better"
    assert verdict_word(0.2, 0.45) == "worse"
    assert verdict_word(0.4, 0.6) == "undecided"
    assert verdict_word(0.5, 0.7) == "undecided"  # touching 50% decides nothing
