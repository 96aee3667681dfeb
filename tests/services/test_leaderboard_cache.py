"""The leaderboard's cache (issue 10 item 8): the bootstrap ran 200 refits on every vote and page load."""
from __future__ import annotations

import random

import pytest

from labeler.services.serving import leaderboard as lb
from storage import write_transaction


def _votes(db, winners: list[tuple[str, str, str]]) -> None:
    with write_transaction(db):
        if not db.execute("SELECT 1 FROM prompts").fetchone():
            db.execute("INSERT INTO prompts (project_id, text, text_hash) VALUES (1, 'p', 'h')")
            for text in ("x", "y"):
                db.execute("INSERT INTO responses (prompt_id, text, model) VALUES (1, ?, 'm')", [text])
        for a, b, winner in winners:
            db.execute("INSERT INTO battles (project_id, prompt_id, model_a, model_b, response_a, response_b, winner,"
                       " voted_at) VALUES (1, 1, ?, ?, 1, 2, ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
                       [a, b, winner])


def _random_votes(n: int, seed: int, models=("one", "two", "three")) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    return [(*rng.sample(models, 2), rng.choice(["a", "a", "b", "tie"])) for _ in range(n)]


@pytest.fixture
def bootstraps(monkeypatch):
    calls = []
    real = lb.bootstrap_ci

    def counting(votes, **kwargs):
        calls.append(len(votes))
        return real(votes, **kwargs)

    monkeypatch.setattr(lb, "bootstrap_ci", counting)
    return calls


def test_unchanged_votes_reuse_the_board_and_new_votes_reuse_the_intervals(db, bootstraps):
    cache = lb.LeaderboardCache(refresh_fraction=0.05)
    _votes(db, _random_votes(100, seed=0))
    first = lb.leaderboard(db, cache=cache, n_bootstrap=30)
    assert bootstraps == [100] and first == lb.leaderboard(db, n_bootstrap=30)  # same rows as uncached
    assert lb.leaderboard(db, cache=cache, n_bootstrap=30) == first and bootstraps == [100, 100]  # (the uncached call)

    # One more vote: scores, Elo and counts are refitted; the intervals are the last bootstrap's.
    _votes(db, [("three", "one", "a")])
    after_vote = lb.leaderboard(db, cache=cache, n_bootstrap=30)
    assert bootstraps == [100, 100]
    uncached = lb.leaderboard(db, n_bootstrap=30)
    assert [{k: r[k] for k in ("model", "bt_score", "elo", "votes")} for r in after_vote] == [
        {k: r[k] for k in ("model", "bt_score", "elo", "votes")} for r in uncached]
    assert {r["model"]: (r["ci_low"], r["ci_high"]) for r in after_vote} == {
        r["model"]: (r["ci_low"], r["ci_high"]) for r in first}

    # 5% more votes than the last bootstrap saw: refitted.
    _votes(db, _random_votes(4, seed=1))
    before = len(bootstraps)
    refitted = lb.leaderboard(db, cache=cache, n_bootstrap=30)
    assert bootstraps[before:] == [105] and refitted == lb.leaderboard(db, n_bootstrap=30)


def test_a_new_model_or_fewer_votes_refit_the_intervals_at_once(db, bootstraps):
    cache = lb.LeaderboardCache()
    _votes(db, _random_votes(100, seed=2))
    lb.leaderboard(db, cache=cache, n_bootstrap=20)
    _votes(db, [("four", "one", "a")] * lb.MIN_VOTES_FOR_INTERVAL)  # "four" now has an interval to show
    board = lb.leaderboard(db, cache=cache, n_bootstrap=20)
    assert bootstraps == [100, 110] and next(r for r in board if r["model"] == "four")["ci_low"] is not None
    db.execute("DELETE FROM battles WHERE id > 105")
    lb.leaderboard(db, cache=cache, n_bootstrap=20)
    assert bootstraps == [100, 110, 105]
