"""Arena leaderboard: Bradley-Terry strengths, Elo, bootstrap confidence intervals.

The fits are pure functions of vote lists; `leaderboard(db, project)` reads the votes and calls them.
Bradley-Terry (P(i beats j) = p_i / (p_i + p_j)) is fitted with Hunter's MM algorithm (Hunter 2004,
"MM algorithms for generalized Bradley-Terry models", eq. 3). Unlike Elo it does not depend on the order
of the votes, which is why Chatbot Arena moved to it; Elo is kept as the familiar running number.
Scores are shown on the Elo scale: 400 * log10(p) + 1000, so a 400-point gap means 10:1 odds.
"""
from __future__ import annotations

import math
import random
import threading
from collections import defaultdict
from typing import Iterable, Sequence

import sqlite_utils

from labeler.services.serving.arena import voted_battles
from labeler.services.data.projects import get_project

Vote = tuple[str, str, str]  # (model_a, model_b, winner: 'a' | 'b' | 'tie' | 'both_bad')
SCALE, BASE_SCORE = 400.0, 1000.0


def bradley_terry(
    wins: Sequence[tuple[str, str]],
    ties: Sequence[tuple[str, str]] = (),
    prior: float = 2.0,
    iters: int = 1000,
    tol: float = 1e-10,
) -> dict[str, float]:
    """Strengths p (geometric mean 1) from (winner, loser) pairs and tied pairs.

    A tie counts as half a win for each side. `prior` adds that many virtual ties between every model and
    a virtual opponent of strength 1, so a model that won (or lost) every game still gets a finite strength
    and a model seen once does not jump to an extreme (with 2, one win is a 183-point lead, ten wins 479);
    0 gives the plain maximum-likelihood fit.
    """
    players = sorted({m for pair in [*wins, *ties] for m in pair})
    if not players:
        return {}
    score = defaultdict(float)  # W_i: wins, ties as halves
    games = defaultdict(float)  # n_ij: games between i and j, both orders
    for winner, loser in wins:
        score[winner] += 1.0
        games[winner, loser] += 1.0
        games[loser, winner] += 1.0
    for a, b in ties:
        score[a] += 0.5
        score[b] += 0.5
        games[a, b] += 1.0
        games[b, a] += 1.0
    opponents = defaultdict(list)
    for (i, j), n in games.items():
        opponents[i].append((j, n))
    p = {m: 1.0 for m in players}
    for _ in range(iters):
        new = {}
        for i in players:
            # MM update: p_i <- W_i / sum_j n_ij / (p_i + p_j); the prior is `prior` games against p = 1
            # of which half were won.
            denominator = sum(n / (p[i] + p[j]) for j, n in opponents[i]) + prior / (p[i] + 1.0)
            new[i] = (score[i] + prior / 2) / denominator if denominator > 0 else p[i]
        if prior == 0:
            # Without the virtual opponent only ratios are identified: pin the scale while iterating.
            new = _unit_geometric_mean(new)
        change = max(abs(math.log(new[m]) - math.log(p[m])) for m in players)
        p = new
        if change < tol:
            break
    # Only ratios are reported: the geometric mean is set to 1 at the end.
    return _unit_geometric_mean(p)


def _unit_geometric_mean(strengths: dict[str, float]) -> dict[str, float]:
    log_mean = sum(math.log(v) for v in strengths.values()) / len(strengths)
    return {m: v / math.exp(log_mean) for m, v in strengths.items()}


def to_elo_scale(strength: float) -> float:
    return SCALE * math.log10(strength) + BASE_SCORE


