"""Bradley-Terry, Elo and the bootstrap, against hand-computed values and simulated votes."""
from __future__ import annotations

import math
import random

import pytest

from labeler.services.serving.leaderboard import bootstrap_ci, bradley_terry, elo, split_votes, to_elo_scale


def test_bradley_terry_two_players_by_hand():
    # A beats B 3 times, B beats A once. The MLE sets p_A / (p_A + p_B) = 3/4, so p_A / p_B = 3;
    # with the geometric mean pinned to 1: p_A = sqrt(3) = 1.7320508, p_B = 1/sqrt(3) = 0.5773503.
    p = bradley_terry([("A", "B")] * 3 + [("B", "A")], prior=0)
    assert p == pytest.approx({"A": math.sqrt(3), "B": 1 / math.sqrt(3)}, rel=1e-6)
    # A tie is half a win each: 1 win + 1 tie for A gives scores 1.5 vs 0.5, the same ratio of 3.
    assert bradley_terry([("A", "B")], ties=[("A", "B")], prior=0) == pytest.approx(p, rel=1e-6)
    # On the Elo scale a ratio of 3 is 400 * log10(3) = 190.85 points.
    assert to_elo_scale(p["A"]) - to_elo_scale(p["B"]) == pytest.approx(190.848, abs=1e-3)


def test_prior_is_a_map_estimate_by_hand():
    # One win of A over B with prior 2 (two virtual games, one won, against a strength-1 opponent each).
    # By symmetry p_B = 1/p_A = 1/x, and A's score equation is: wins + prior/2 = expected wins, i.e.
    # 1 + 1 = x / (x + 1/x) + 2 * x / (x + 1). At x = 1.6956: 0.7419 + 1.2581 = 2.0000.
    p = bradley_terry([("A", "B")], prior=2.0)
    x = p["A"]
    assert x == pytest.approx(1.6956, abs=1e-4) and p["B"] == pytest.approx(1 / x)
    assert x / (x + 1 / x) + 2 * x / (x + 1) == pytest.approx(2.0, abs=1e-8)


def test_prior_keeps_an_unbeaten_model_finite():
    p = bradley_terry([("A", "B")] * 5)
    assert math.isfinite(p["A"]) and p["A"] > p["B"]
    # The prior shrinks towards equal strength: fewer votes, smaller gap.
    assert bradley_terry([("A", "B")])["A"] < p["A"]


def test_bradley_terry_recovers_simulated_strengths():
    truth = {"big": 8.0, "mid": 2.0, "small": 1.0}
    rng = random.Random(0)
    names = list(truth)
    wins = []
    for _ in range(6000):
        a, b = rng.sample(names, 2)
        wins.append((a, b) if rng.random() < truth[a] / (truth[a] + truth[b]) else (b, a))
    p = bradley_terry(wins, prior=0)
    assert sorted(p, key=p.get, reverse=True) == ["big", "mid", "small"]
    # Ratios within 10% of the true 8:2:1.
    assert p["big"] / p["small"] == pytest.approx(8.0, rel=0.1)
    assert p["mid"] / p["small"] == pytest.approx(2.0, rel=0.1)


def test_elo_three_matches_by_hand():
    # k=32, all start at 1000.
    # 1. A beats B: expected 0.5, delta = 32 * 0.5 = 16 -> A 1016, B 984.
    # 2. A ties C: E_A = 1 / (1 + 10^((1000 - 1016)/400)) = 1 / (1 + 0.912011) = 0.523009;
    #    delta = 32 * (0.5 - 0.523009) = -0.736307 -> A 1015.263693, C 1000.736307.
    # 3. C beats B: E_C = 1 / (1 + 10^((984 - 1000.736307)/400)) = 1 / (1 + 0.908153) = 0.524067;
    #    delta = 32 * (1 - 0.524067) = 15.229860 -> C 1015.966167, B 968.770140.
    ratings = elo([("A", "B", 1.0), ("A", "C", 0.5), ("C", "B", 1.0)])
    assert ratings == pytest.approx({"A": 1015.263693, "B": 968.770140, "C": 1015.966167}, abs=1e-5)
    # Elo is zero-sum: the total stays 3 * 1000.
    assert sum(ratings.values()) == pytest.approx(3000.0)


def test_split_votes_and_bootstrap_interval():
    votes = [("A", "B", "a")] * 30 + [("A", "B", "b")] * 10 + [("A", "B", "tie"), ("B", "A", "both_bad")]
    wins, ties = split_votes(votes)
    assert len(wins) == 40 and wins.count(("B", "A")) == 10 and ties == [("A", "B"), ("B", "A")]
    intervals = bootstrap_ci(votes, n=100, seed=1)
    point = {m: to_elo_scale(s) for m, s in bradley_terry(wins, ties).items()}
    for model in ("A", "B"):
        low, high = intervals[model]
        assert low <= point[model] <= high and high - low > 10
    assert intervals["A"][0] > intervals["B"][1]  # 30:10 is a clear, significant gap
    assert bootstrap_ci(votes, n=100, seed=1) == intervals  # seeded: reproducible
    with pytest.raises(ValueError):
        split_votes([("A", "B", "c")])
