"""Look inside a reward model before trusting PPO to it: score texts side by side, see its score distribution
over the project's answers, and measure its agreement with human labels it was not trained on.

`scorer` arguments are callables (prompts, responses) -> scores, e.g. rlhf.reward.RewardScorer(path).score;
`load_scorer(db, name)` builds one from a registry name.

The score distribution and the agreement read answers or rankings joined with their prompts (and the mean
rating), views kept here; answer texts come from `responses`, whether prompts are held out from `prompts`.
"""
from __future__ import annotations

import json
import statistics
from typing import Callable

import pandas as pd

from labeler.services.serving.models import resolve as resolve_model
from labeler.services.data.projects import get_project
from labeler.services.data.prompts import has_heldout
from labeler.services.data.responses import response_texts

Scorer = Callable[[list, list], list]


def load_scorer(db, name: str) -> Scorer:
    from rlhf.reward import RewardScorer  # the reward trainer's module: torch and transformers

    return RewardScorer(resolve_model(db, name)).score


def score_side_by_side(scorer: Scorer, prompt: str, responses: list[str]) -> list[dict]:
    """Each response's score for one prompt, best first."""
    responses = [r for r in responses if r and r.strip()]
    scores = scorer([prompt] * len(responses), responses)
    return sorted(({"response": r, "score": float(s)} for r, s in zip(responses, scores)), key=lambda row: -row["score"])


def _heldout_clause(db, project_id: int) -> tuple[str, bool]:
    """Restrict to held-out prompts (split 'test') when the project has any, so the agreement is measured on
    labels the reward model was not trained on; otherwise all prompts (and the result says so)."""
    return (" AND p.split = 'test'", True) if has_heldout(db, project_id) else ("", False)


def score_distribution(db, scorer: Scorer, project: str = "default", limit: int = 500) -> list[dict]:
    """Reward-model score of up to `limit` answers of the project, with their mean human rating if any."""
    rows = db.execute(
        "SELECT r.id, p.text AS prompt, r.text AS response, (SELECT AVG(score) FROM ratings x WHERE x.response_id = r.id)"
        " AS human FROM responses r JOIN prompts p ON p.id = r.prompt_id WHERE p.project_id = ? ORDER BY r.id LIMIT ?",
        [get_project(db, project).id, int(limit)],
    ).fetchall()
    scores = scorer([row["prompt"] for row in rows], [row["response"] for row in rows]) if rows else []
    return [{"response_id": row["id"], "score": float(s), "human": row["human"]} for row, s in zip(rows, scores)]


def agreement(db, scorer: Scorer, project: str = "default") -> dict:
    """How often the reward model orders a human-ranked pair the same way (pairwise accuracy), on held-out
    prompts when there are any. Pairs come from rankings (ties skipped), the same pairs export produces."""
    project_id = get_project(db, project).id
    clause, heldout = _heldout_clause(db, project_id)
    rankings = db.execute(
        "SELECT p.text AS prompt, k.order_json FROM rankings k JOIN prompts p ON p.id = k.prompt_id"
        f" WHERE p.project_id = ?{clause}",
        [project_id],
    ).fetchall()
    pairs = []
    for row in rankings:
        groups = json.loads(row["order_json"])
        for i, better in enumerate(groups):
            for worse in groups[i + 1:]:
                pairs += [(row["prompt"], b, w) for b in better for w in worse]
    if not pairs:
        return {"pairs": 0, "accuracy": None, "heldout": heldout}
    ids = sorted({r for _, b, w in pairs for r in (b, w)})
    texts = response_texts(db, ids)
    chosen = scorer([p for p, _, _ in pairs], [texts[b] for _, b, _ in pairs])
    rejected = scorer([p for p, _, _ in pairs], [texts[w] for _, _, w in pairs])
    correct = [c > r for c, r in zip(chosen, rejected)]
    margins = [c - r for c, r in zip(chosen, rejected)]
    return {"pairs": len(pairs), "accuracy": sum(correct) / len(correct), "mean_margin": statistics.fmean(margins),
            "heldout": heldout}


def score_histogram(scores: list[float], max_bins: int = 20) -> list[tuple[float, int]]:
    """(bin midpoint, count) of equal-width bins over the scores, about 5 scores a bin and at most `max_bins`
    (pandas.cut: the lowest edge moved down by 0.1% of the range so the minimum falls inside)."""
    if not scores:
        return []
    values = pd.Series(scores, dtype=float)
    counts = pd.cut(values, bins=min(max_bins, max(1, len(values) // 5))).value_counts(sort=False)
    return [(float(interval.mid), int(count)) for interval, count in zip(counts.index, counts.values)]

