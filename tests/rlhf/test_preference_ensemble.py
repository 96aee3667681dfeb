import math

import pytest
import torch

from rlhf.preference_ensemble import (FrozenTextEncoder, PreferenceEnsemble, bradley_terry_head,
                                      preference_information)


def test_preference_information_by_hand():
    # Members agree (even on a coin flip): no information.
    assert preference_information(torch.tensor([[0.0, 0.0], [0.0, 0.0]])) == pytest.approx(0.0, abs=1e-6)
    assert preference_information(torch.tensor([[2.0, 0.0], [2.0, 0.0]])) == pytest.approx(0.0, abs=1e-6)
    # Member 1: p(a > b) = sigmoid(ln 3) = 0.75; member 2: 0.25. Mean 0.5: H = ln 2 = 0.693147;
    # H(0.75) = -(0.75 ln 0.75 + 0.25 ln 0.25) = 0.215762 + 0.346574 = 0.562335. BALD = 0.130812.
    ln3 = math.log(3)
    assert preference_information(torch.tensor([[ln3, 0.0], [0.0, ln3]])) == pytest.approx(0.130812, abs=1e-5)
    # A group of three averages its three pairs: (a, b) as above, c always far below -> ~0 for (a, c), (b, c).
    group = torch.tensor([[ln3, 0.0, -40.0], [0.0, ln3, -40.0]])
    assert preference_information(group) == pytest.approx(0.130812 / 3, abs=1e-5)
    assert preference_information(torch.tensor([[1.0], [2.0]])) == 0.0


def test_bradley_terry_head_one_pair_by_hand():
    # One pair, x_chosen - x_rejected = 1, init 0, l2 = 0.5: the minimum of softplus(-w) + 0.25 w^2 is where
    # its derivative -sigmoid(-w) + 0.5 w is 0, i.e. sigmoid(-w) = 0.5 w: w = 0.6750 (sigmoid(-0.675) = 0.33738).
    w = bradley_terry_head(torch.tensor([[1.0]]), torch.tensor([[0.0]]), torch.zeros(1), l2=0.5)
    assert float(torch.sigmoid(-w)) == pytest.approx(0.5 * float(w), abs=1e-5)
    assert float(w) == pytest.approx(0.6750, abs=1e-3)
    # No pairs: the head is its prior.
    prior = torch.tensor([0.3, -0.2])
    assert torch.equal(bradley_terry_head(torch.zeros(0, 2), torch.zeros(0, 2), prior, l2=0.1), prior)


def test_ensemble_learns_a_direction_and_grows_sure_where_labels_are():
    generator = torch.Generator().manual_seed(0)
    dim, truth = 16, torch.zeros(16)
    truth[0] = 3.0  # people prefer answers with a larger first feature
    pool = torch.randn(400, dim, generator=generator)
    a, b = pool[:200], pool[200:]
    better_first = (a @ truth) > (b @ truth)
    chosen = torch.where(better_first[:, None], a, b)
    rejected = torch.where(better_first[:, None], b, a)
    ensemble = PreferenceEnsemble(dim, members=6, l2=0.01, seed=1)
    test_c, test_r = chosen[150:], rejected[150:]
    assert ensemble.agreement(test_c, test_r) == 0.5  # the zero prior ties everything: half credit
    ensemble.fit(chosen[:10], rejected[:10])
    few = ensemble.agreement(test_c, test_r)
    before = ensemble.scores(pool[:50])
    ensemble.fit(chosen[:150], rejected[:150])
    many = ensemble.agreement(test_c, test_r)
    assert many > 0.9 and many >= few
    # More labels: the members disagree less about the same answers' order.
    after = ensemble.scores(pool[:50])
    assert preference_information(after) < preference_information(before)
    assert ensemble.heads.shape == (6, dim) and ensemble.pairs_seen == 150


def test_ensemble_refuses_bad_shapes():
    with pytest.raises(ValueError, match="at least 2"):
        PreferenceEnsemble(4, members=1)
    ensemble = PreferenceEnsemble(4)
    with pytest.raises(ValueError, match=r"\(P, 4\)"):
        ensemble.fit(torch.zeros(3, 5), torch.zeros(3, 5))


