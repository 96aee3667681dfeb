"""Reward sources for PPO: a function, a reward model, humans, or a mix. Pure library pieces (no storage).

Every source is a callable `source(queries, responses) -> list[float | None]` with a `last_stats` dict that the
trainer's log_stats can merge into its stats (`reward/...` keys). None means "no reward for this rollout"
(a human did not rate it in time and the policy is to skip it); the caller drops those rollouts from the step.

    reward = FunctionReward.from_spec("vader")                      # the seeds' sentiment example
    reward = RewardModelReward.from_pretrained("rm-run3", subtract_query_score=True)
    reward = HumanReward(app_queue.request_and_wait, timeout=300)   # the app supplies request_and_wait
    reward = MixReward(HumanReward(...), RewardModelReward(...), w_human=1.0, w_rm=0.5)
"""
from __future__ import annotations

import importlib
import math
from typing import Callable, Protocol, Sequence

Scores = list  # list[float | None]


class RewardSource(Protocol):
    last_stats: dict[str, float]

    def __call__(self, queries: Sequence[str], responses: Sequence[str]) -> Scores: ...


def _check_lengths(queries: Sequence[str], responses: Sequence[str]) -> None:
    if len(queries) != len(responses):
        raise ValueError(f"{len(queries)} queries but {len(responses)} responses")


def _stats(prefix: str, scores: Scores) -> dict[str, float]:
    present = [s for s in scores if s is not None]
    out = {f"reward/{prefix}_count": float(len(present))}
    if present:
        mean = sum(present) / len(present)
        out[f"reward/{prefix}_mean"] = mean
    return out


def _vader():
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    return SentimentIntensityAnalyzer()


def vader_answer(queries: Sequence[str], responses: Sequence[str]) -> list[float]:
    """VADER's compound sentiment of the answer alone, in [-1, 1]: the reward of the shipped task, where the
    answer is a chat turn of its own, so the prompt's words neither help nor hurt it."""
    analyzer = _vader()
    return [analyzer.polarity_scores(r)["compound"] for r in responses]


def vader_compound(queries: Sequence[str], responses: Sequence[str]) -> list[float]:
    """VADER's compound sentiment of query + response, in [-1, 1]: the seeds' notebook, where the response
    continues the query's text and the two make one review."""
    analyzer = _vader()
    return [analyzer.polarity_scores(q + r)["compound"] for q, r in zip(queries, responses)]


BUILTIN_FUNCTIONS = {"vader": vader_answer, "vader-with-prompt": vader_compound}


class FunctionReward:
    """Any function (queries, responses) -> scores; built-ins by name ('vader') or 'module:function'."""

    def __init__(self, function: Callable[[Sequence[str], Sequence[str]], Sequence[float]], name: str = "function"):
        self.function = function
        self.name = name
        self.last_stats: dict[str, float] = {}

    @classmethod
    def from_spec(cls, spec: str) -> "FunctionReward":
        if spec in BUILTIN_FUNCTIONS:
            return cls(BUILTIN_FUNCTIONS[spec], spec)
        module_name, sep, attr = spec.partition(":")
        if not sep:
            raise ValueError(f"reward function {spec!r}: use one of {sorted(BUILTIN_FUNCTIONS)} or module:function")
        return cls(getattr(importlib.import_module(module_name), attr), spec)

    def __call__(self, queries: Sequence[str], responses: Sequence[str]) -> Scores:
        _check_lengths(queries, responses)
        scores = [float(s) for s in self.function(list(queries), list(responses))]
        if len(scores) != len(queries) or not all(math.isfinite(s) for s in scores):
            raise ValueError(f"reward function {self.name}: expected {len(queries)} finite scores, got {scores[:8]}")
        self.last_stats = _stats("function", scores)
        return scores


