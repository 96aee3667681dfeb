"""The label kinds, as pure functions: their validation, their gold checks and their conversion to pairs.

Three kinds of human judgement reach the database:
- a Likert rating: one response, an integer score on the project's scale (likert_min..likert_max);
- a ranking with ties: 2-8 responses of one prompt ordered best to worst, ties sharing a group,
  e.g. [[12], [14, 15], [13]] (lm-human-preferences' "best of 4", with ties allowed as in Anthropic HH);
- a pairwise vote (the arena): a, b, tie or both_bad, stored as a two-response ranking.

Nothing here reads the database: the services call these, and the exporters reuse `ranking_pairs`.
Every error is an InputError naming the field, so the UI and the CLI can say what is wrong.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from labeler.errors import InputError

# A rating gold answer counts as matched within this many scale points: annotators on a 1-7 scale
# routinely differ by one point on the same answer (a 5 and a 6 are the same judgement), so an exact
# match would mostly measure noise; two points apart is a different opinion.
GOLD_RATING_TOLERANCE = 1

Relation = Literal[-1, 0, 1]


def _is_int(value: object) -> bool:
    # bool is a subclass of int, but True is not a response id nor a score.
    return isinstance(value, int) and not isinstance(value, bool)


def validate_score(score: object, likert_min: int, likert_max: int, *, field: str = "score") -> int:
    """An integer score within [likert_min, likert_max]; 5.0 is accepted as 5 (sliders send floats)."""
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        raise InputError(f"must be a number, got {score!r}", field=field)
    if isinstance(score, float):
        if not math.isfinite(score) or not score.is_integer():
            raise InputError(f"must be a whole number on the scale, got {score!r}", field=field)
        score = int(score)
    if not likert_min <= score <= likert_max:
        raise InputError(f"must be between {likert_min} and {likert_max}, got {score}", field=field)
    return score


def validate_order(order: object, response_ids: Sequence[int], *, field: str = "order") -> list[list[int]]:
    """Check a ranking (best to worst, ties grouped) and return it in canonical form.

    Every response of the item must appear exactly once and no group may be empty. The canonical
    form sorts the ids inside each group, so two equal rankings compare equal as JSON.
    """
    if not isinstance(order, (list, tuple)) or not order:
        raise InputError("must be a non-empty list of groups of response ids, best first", field=field)
    seen: list[int] = []
    canonical: list[list[int]] = []
    for position, group in enumerate(order, start=1):
        if not isinstance(group, (list, tuple)) or not group:
            raise InputError(f"group {position} is empty or not a list", field=field)
        for response_id in group:
            if not _is_int(response_id):
                raise InputError(f"group {position} holds {response_id!r}, not a response id", field=field)
        seen.extend(group)
        canonical.append(sorted(group))
    duplicates = sorted({r for r in seen if seen.count(r) > 1})
    if duplicates:
        raise InputError(f"responses {duplicates} appear more than once", field=field)
    expected = set(response_ids)
    unknown = sorted(set(seen) - expected)
    if unknown:
        raise InputError(f"responses {unknown} are not part of this item", field=field)
    missing = sorted(expected - set(seen))
    if missing:
        raise InputError(f"responses {missing} are missing from the ranking", field=field)
    return canonical


def ranking_pairs(order: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """Every (chosen, rejected) pair a ranking implies; tied responses give no pair.

    [[1], [2, 3], [4]] -> (1,2) (1,3) (1,4) (2,4) (3,4): a ranking of K responses without ties gives
    K*(K-1)/2 comparisons (InstructGPT section 3.5 trains on all of them).
    """
    pairs = []
    for better_rank, better_group in enumerate(order):
        for worse_group in order[better_rank + 1 :]:
            pairs.extend((chosen, rejected) for chosen in better_group for rejected in worse_group)
    return pairs


def centred_rank_rewards(order: Sequence[Sequence[int]]) -> dict[int, float]:
    """A ranking of one prompt's answers as rewards within the group: centred ranks in [-1, 1].

    Each answer's rank is its mean position among the K answers (ties share the mean of the positions they
    span, as in Spearman's fractional ranking), then mapped linearly so that best = +1, worst = -1 and the
    group's rewards sum to 0:

        reward = 1 - 2 * (rank - 1) / (K - 1)
        [[a], [b], [c], [d]]  -> ranks 1, 2, 3, 4   -> a +1, b +1/3, c -1/3, d -1
        [[a], [b, c], [d]]    -> ranks 1, 2.5, 2.5, 4 -> a +1, b 0, c 0, d -1
        [[a, b, c, d]]        -> all rank 2.5       -> all 0 (a tie teaches nothing)

    A group estimator (RLOO, GRPO) only needs the order within the group; centred ranks keep the scale of the
    Likert mapping ([-1, 1]) so one KL coefficient fits both.
    """
    size = sum(len(group) for group in order)
    if size < 2:
        raise ValueError(f"a ranking needs at least 2 answers, got {size}")
    rewards: dict[int, float] = {}
    position = 1
    for group in order:
        mean_rank = position + (len(group) - 1) / 2
        for response_id in group:
            rewards[response_id] = 1.0 - 2.0 * (mean_rank - 1) / (size - 1)
        position += len(group)
    return rewards


def pair_relation(order: Sequence[Sequence[int]], a: int, b: int) -> Relation:
    """1 if `a` is ranked above `b`, -1 if below, 0 if tied. Both must be in the ranking."""
    rank = {response_id: position for position, group in enumerate(order) for response_id in group}
    if a not in rank or b not in rank:
        raise KeyError(f"responses {a} and {b} must both be in the ranking")
    # Lower position is better.
    return 1 if rank[a] < rank[b] else -1 if rank[a] > rank[b] else 0


def vote_to_order(winner: str, response_a: int, response_b: int) -> list[list[int]]:
    """An arena vote as a ranking: a tie or both_bad is one group (no preference pair)."""
    if winner == "a":
        return [[response_a], [response_b]]
    if winner == "b":
        return [[response_b], [response_a]]
    if winner in ("tie", "both_bad"):
        return [sorted([response_a, response_b])]
    raise InputError(f"must be one of a, b, tie, both_bad, got {winner!r}", field="winner")


def validate_gold(
    kind: str, gold: object, response_ids: Sequence[int], likert_min: int, likert_max: int
) -> dict:
    """A gold answer in canonical form: {"score": s} for a rating item, {"order": [[id], ...]} for a ranking."""
    if not isinstance(gold, dict):
        raise InputError("must be a dict like {'score': 5} or {'order': [[1], [2]]}", field="gold")
    expected_key = "score" if kind == "rating" else "order"
    if set(gold) != {expected_key}:
        raise InputError(f"a {kind} item's gold answer has exactly the key '{expected_key}'", field="gold")
    if kind == "rating":
        return {"score": validate_score(gold["score"], likert_min, likert_max, field="gold.score")}
    return {"order": validate_order(gold["order"], response_ids, field="gold.order")}


def rating_matches_gold(score: float, gold_score: float) -> bool:
    """Within GOLD_RATING_TOLERANCE points of the gold score: 5 matches 4, 5 and 6, not 3 or 7."""
    return abs(score - gold_score) <= GOLD_RATING_TOLERANCE


def ranking_matches_gold(order: Sequence[Sequence[int]], gold_order: Sequence[Sequence[int]]) -> bool:
    """The annotator's best group is exactly the gold's best group (the same set of responses).

    We check the top because the chosen answer is what a preference dataset is mostly about, and it
    reads plainly to an annotator ("you picked a different best answer"); a swap lower down, between
    two weak answers, is where careful people legitimately differ.
    """
    return set(order[0]) == set(gold_order[0])


def all_pairs(ids: Iterable[int]) -> list[tuple[int, int]]:
    """Every unordered pair (a, b) with a < b, for pairwise agreement over an item's responses."""
    ordered = sorted(ids)
    return [(a, b) for i, a in enumerate(ordered) for b in ordered[i + 1 :]]