def test_frozen_encoder_features_are_cached_and_normalised():
    encoder = FrozenTextEncoder("default-encoder", batch_size=2)
    features = encoder.embed(["A film about", "A film about", "The plot"], ["great fun", "dull and slow", "great fun"])
    assert features.shape == (3, encoder.dim)
    half = encoder.dim // 2
    assert torch.allclose(features[:, :half].norm(dim=-1), torch.ones(3), atol=1e-5)
    assert torch.allclose(features[0, :half], features[2, :half], atol=1e-5)  # same answer alone
    assert not torch.allclose(features[0, half:], features[2, half:], atol=1e-3)  # different prompts
    assert len(encoder._cache) == 3
    again = encoder.embed(["The plot"], ["great fun"])
    assert torch.equal(again[0], features[2]) and len(encoder._cache) == 3


def test_expected_centred_ranks_by_hand():
    from rlhf.preference_ensemble import expected_centred_ranks

    # One member, two answers ln 3 apart: P(b beats a) = sigmoid(ln 3) = 3/4.
    # a wins 1/4 of the time -> 2 * 1/4 - 1 = -1/2; b: 2 * 3/4 - 1 = +1/2.
    assert expected_centred_ranks(torch.tensor([[0.0, math.log(3)]])).tolist() == pytest.approx([-0.5, 0.5])
    # Two members that disagree exactly: P = (3/4 + 1/4) / 2 = 1/2 -> both 0 (the model is not sure).
    both = torch.tensor([[0.0, math.log(3)], [math.log(3), 0.0]])
    assert expected_centred_ranks(both).tolist() == pytest.approx([0.0, 0.0])
    # A sure model (scores far apart) gives the centred ranks of its order: +1, +1/3, -1/3, -1.
    sure = torch.tensor([[300.0, 200.0, 100.0, 0.0]])
    assert expected_centred_ranks(sure).tolist() == pytest.approx([1.0, 1 / 3, -1 / 3, -1.0])
    # Three answers, scores 0, 0, ln 3: the pair of equal answers is a coin flip.
    # a: (1/2 + 1/4) / 2 = 3/8 -> -1/4; b the same; c: (3/4 + 3/4) / 2 = 3/4 -> +1/2. The group sums to 0.
    three = expected_centred_ranks(torch.tensor([[0.0, 0.0, math.log(3)]]))
    assert three.tolist() == pytest.approx([-0.25, -0.25, 0.5]) and float(three.sum()) == pytest.approx(0.0)
    assert expected_centred_ranks(torch.zeros(3, 1)).tolist() == [0.0]


def test_calibrated_temperature_by_hand():
    from rlhf.preference_ensemble import calibrated_temperature

    # One member, margins +1, +1, +1, -1: right 3 times in 4, so the best t has sigmoid(t) = 3/4: t = ln 3.
    t = calibrated_temperature(torch.tensor([[1.0, 1.0, 1.0, -1.0]]))
    assert t == pytest.approx(math.log(3), rel=0.02)  # the log grid's step is 1.8%
    # Margins of 2 with the same record: t = ln 3 / 2 (the scale, not the order, is corrected).
    assert calibrated_temperature(torch.tensor([[2.0, 2.0, 2.0, -2.0]])) == pytest.approx(math.log(3) / 2, rel=0.02)
    # Always right: as sure as the grid allows; no opinion at all (every margin 0): 1.
    assert calibrated_temperature(torch.tensor([[0.5, 0.5]]), high=64.0) == pytest.approx(64.0)
    assert calibrated_temperature(torch.zeros(8, 5)) == 1.0
    assert calibrated_temperature(torch.tensor([[1.0, 1.0, 1.0, -1.0]]), min_pairs=5) == 1.0  # too few yet


def test_the_encoder_reads_answers_past_128_tokens(tiny_encoder_dir):
    """Two answers equal for their first ~200 tokens and different after: the online reward model's features
    must tell them apart (it read only the first 128 tokens before)."""
    encoder = FrozenTextEncoder(str(tiny_encoder_dir))
    common = " ".join(["the invoice export works from the billing page"] * 25)  # ~200 tokens
    first, second = common + " and then it emails you the file.", common + " but only admins can open it."
    assert len(encoder.tokenizer(first)["input_ids"]) > 200
    features = encoder.embed(["How do I export an invoice?"] * 2, [first, second])
    assert not torch.allclose(features[0], features[1])
    assert encoder.max_length == 512  # the encoder's own limit
    assert FrozenTextEncoder(str(tiny_encoder_dir), max_length=128).max_length == 128
