"""rlhf/judges.py: TRL's judge classes, the adapters that make a scorer a pairwise judge, and the checks that name a
judge breaking its contract."""
import random

import pytest

from rlhf.judges import (
    BaseJudge,
    BasePairwiseJudge,
    BaseRankJudge,
    FunctionJudge,
    JudgeError,
    RankAsPairwiseJudge,
    RewardModelJudge,
    as_pairwise_judge,
    check_pairwise_verdicts,
    preference_from_scores,
    shuffled_pairs,
    unshuffle_verdicts,
)


class PrefersShorterJudge(BasePairwiseJudge):  # TRL's docs example
    def judge(self, prompts, completions, shuffle_order=False):
        return [0 if len(c[0]) < len(c[1]) else 1 for c in completions]


def test_trl_docs_pairwise_judge_and_the_base_classes():
    judge = PrefersShorterJudge()
    assert judge.judge(["What is the capital of France?", "What is the biggest planet?"],
                       [["Paris", "The capital of France is Paris."], ["Jupiter is the biggest planet.", "Jupiter"]]) == [0, 1]
    assert isinstance(judge, BaseJudge)
    with pytest.raises(TypeError):
        BasePairwiseJudge()  # abstract: judge() must be written


def test_function_judge_scores_each_answer_and_ties_on_equal_scores():
    def prefers_short(prompts, completions, **kwargs):
        return [-len(c) for c in completions]

    judge = FunctionJudge(prefers_short)
    assert judge.name == "prefers_short"
    # lengths (2, 5) -> first; (4, 1) -> second; (3, 3) -> tie
    assert judge.judge(["a", "b", "c"], [["hi", "hello"], ["long", "x"], ["abc", "xyz"]]) == [0, 1, -1]
    assert preference_from_scores([1.0, 0.0, 2.0], [0.5, 0.5, 2.0]) == [0, 1, -1]


def test_a_judge_that_breaks_its_contract_is_named():
    def too_few(prompts, completions, **kwargs):
        return [1.0]

    def broken(prompts, completions, **kwargs):
        raise RuntimeError("no network")

    with pytest.raises(JudgeError, match=r"judge 'too_few' returned 1 scores for 4 completions"):
        FunctionJudge(too_few).judge(["a", "b"], [["x", "y"], ["z", "w"]])
    with pytest.raises(JudgeError, match=r"judge 'broken' failed: RuntimeError: no network"):
        FunctionJudge(broken).judge(["a"], [["x", "y"]])
    with pytest.raises(JudgeError, match=r"judge 'mine' returned 1 verdicts for 2 pairs"):
        check_pairwise_verdicts([0], 2, "mine")
    with pytest.raises(JudgeError, match=r"judge 'mine' returned 2: a verdict is 0, 1"):
        check_pairwise_verdicts([0, 2], 2, "mine")
    with pytest.raises(JudgeError, match=r"judge 'mine' returned None"):
        check_pairwise_verdicts(None, 2, "mine")


def test_rank_judge_as_pairwise_and_what_a_trainer_accepts():
    class Ranker(BaseRankJudge):  # TRL's docs: indices from best to worst
        def judge(self, prompts, completions, shuffle_order=True):
            return [sorted(range(len(c)), key=lambda i: len(c[i])) for c in completions]

    assert Ranker().judge(["p", "q"], [["ccc", "a", "bb"], ["xx", "y"]]) == [[1, 2, 0], [1, 0]]
    pairwise = as_pairwise_judge(Ranker())
    assert isinstance(pairwise, RankAsPairwiseJudge) and pairwise.judge(["p"], [["long", "s"]]) == [1]
    judge = PrefersShorterJudge()
    assert as_pairwise_judge(judge) is judge
    assert isinstance(as_pairwise_judge(lambda prompts, completions, **kw: [0.0] * len(completions)), FunctionJudge)
    with pytest.raises(TypeError, match="neither a judge nor a reward function"):
        as_pairwise_judge(42)


def test_shuffled_pairs_map_back():
    pairs = [["a", "b"], ["c", "d"], ["e", "f"], ["g", "h"]]
    shown, swapped = shuffled_pairs(pairs, random.Random(3))
    assert [sorted(p) for p in shown] == pairs and any(swapped)
    # a judge that always picks the alphabetically first answer, asked in shuffled order
    verdicts = [0 if p[0] < p[1] else 1 for p in shown]
    assert unshuffle_verdicts(verdicts, swapped) == [0, 0, 0, 0]
    assert unshuffle_verdicts([-1, -1], [True, False]) == [-1, -1]


def test_reward_model_judge_scores_with_the_model(tiny_encoder_dir):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(tiny_encoder_dir, num_labels=1)
    judge = RewardModelJudge(model, AutoTokenizer.from_pretrained(tiny_encoder_dir), batch_size=2)
    scores = judge.scores(["The film", "The film", "A day"], ["was great", "was awful", "passed"])
    assert len(scores) == 3 and len(set(scores)) == 3
    verdict = judge.judge(["The film"], [["was great", "was awful"]])
    assert verdict == preference_from_scores([scores[0]], [scores[1]])
    loaded = RewardModelJudge.from_pretrained(str(tiny_encoder_dir))
    assert loaded.name == tiny_encoder_dir.name
    assert loaded.scores(["The film"], ["was great"]) == pytest.approx(scores[:1], abs=1e-5)


def test_a_groups_pair_from_its_ranking_by_hand():
    from rlhf.judges import JudgeError, RankAsPairwiseJudge, BaseRankJudge, check_rankings, chosen_pair, ranking_from_scores

    assert ranking_from_scores([0.2, 0.9, 0.2, -1.0]) == [1, 0, 2, 3]  # equal scores keep their order
    assert ranking_from_scores([0.5, 0.5, 0.5]) == []  # no preference
    assert chosen_pair([1, 0, 2, 3], 4) == (1, 3, 0)  # the best and the worst, the best first
    assert chosen_pair([1, 0], 2) == (0, 1, 1)  # a pair keeps its order: the second is better
    assert chosen_pair([], 4) == (0, 1, -1)
    assert check_rankings([[2, 0, 1], []], [3, 3], "r") == [[2, 0, 1], []]
    with pytest.raises(JudgeError, match=r"judge 'r' returned the ranking \[0, 0, 1\]: a group of 3 answers"):
        check_rankings([[0, 0, 1]], [3], "r")
    with pytest.raises(JudgeError, match="judge 'r' returned 1 rankings for 2 groups"):
        check_rankings([[0, 1]], [2, 2], "r")

    class NoPreference(BaseRankJudge):
        def judge(self, prompts, completions, shuffle_order=True):
            return [[] for _ in prompts]

    assert RankAsPairwiseJudge(NoPreference()).judge(["p"], [["a", "b"]]) == [-1]  # an empty ranking is a tie
