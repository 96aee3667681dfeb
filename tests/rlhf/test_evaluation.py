"""rlhf.evaluation: the held-out metrics, checked against hand-computed values and a one-at-a-time loop."""
from __future__ import annotations

import copy

import pytest
import torch

from rlhf.evaluation import answer_vader, distinct_n, evaluate_policy, response_logprob_sums
from rlhf.generation import build_prompt_ids


def test_distinct_n_by_hand():
    # "a b a b" -> bigrams (a b), (b a), (a b): 2 unique of 3.  "A B c" -> (a b), (b c): adds (b c) only.
    assert distinct_n(["a b a b"], 2) == pytest.approx(2 / 3)
    assert distinct_n(["a b a b", "A B c"], 2) == pytest.approx(3 / 5)
    assert distinct_n(["great great great great"], 2) == pytest.approx(1 / 3)
    assert distinct_n(["one", ""], 2) == 0.0  # no bigram at all
    assert distinct_n(["x y z"], 1) == 1.0


def test_answer_vader_ignores_the_prompt():
    scores = answer_vader(["I hated this awful, terrible film", "I loved it"], ["It was wonderful and great!", "the film"])
    assert scores[0] > 0.5  # only the answer counts, however negative the prompt
    assert scores[1] == 0.0


def test_response_logprob_sums_match_one_at_a_time(tiny):
    model, tokenizer = tiny
    torch.manual_seed(0)
    queries = [torch.randint(10, 500, (n,)) for n in (3, 7, 5)]
    responses = [torch.randint(10, 500, (n,)) for n in (4, 1, 6)]
    batched = response_logprob_sums(model, queries, responses, tokenizer.pad_token_id)
    for i, (q, r) in enumerate(zip(queries, responses)):
        with torch.no_grad():
            logits = model(torch.cat([q, r])[None]).logits[0, len(q) - 1 : -1].double()  # (R, V)
        expected = torch.log_softmax(logits, -1).gather(-1, r[:, None]).sum()
        assert float(batched[i]) == pytest.approx(float(expected), abs=1e-4)
    # An empty response has log-prob 0 (nothing was sampled).
    assert response_logprob_sums(model, queries[:1], [torch.zeros(0, dtype=torch.long)], tokenizer.pad_token_id).tolist() == [0.0]


def test_evaluate_policy_against_itself_and_a_changed_copy(tiny):
    model, tokenizer = tiny
    prompts = ["I watched this film last night and", "The opening scene of this movie"]
    reward = lambda queries, answers: [float(len(a)) for a in answers]  # noqa: E731
    result = evaluate_policy(model, tokenizer, prompts, reward, ref_model=model, samples=3, max_new_tokens=6)
    assert (result.prompts, result.samples, len(result.rows)) == (2, 3, 6)
    assert result.mean_kl == pytest.approx(0.0, abs=1e-5)  # the policy is its own base
    assert [r["prompt"] for r in result.rows] == [prompts[0]] * 3 + [prompts[1]] * 3
    assert result.mean_reward == pytest.approx(sum(len(r["answer"]) for r in result.rows) / 6)
    assert result.positive_share == sum(r["reward"] > 0.5 for r in result.rows) / 6
    assert 1 <= result.mean_length <= 6
    assert set(result.metrics()) == {"eval/reward_mean", "eval/positive_share", "eval/length_mean",
                                     "eval/distinct_2", "eval/kl"}
    # Same seed, same answers; a changed copy of the model is measurably far from the base.
    changed = copy.deepcopy(model)
    with torch.no_grad():
        changed.lm_head.weight.mul_(3.0)
    again = evaluate_policy(model, tokenizer, prompts, reward, ref_model=changed, samples=3, max_new_tokens=6)
    assert [r["answer"] for r in again.rows] == [r["answer"] for r in result.rows]
    assert again.mean_kl != pytest.approx(0.0, abs=1e-3)
    # A custom query builder is used for every sample.
    seen = []
    evaluate_policy(model, tokenizer, prompts[:1], reward, samples=2, max_new_tokens=2,
                    build_query=lambda text: seen.append(text) or build_prompt_ids(tokenizer, text))
    assert seen == [prompts[0]] * 2
    with pytest.raises(ValueError, match="no prompts"):
        evaluate_policy(model, tokenizer, [], reward)


def test_win_rate_by_hand():
    from rlhf.evaluation import win_rate

    # Two prompts, two answers each: win (0.9 > 0.1), tie (0.5 = 0.5), loss (0.2 < 0.3), win (1.0 > -1.0).
    result = win_rate([0.9, 0.5, 0.2, 1.0], [0.1, 0.5, 0.3, -1.0], [0, 0, 1, 1])
    assert (result.wins, result.ties, result.losses, result.prompts) == (2, 1, 1, 2)
    assert result.rate == pytest.approx((2 + 0.5) / 4)  # ties count half: 0.625
    with pytest.raises(ValueError, match="one each"):
        win_rate([1.0], [0.0, 1.0], [0])


def test_wilson_interval_by_hand():
    from rlhf.evaluation import wilson_interval

    # p = 0.75, n = 4, z = 1.96: denominator 1 + 3.8416/4 = 1.9604; centre (0.75 + 3.8416/8) / 1.9604 = 0.62753;
    # half-width 1.96 * sqrt(0.75*0.25/4 + 3.8416/64) / 1.9604 = 1.96 * 0.326956 / 1.9604 = 0.326888.
    low, high = wilson_interval(0.75, 4)
    assert low == pytest.approx(0.30064, abs=1e-4) and high == pytest.approx(0.95442, abs=1e-4)
    # All won: the interval still has width (p +- z*se would give [1, 1]); nothing known from no trials.
    low, high = wilson_interval(1.0, 30)
    assert high == 1.0 and 0.88 < low < 0.89
    assert wilson_interval(0.5, 0) == (0.0, 1.0)


def test_evaluate_policy_without_a_measure_reports_no_score(tiny):
    model, tokenizer = tiny
    result = evaluate_policy(model, tokenizer, ["Hello there"], None, samples=2, max_new_tokens=3)
    assert result.mean_reward is None and "eval/reward_mean" not in result.metrics()
    assert set(result.metrics()) == {"eval/length_mean", "eval/distinct_2"}
    assert [row["reward"] for row in result.rows] == [None, None]
