import pytest
import torch

from rlhf.configs import GenerationSettings
from rlhf.samplers import BestOfNSampler, LengthSampler


def test_length_sampler_range_and_seed():
    sampler = LengthSampler(4, 8, torch.Generator().manual_seed(1))
    values = [sampler() for _ in range(200)]
    assert set(values) == {4, 5, 6, 7}  # max excluded, as TRL
    again = LengthSampler(4, 8, torch.Generator().manual_seed(1))
    assert [again() for _ in range(200)] == values
    with pytest.raises(ValueError, match="min_value < max_value"):
        LengthSampler(5, 5)


def test_best_of_n_keeps_the_highest_scored_samples(tiny):
    model, tokenizer = tiny
    seen = []

    def score(texts):  # longer text is better; remember every candidate to check the choice
        seen.extend(texts)
        return [len(t) for t in texts]

    queries = [tokenizer(t, return_tensors="pt").input_ids[0] for t in ["Hello", "The film"]]
    sampler = BestOfNSampler(model, tokenizer, score, sample_size=4, n_candidates=2, seed=3,
                             generation_settings=GenerationSettings(max_new_tokens=6))
    rng_before = torch.get_rng_state()
    best = sampler.generate(queries)
    assert torch.equal(torch.get_rng_state(), rng_before)  # the caller's global RNG is untouched
    assert len(seen) == 8 and len(best) == 2
    for i, query_text in enumerate(["Hello", "The film"]):
        group = seen[4 * i : 4 * i + 4]
        assert all(t.startswith(query_text) for t in group)
        assert [len(t) for t in best[i]] == sorted((len(t) for t in group), reverse=True)[:2]
    # same seed, same choices; the next call draws a new seed
    again = BestOfNSampler(model, tokenizer, lambda texts: [len(t) for t in texts], sample_size=4, n_candidates=2,
                           seed=3, generation_settings=GenerationSettings(max_new_tokens=6))
    assert again.generate(queries) == best


def test_best_of_n_checks_scores_and_sizes(tiny):
    model, tokenizer = tiny
    with pytest.raises(ValueError, match="n_candidates"):
        BestOfNSampler(model, tokenizer, lambda t: [0.0] * len(t), sample_size=2, n_candidates=3)
    sampler = BestOfNSampler(model, tokenizer, lambda t: [0.0], sample_size=2,
                             generation_settings=GenerationSettings(max_new_tokens=2))
    with pytest.raises(ValueError, match="1 scores for 2 texts"):
        sampler.generate(tokenizer("Hi", return_tensors="pt").input_ids[0])
