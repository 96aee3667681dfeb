"""Reward sources (rlhf/rewards.py): function, reward model, human, mix."""
from __future__ import annotations

import pytest

from rlhf.rewards import FunctionReward, HumanReward, MixReward, RewardModelReward


def test_vader_function_rewards_score_the_answer_alone_or_with_the_prompt():
    reward = FunctionReward.from_spec("vader")
    # The prompt is very negative; "vader" scores only the answer, "vader-with-prompt" the two together.
    prompts = ["I hated this awful, dreadful film"] * 2
    answers = [" It was wonderful and moving.", " It was a bore."]
    scores = reward(prompts, answers)
    # VADER's compound = x / sqrt(x^2 + 15) of the summed lexicon valences x (rounded to 4 places):
    # "wonderful" 2.7 ("moving" is not in the lexicon): 2.7 / sqrt(7.29 + 15) = 0.5719; "bore" -1.0: -1 / 4 = -0.25
    assert scores == [0.5719, -0.25]
    assert reward.last_stats["reward/function_count"] == 2.0
    with_prompt = FunctionReward.from_spec("vader-with-prompt")(prompts, answers)
    # The prompt's "hated", "awful", "dreadful" join in and pull both down, below zero.
    assert with_prompt == [-0.7845, -0.9118]


def test_function_reward_from_module_path_and_bad_output():
    reward = FunctionReward.from_spec("os.path:commonprefix")  # not a reward: returns a string, not scores
    with pytest.raises((ValueError, TypeError)):
        reward(["a"], ["b"])
    with pytest.raises(ValueError, match="module:function"):
        FunctionReward.from_spec("sentiment")
    length = FunctionReward(lambda q, r: [len(x) for x in r])
    assert length(["q", "q"], ["ab", "abcd"]) == [2.0, 4.0]


def test_reward_model_reward_subtracts_the_query_score():
    # A fake scorer: score = number of "good" in prompt + response.
    def scorer(prompts, responses):
        return [float((p + " " + r).count("good")) for p, r in zip(prompts, responses)]

    plain = RewardModelReward(scorer)
    baseline = RewardModelReward(scorer, subtract_query_score=True)
    queries, responses = ["a good start", "plain"], ["good good", "good"]
    # plain: [1 + 2, 0 + 1] = [3, 1]; minus the query's own score [1, 0] -> [2, 1]
    assert plain(queries, responses) == [3.0, 1.0]
    assert baseline(queries, responses) == [2.0, 1.0]
    assert baseline.last_stats["reward/rm_mean"] == pytest.approx(1.5)


def test_reward_model_reward_standardises_with_the_training_score_stats():
    def scorer(prompts, responses):
        return [float((p + " " + r).count("good")) for p, r in zip(prompts, responses)]

    stats = {"mean": 1.0, "std": 4.0, "count": 10}
    queries, responses = ["a good start", "plain"], ["good good", "good"]  # raw [3, 1]
    standard = RewardModelReward(scorer, score_stats=stats, score_std=0.5)
    # (3 - 1) / 4 * 0.5 = 0.25; (1 - 1) / 4 * 0.5 = 0
    assert standard(queries, responses) == [0.25, 0.0]
    assert standard.last_stats["reward/rm_raw_mean"] == 2.0
    assert standard.last_stats["reward/rm_mean"] == pytest.approx(0.125)
    # With the query's score subtracted, the difference [2, 1] has no offset left: only the scale applies.
    baseline = RewardModelReward(scorer, subtract_query_score=True, score_stats=stats, score_std=0.5)
    assert baseline(queries, responses) == [0.25, 0.125]
    with pytest.raises(ValueError, match="score_stats"):
        RewardModelReward(scorer, score_std=0.5)
    with pytest.raises(ValueError, match="std must be > 0"):
        RewardModelReward(scorer, score_stats={"mean": 0.0, "std": 0.0}, score_std=0.5)


def test_a_reward_model_without_score_stats_gives_raw_scores_with_a_warning(tiny_encoder_dir):
    raw = RewardModelReward.from_pretrained(str(tiny_encoder_dir))
    with pytest.warns(UserWarning, match="score_stats.json"):
        asked = RewardModelReward.from_pretrained(str(tiny_encoder_dir), score_std=0.5)
    queries, responses = ["A film"] * 2, ["that I loved.", "that I hated."]
    assert asked(queries, responses) == raw(queries, responses)


def test_reward_model_reward_with_a_real_sequence_classifier(tiny_encoder_dir):
    reward = RewardModelReward.from_pretrained(str(tiny_encoder_dir), subtract_query_score=True)
    scores = reward(["A film", "A film"], ["that I loved.", "that I hated."])
    assert len(scores) == 2 and all(isinstance(s, float) for s in scores)
    assert scores[0] != scores[1]


def test_human_reward_passes_timeout_and_reports_missing():
    calls = []

    def request_and_wait(queries, responses, timeout):
        calls.append((queries, responses, timeout))
        return [0.5, None, -1.0]

    reward = HumanReward(request_and_wait, timeout=7.0)
    assert reward(["q1", "q2", "q3"], ["r1", "r2", "r3"]) == [0.5, None, -1.0]
    assert calls == [(["q1", "q2", "q3"], ["r1", "r2", "r3"], 7.0)]
    assert reward.last_stats["reward/human_missing"] == 1.0
    assert reward.last_stats["reward/human_mean"] == pytest.approx(-0.25)  # (0.5 - 1.0) / 2


def test_mix_reward_weights_and_rm_fallback():
    human = HumanReward(lambda q, r, t: [1.0, None, -0.5], timeout=1)
    rm = lambda q, r: [0.2, 0.4, 0.6]  # noqa: E731
    mix = MixReward(human, rm, w_human=2.0, w_rm=0.5)
    # rated: 2*1.0 + 0.5*0.2 = 2.1;  unrated: (2 + 0.5) * 0.4 = 1.0;  rated: 2*(-0.5) + 0.5*0.6 = -0.7
    assert mix(["a", "b", "c"], ["x", "y", "z"]) == pytest.approx([2.1, 1.0, -0.7])
    assert mix.last_stats["reward/from_human"] == 2.0 and mix.last_stats["reward/from_rm"] == 1.0
    with pytest.raises(ValueError):
        MixReward(human, rm, w_human=-1)