class RewardModelReward:
    """Scores (query, response) with a sequence-classification reward model.

    `scorer(prompts, responses) -> list[float]` is e.g. rlhf.reward.RewardScorer(path).score. With
    `subtract_query_score`, the reward is r(query, response) - r(query, ""): the query's own score is a baseline
    that removes what the response cannot change (a prompt that already reads positive).

    With `score_stats` ({'mean', 'std'} of the model's scores on its training answers, rlhf.reward's
    score_stats.json) and `score_std`, scores are standardised, (r - mean) / std, then multiplied by `score_std`:
    a Bradley-Terry model's offset and scale are arbitrary (the demo's ranged -6..6 where VADER's range is
    -1..1), and it is their size next to the KL penalty that decides how far PPO moves the policy.
    """

    def __init__(self, scorer: Callable[[list, list], list[float]], subtract_query_score: bool = False,
                 score_stats: dict[str, float] | None = None, score_std: float | None = None):
        if score_std is not None and score_stats is None:
            raise ValueError("score_std needs score_stats (the mean and std of the model's training scores)")
        if score_stats is not None and not score_stats.get("std", 0) > 0:
            raise ValueError(f"score_stats {score_stats}: std must be > 0")
        self.scorer = scorer
        self.subtract_query_score = subtract_query_score
        self.score_stats, self.score_std = score_stats, score_std
        self.last_stats: dict[str, float] = {}

    @classmethod
    def from_pretrained(cls, path: str, subtract_query_score: bool = False, device=None,
                        score_std: float | None = None, dtype=None) -> "RewardModelReward":
        """`score_std`: standardise with the model's score_stats.json, then scale to this std (None: raw).
        A model saved without the file (before it existed) gives raw scores, with a warning. `dtype`:
        torch.bfloat16 keeps the reward model in half the memory (rlhf.reward.RewardScorer)."""
        import warnings

        from rlhf.reward import SCORE_STATS_FILE, RewardScorer

        scorer = RewardScorer(path, device=device, dtype=dtype)
        if score_std is not None and scorer.score_stats is None:
            warnings.warn(f"reward model {path} has no {SCORE_STATS_FILE} (saved by an older version): its raw "
                          "scores are used; retrain it to have them standardised", stacklevel=2)
            score_std = None
        return cls(scorer.score, subtract_query_score, scorer.score_stats if score_std is not None else None,
                   score_std)

    def __call__(self, queries: Sequence[str], responses: Sequence[str]) -> Scores:
        _check_lengths(queries, responses)
        raw = [float(s) for s in self.scorer(list(queries), list(responses))]
        scores, shift = raw, 0.0
        if self.subtract_query_score:
            # A difference of two scores has no offset left to remove: only the scale applies below.
            baseline = [float(s) for s in self.scorer(list(queries), [""] * len(queries))]
            scores = [s - b for s, b in zip(raw, baseline)]
        elif self.score_std is not None:
            shift = self.score_stats["mean"]
        if self.score_std is not None:
            scale = self.score_std / self.score_stats["std"]
            scores = [(s - shift) * scale for s in scores]
        self.last_stats = _stats("rm", scores)
        if self.score_std is not None:
            self.last_stats["reward/rm_raw_mean"] = sum(raw) / len(raw) if raw else 0.0
        return scores


class HumanReward:
    """Rewards from people: `request_and_wait(queries, responses, timeout) -> list[float | None]` is supplied by
    the application (it puts the rollouts in the rating queue and maps ratings to rewards); None = not rated
    before the timeout."""

    def __init__(self, request_and_wait: Callable[[list[str], list[str], float], Scores], timeout: float = 300.0):
        self.request_and_wait = request_and_wait
        self.timeout = timeout
        self.last_stats: dict[str, float] = {}

    def __call__(self, queries: Sequence[str], responses: Sequence[str]) -> Scores:
        _check_lengths(queries, responses)
        scores = list(self.request_and_wait(list(queries), list(responses), self.timeout))
        if len(scores) != len(queries):
            raise ValueError(f"request_and_wait returned {len(scores)} rewards for {len(queries)} rollouts")
        self.last_stats = {**_stats("human", scores), "reward/human_missing": float(sum(s is None for s in scores))}
        return scores


class MixReward:
    """w_human * human + w_rm * rm. A rollout nobody rated before the timeout gets (w_human + w_rm) * rm: the
    reward model stands in for the missing human score, so the mix keeps its scale. The stats record how many
    rewards came from each source."""

    def __init__(self, human: HumanReward, rm: Callable[[Sequence[str], Sequence[str]], Scores],
                 w_human: float = 1.0, w_rm: float = 1.0):
        if w_human < 0 or w_rm < 0:
            raise ValueError(f"w_human={w_human}, w_rm={w_rm}: weights must be >= 0")
        self.human, self.rm, self.w_human, self.w_rm = human, rm, w_human, w_rm
        self.last_stats: dict[str, float] = {}

    def __call__(self, queries: Sequence[str], responses: Sequence[str]) -> Scores:
        human = self.human(queries, responses)
        model = self.rm(queries, responses)
        mixed = [
            self.w_human * h + self.w_rm * m if h is not None else (self.w_human + self.w_rm) * m
            for h, m in zip(human, model)
        ]
        from_human = sum(h is not None for h in human)
        self.last_stats = {
            "reward/from_human": float(from_human),
            "reward/from_rm": float(len(mixed) - from_human),
            **_stats("mix", mixed),
        }
        return mixed


__all__ = ["FunctionReward", "HumanReward", "MixReward", "RewardModelReward", "RewardSource", "vader_answer",
           "vader_compound"]
