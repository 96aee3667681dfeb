"""Judges with TRL's names (trl.BaseJudge, BasePairwiseJudge, BaseRankJudge): who says which of two answers is better.

    class PrefersShorter(BasePairwiseJudge):
        def judge(self, prompts, completions, shuffle_order=True):
            return [0 if len(a) <= len(b) else 1 for a, b in completions]

    PrefersShorter().judge(["Say hi."], [["Hi!", "Hello there, friend!"]])   # [0]: the first is better

A pairwise verdict is the index of the better completion of each pair, -1 for a tie (the online trainers leave a tie
out of the loss). Besides TRL's bases, two adapters turn a scorer into a pairwise judge: `FunctionJudge` (a TRL reward
function, `f(prompts, completions, **kwargs) -> list[float]`) and `RewardModelJudge` (a sequence-classification reward
model). Both are `ScoreJudge`s: they score each completion alone, so a trainer can also read the scores (TRL's
objective/scores and missing_eos_penalty) and the order of a pair cannot matter (shuffle_order is accepted and has
nothing to shuffle). Importing this module loads no torch; the reward model's scoring imports it.
"""
from __future__ import annotations

import random
from abc import ABC, abstractmethod
from typing import Any, Callable, Sequence

TIE = -1


class JudgeError(ValueError):
    """A judge broke its contract (it raised, or returned the wrong number or kind of verdicts): names the judge."""


class BaseJudge(ABC):
    """TRL's base: `judge(prompts, completions, shuffle_order=True) -> list` of whatever the kind of judge returns."""

    @abstractmethod
    def judge(self, prompts: list[str], completions: list[str], shuffle_order: bool = True) -> list:
        raise NotImplementedError


class BasePairwiseJudge(BaseJudge):
    """`judge(prompts, completions, shuffle_order=True) -> list[int]`: `completions[i]` is a pair for `prompts[i]`,
    the answer the index (0 or 1) of its better completion, -1 for a tie. shuffle_order: present each pair in random
    order to a judge that may favour a position (and map the answer back)."""

    @abstractmethod
    def judge(self, prompts: list[str], completions: list[list[str]], shuffle_order: bool = True) -> list[int]:
        raise NotImplementedError


class BaseRankJudge(BaseJudge):
    """`judge(prompts, completions, shuffle_order=True) -> list[list[int]]`: for each prompt, the indices of its
    completions from best to worst (TRL's example: [[0, 1, 2], [1, 0]]); here also [] for no preference (all tied,
    or people did not rank it in time), which the online trainers read as a tie."""

    @abstractmethod
    def judge(self, prompts: list[str], completions: list[list[str]], shuffle_order: bool = True) -> list[list[int]]:
        raise NotImplementedError


class BaseBinaryJudge(BaseJudge):
    """TRL's binary judge: `judge(prompts, completions, gold_completions=None, shuffle_order=True) -> list[int]`,
    1 where a completion meets the judge's constraint, 0 where it does not, -1 where it cannot tell."""

    @abstractmethod
    def judge(self, prompts: list[str], completions: list[str], gold_completions: list[str] | None = None,
              shuffle_order: bool = True) -> list[int]:
        raise NotImplementedError


# ---- pure helpers ----------------------------------------------------------------------------------------------
def preference_from_scores(first: Sequence[float], second: Sequence[float]) -> list[int]:
    """Pairwise verdicts from two scores per pair: 0 where the first scores higher, 1 where the second does, -1 on
    equal scores."""
    return [0 if a > b else 1 if b > a else TIE for a, b in zip(first, second)]


def ranking_from_scores(scores: Sequence[float]) -> list[int]:
    """A group's ranking (indices, best first) from one score per answer; [] when every score is equal (no
    preference). Equal scores keep their order."""
    if max(scores) == min(scores):
        return []
    return sorted(range(len(scores)), key=lambda i: -scores[i])


def chosen_pair(ranking: Sequence[int], size: int) -> tuple[int, int, int]:
    """(first, second, verdict) of the pair a group of `size` answers trains on, from its ranking (best first; []
    for no preference): two answers keep their order and the verdict is the index of the better; more answers give
    the best and the worst, verdict 0 (the best-versus-worst pair of iterative DPO, Xiong et al. 2024); no preference
    gives the first two answers and a tie."""
    if not ranking:
        return 0, 1, TIE
    if size == 2:
        return 0, 1, int(ranking[0])
    return int(ranking[0]), int(ranking[-1]), 0