@dataclass(frozen=True)
class PairMajority:
    """One response pair of an item, in its majority direction."""
    chosen: int
    rejected: int
    votes: int  # rankings that put `chosen` above `rejected`
    seen: int  # rankings that contain the pair, ties included

    @property
    def agreement(self) -> float:
        """Majority votes / rankings containing the pair: a pair tied by one of three annotators has 2/3."""
        return self.votes / self.seen


def majority_pairs(orders: Iterable[Sequence[Sequence[int]]]) -> list[PairMajority]:
    """The rankings of one item -> one PairMajority per response pair with a strict majority, by (low, high) id.

    Every pair across groups of each order counts as a vote; a pair with no strict majority (1 vs 1, or tied
    by everyone) carries no preference and is left out.
    """
    votes: dict[tuple[int, int], dict[int, int]] = {}
    seen: dict[tuple[int, int], int] = {}
    for order in orders:
        for low, high in all_pairs(i for group in order for i in group):
            seen[low, high] = seen.get((low, high), 0) + 1
            count = votes.setdefault((low, high), {low: 0, high: 0})
            relation = pair_relation(order, low, high)
            if relation:
                count[low if relation > 0 else high] += 1
    pairs = []
    for (low, high), n in sorted(seen.items()):
        low_votes, high_votes = votes[low, high][low], votes[low, high][high]
        if low_votes != high_votes:
            chosen, rejected = (low, high) if low_votes > high_votes else (high, low)
            pairs.append(PairMajority(chosen, rejected, max(low_votes, high_votes), n))
    return pairs

