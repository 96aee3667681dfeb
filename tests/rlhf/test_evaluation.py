"""rlhf.evaluation: the held-out metrics, checked against hand-computed values and a one-at-a-time loop."""
from __future__ import annotations

import copy

import pytest
import torch

from rlhf.evaluation import answer_vader, distinct_n, evaluate_policy, response_logprob_sums
from rlhf.generation import build_prompt_ids


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from rlhf.loading import load_causal_lm, load_tokenizer

    return load_causal_lm(tiny_model_dir).eval(), load_tokenizer(tiny_model_dir)


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