def check_rankings(rankings: Any, sizes: Sequence[int], name: str) -> list[list[int]]:
    """A rank judge's answer as lists of ints, or JudgeError naming the judge: one ranking per group, each every
    index of its group once (best first) or [] (no preference: all tied, or not judged)."""
    try:
        rankings = [[int(i) for i in ranking] for ranking in rankings]
    except (TypeError, ValueError) as error:
        raise JudgeError(f"judge {name!r} returned {rankings!r}: expected one list of indices per group") from error
    if len(rankings) != len(sizes):
        raise JudgeError(f"judge {name!r} returned {len(rankings)} rankings for {len(sizes)} groups")
    for ranking, size in zip(rankings, sizes):
        if ranking and sorted(ranking) != list(range(size)):
            raise JudgeError(f"judge {name!r} returned the ranking {ranking}: a group of {size} answers is ranked "
                             f"by each of its indices 0-{size - 1} once (or [] for no preference)")
    return rankings


def shuffled_pairs(completions: Sequence[Sequence[str]], rng: random.Random) -> tuple[list[list[str]], list[bool]]:
    """Each pair in random order, and for each whether it was swapped (unshuffle_verdicts maps verdicts back)."""
    swapped = [rng.random() < 0.5 for _ in completions]
    return [[b, a] if s else [a, b] for (a, b), s in zip(completions, swapped)], swapped


def unshuffle_verdicts(verdicts: Sequence[int], swapped: Sequence[bool]) -> list[int]:
    """Verdicts on shuffled pairs as verdicts on the pairs as given (a tie stays a tie)."""
    return [v if v == TIE or not s else 1 - v for v, s in zip(verdicts, swapped)]


def check_pairwise_verdicts(verdicts: Any, pairs: int, name: str) -> list[int]:
    """The verdicts as a list of ints, or JudgeError naming the judge: one per pair, each 0, 1 or -1."""
    try:
        verdicts = [int(v) for v in verdicts]
    except (TypeError, ValueError) as error:
        raise JudgeError(f"judge {name!r} returned {verdicts!r}: expected a list of 0, 1 or -1") from error
    if len(verdicts) != pairs:
        raise JudgeError(f"judge {name!r} returned {len(verdicts)} verdicts for {pairs} pairs")
    bad = [v for v in verdicts if v not in (0, 1, TIE)]
    if bad:
        raise JudgeError(f"judge {name!r} returned {bad[0]!r}: a verdict is 0, 1 (the better completion) or -1 (a tie)")
    return verdicts


def judge_name(judge: Any) -> str:
    """What a judge is called in errors and logs: its function's name for a FunctionJudge, else its class's."""
    return getattr(judge, "name", None) or type(judge).__name__


# ---- adapters: a scorer as a pairwise judge -------------------------------------------------------------------
class ScoreJudge(BasePairwiseJudge):
    """A pairwise judge that scores every completion alone (higher is better) and compares the two scores."""

    name: str = "scores"

    @abstractmethod
    def scores(self, prompts: list[Any], completions: list[Any]) -> list[float]:
        """One score per (prompt, completion), in order."""
        raise NotImplementedError

    def judge(self, prompts: list[Any], completions: list[list[Any]], shuffle_order: bool = True) -> list[int]:
        # Each completion is scored alone, so the order within a pair cannot bias the verdict: nothing to shuffle.
        flat_prompts = [p for p in prompts for _ in range(2)]
        flat = [c for pair in completions for c in pair]
        values = self.checked_scores(flat_prompts, flat)
        return preference_from_scores(values[0::2], values[1::2])

    def checked_scores(self, prompts: list[Any], completions: list[Any]) -> list[float]:
        """scores(), or JudgeError naming this judge when it raises or returns the wrong number of scores."""
        try:
            values = list(self.scores(prompts, completions))
        except JudgeError:
            raise
        except Exception as error:
            raise JudgeError(f"judge {self.name!r} failed: {type(error).__name__}: {error}") from error
        if len(values) != len(completions):
            raise JudgeError(f"judge {self.name!r} returned {len(values)} scores for {len(completions)} completions")
        try:
            return [float(v) for v in values]
        except (TypeError, ValueError) as error:
            raise JudgeError(f"judge {self.name!r} returned a score that is not a number: {error}") from error


class FunctionJudge(ScoreJudge):
    """A TRL reward function `f(prompts, completions, **kwargs) -> list[float]` as a pairwise judge: the completion
    it scores higher wins, equal scores tie.

        FunctionJudge(lambda prompts, completions, **kw: [-len(c) for c in completions])   # prefers shorter
    """

    def __init__(self, function: Callable[..., Sequence[float]], name: str | None = None):
        if not callable(function):
            raise TypeError(f"FunctionJudge: {function!r} is not callable")
        self.function = function
        self.name = name or getattr(function, "__name__", None) or type(function).__name__

    def scores(self, prompts: list[Any], completions: list[Any]) -> list[float]:
        return list(self.function(prompts=prompts, completions=completions))