def split_votes(votes: Iterable[Vote]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Votes as (winner, loser) pairs and tied pairs; both_bad is a tie (neither answer preferred)."""
    wins, ties = [], []
    for model_a, model_b, winner in votes:
        if winner == "a":
            wins.append((model_a, model_b))
        elif winner == "b":
            wins.append((model_b, model_a))
        elif winner in ("tie", "both_bad"):
            ties.append((model_a, model_b))
        else:
            raise ValueError(f"winner must be a, b, tie or both_bad, got {winner!r}")
    return wins, ties


def elo(matches: Iterable[tuple[str, str, float]], k: float = 32.0, initial: float = 1000.0) -> dict[str, float]:
    """Sequential Elo over (a, b, score of a: 1 win, 0.5 tie, 0 loss), in the given order."""
    rating: dict[str, float] = defaultdict(lambda: initial)
    for a, b, score_a in matches:
        expected_a = 1.0 / (1.0 + 10 ** ((rating[b] - rating[a]) / 400.0))
        delta = k * (score_a - expected_a)
        rating[a] += delta
        rating[b] -= delta
    return dict(rating)


def votes_to_matches(votes: Iterable[Vote]) -> list[tuple[str, str, float]]:
    return [(a, b, {"a": 1.0, "b": 0.0}.get(winner, 0.5)) for a, b, winner in votes]


def bootstrap_ci(
    votes: Sequence[Vote], n: int = 200, seed: int = 0, alpha: float = 0.05, prior: float = 2.0
) -> dict[str, tuple[float, float]]:
    """Percentile interval of each model's Bradley-Terry score (Elo scale) over `n` resamples of the votes."""
    rng = random.Random(seed)
    samples: dict[str, list[float]] = defaultdict(list)
    for _ in range(n):
        resampled = [votes[rng.randrange(len(votes))] for _ in votes]
        for model, strength in bradley_terry(*split_votes(resampled), prior=prior, iters=200).items():
            samples[model].append(to_elo_scale(strength))
    intervals = {}
    for model, values in samples.items():
        values.sort()
        # A model missing from some resamples still gets an interval from the resamples it was in.
        low = values[int(math.floor(alpha / 2 * (len(values) - 1)))]
        high = values[int(math.ceil((1 - alpha / 2) * (len(values) - 1)))]
        intervals[model] = (low, high)
    return intervals


def arena_votes(db: sqlite_utils.Database, project: str = "default") -> list[Vote]:
    """Every voted battle of the project, oldest first."""
    return voted_battles(db, get_project(db, project).id)


# A bootstrap interval over a handful of votes is not an interval: after one vote every resample is that same
# vote and ci_low == ci_high, which reads as certainty. Below this many votes of a model its interval is None.
MIN_VOTES_FOR_INTERVAL = 10


class LeaderboardCache:
    """What `leaderboard` may reuse between calls; owned by the app (one per Arena tab), never a module global.

    The bootstrap (200 refits) grows with the votes (0.3 s at 500 votes on 2 cores) and ran on every vote and
    every page load, for every user. Now: the board of an unchanged vote list is returned as it is (page loads,
    refreshes), and after new votes the scores and Elo are refitted (milliseconds) while the intervals of the
    last bootstrap are kept until the votes have grown by `refresh_fraction`: 200 resamples barely move with one
    more vote. A new model, fewer votes than before (a vote removed) or other settings refit them at once.
    """

    def __init__(self, refresh_fraction: float = 0.05):
        self.refresh_fraction = refresh_fraction
        self._boards: dict[tuple, tuple[tuple, list[dict]]] = {}  # (project, settings) -> (votes, rows)
        self._intervals: dict[tuple, tuple[int, dict]] = {}  # (project, settings) -> (number of votes, intervals)
        self._lock = threading.Lock()

    def board(self, key: tuple, votes: tuple) -> list[dict] | None:
        with self._lock:
            cached = self._boards.get(key)
        return [dict(row) for row in cached[1]] if cached and cached[0] == votes else None

    def store_board(self, key: tuple, votes: tuple, rows: list[dict]) -> None:
        with self._lock:
            self._boards[key] = (votes, [dict(row) for row in rows])

    def intervals(self, key: tuple, n_votes: int, needed: set[str]) -> dict | None:
        with self._lock:
            cached = self._intervals.get(key)
        if cached is None:
            return None
        n_cached, intervals = cached
        fresh = n_cached <= n_votes < n_cached * (1 + self.refresh_fraction)
        return intervals if fresh and needed <= set(intervals) else None

    def store_intervals(self, key: tuple, n_votes: int, intervals: dict) -> None:
        with self._lock:
            self._intervals[key] = (n_votes, dict(intervals))


def leaderboard(
    db: sqlite_utils.Database,
    project: str = "default",
    n_bootstrap: int = 200,
    seed: int = 0,
    min_votes_for_interval: int = MIN_VOTES_FOR_INTERVAL,
    cache: LeaderboardCache | None = None,
) -> list[dict]:
    """Models by Bradley-Terry score, best first: model, bt_score, ci_low, ci_high, elo, votes.

    ci_low and ci_high are None for a model with fewer than `min_votes_for_interval` votes. With a `cache`, an
    unchanged vote list costs one query and the bootstrap is not rerun for every new vote (LeaderboardCache).
    """
    votes = arena_votes(db, project)
    if not votes:
        return []
    key = (project, n_bootstrap, seed, min_votes_for_interval)
    if cache is not None and (rows := cache.board(key, tuple(votes))) is not None:
        return rows
    strengths = bradley_terry(*split_votes(votes))
    ratings = elo(votes_to_matches(votes))
    counts: dict[str, int] = defaultdict(int)
    for a, b, _ in votes:
        counts[a] += 1
        counts[b] += 1
    # The bootstrap (200 refits) only when some interval will be shown, and not again for a few more votes.
    shown = {model for model, n in counts.items() if n >= min_votes_for_interval}
    intervals = {}
    if shown:
        intervals = cache.intervals(key, len(votes), shown) if cache is not None else None
        if intervals is None:
            intervals = bootstrap_ci(votes, n=n_bootstrap, seed=seed)
            if cache is not None:
                cache.store_intervals(key, len(votes), intervals)

    def bound(model: str, side: int) -> float | None:
        return round(intervals[model][side], 1) if counts[model] >= min_votes_for_interval else None

    rows = [
        {
            "model": model,
            "bt_score": round(to_elo_scale(strength), 1),
            "ci_low": bound(model, 0),
            "ci_high": bound(model, 1),
            "elo": round(ratings[model], 1),
            "votes": counts[model],
        }
        for model, strength in strengths.items()
    ]
    rows = sorted(rows, key=lambda row: (-row["bt_score"], row["model"]))
    if cache is not None:
        cache.store_board(key, tuple(votes), rows)
    return rows