class RewardModelJudge(ScoreJudge):
    """A sequence-classification reward model (one logit) as a pairwise judge. Each (prompt, completion) is encoded
    as RewardTrainer trains on it (rlhf/data.py tokenize_for_reward), in batches of `batch_size`, without gradients.
    `tokenizer` None: loaded from the model's folder (its config's _name_or_path)."""

    def __init__(self, model, tokenizer=None, max_length: int | None = 512, batch_size: int = 16):
        from rlhf.loading import load_tokenizer

        if tokenizer is None:
            folder = getattr(model.config, "_name_or_path", "")
            if not folder:
                raise ValueError("RewardModelJudge: give the reward model's tokenizer (the model has no folder to load it from)")
            tokenizer = load_tokenizer(folder, padding_side="right")
        self.model = model.eval().requires_grad_(False)
        self.tokenizer, self.max_length, self.batch_size = tokenizer, max_length, batch_size
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.name = str(getattr(model.config, "_name_or_path", "") or "reward_model").rstrip("/").split("/")[-1]

    @classmethod
    def from_pretrained(cls, name_or_path, **kwargs) -> "RewardModelJudge":
        """A reward model folder (safetensors; an adapter folder on its base) and the tokenizer saved beside it."""
        from rlhf.loading import load_tokenizer, resolve_model_path
        from rlhf.peft_utils import merge_adapter
        from rlhf.reward import load_reward_model

        path = resolve_model_path(name_or_path)
        judge = cls(merge_adapter(load_reward_model(path)), load_tokenizer(path, padding_side="right"), **kwargs)
        judge.name = str(name_or_path).rstrip("/").split("/")[-1]
        return judge

    def scores(self, prompts: list[Any], completions: list[Any]) -> list[float]:
        import torch

        from rlhf.data import pad_token_lists, render_prompt_completion, tokenize_for_reward

        device = next(self.model.parameters()).device
        out: list[float] = []
        with torch.no_grad():
            for start in range(0, len(prompts), self.batch_size):
                rows = [tokenize_for_reward(self.tokenizer, *render_prompt_completion(self.tokenizer, p, c), self.max_length)
                        for p, c in zip(prompts[start:start + self.batch_size], completions[start:start + self.batch_size])]
                batch = {key: pad_token_lists([r[key] for r in rows],
                                              self.tokenizer.pad_token_id if key == "input_ids" else 0).to(device)
                         for key in rows[0]}
                out.extend(self.model(**batch).logits[:, 0].float().tolist())
        return out


class RankAsPairwiseJudge(BasePairwiseJudge):
    """A BaseRankJudge asked about pairs: the verdict is the index it ranks first."""

    def __init__(self, rank_judge: BaseRankJudge):
        self.rank_judge = rank_judge
        self.name = judge_name(rank_judge)

    @property
    def last_stats(self) -> dict | None:
        """The rank judge's own statistics, which the trainers log each step."""
        return getattr(self.rank_judge, "last_stats", None)

    def judge(self, prompts: list[Any], completions: list[list[Any]], shuffle_order: bool = True) -> list[int]:
        ranks = self.rank_judge.judge(prompts, completions, shuffle_order=shuffle_order)
        if len(ranks) != len(prompts):
            raise JudgeError(f"judge {self.name!r} returned {len(ranks)} rankings for {len(prompts)} pairs")
        return [int(r[0]) if len(r) else TIE for r in ranks]


def as_pairwise_judge(judge: Any) -> BasePairwiseJudge:
    """A pairwise judge from what a trainer's `judge=` accepts: a BasePairwiseJudge, a BaseRankJudge, or a reward
    function (wrapped in FunctionJudge)."""
    if isinstance(judge, BasePairwiseJudge):
        return judge
    if isinstance(judge, BaseRankJudge):
        return RankAsPairwiseJudge(judge)
    if isinstance(judge, BaseJudge):
        raise TypeError(f"judge: {type(judge).__name__} is neither a pairwise nor a rank judge")
    if callable(judge):
        return FunctionJudge(judge)
    raise TypeError(f"judge: {judge!r} is neither a judge nor a reward function")


__all__ = ["BaseBinaryJudge", "BaseJudge", "BasePairwiseJudge", "BaseRankJudge", "FunctionJudge", "JudgeError",
           "RankAsPairwiseJudge", "RewardModelJudge", "ScoreJudge", "TIE", "as_pairwise_judge", "check_pairwise_verdicts",
           "check_rankings", "chosen_pair", "judge_name", "preference_from_scores", "ranking_from_scores",
           "shuffled_pairs", "unshuffle_verdicts"]
