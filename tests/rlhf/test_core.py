import math

import pytest
import torch

from rlhf.core import (
    RunningMoments,
    entropy_from_logits,
    flatten_dict,
    logprobs_from_logits,
    masked_mean,
    masked_var,
    masked_whiten,
    pad_sequences,
    response_mask_after_eos,
    stats_to_floats,
    trim_response,
)

VALUES = torch.tensor([1.0, 2.0, 3.0, 4.0])
MASK = torch.tensor([1, 1, 0, 1])


def test_masked_mean_ignores_masked_positions():
    # (1 + 2 + 4) / 3 = 7/3
    assert masked_mean(VALUES, MASK).item() == pytest.approx(7 / 3)
    # per row: [1, 2] -> 1.5; [3, 4] with mask [0, 1] -> 4
    rows = masked_mean(VALUES.view(2, 2), MASK.view(2, 2), dim=1)
    assert rows.tolist() == pytest.approx([1.5, 4.0])


def test_masked_var_biased_and_unbiased():
    # mean 7/3; squared deviations 16/9, 1/9, 25/9 sum to 42/9; / 3 = 14/9; Bessel * 3/2 = 7/3
    assert masked_var(VALUES, MASK, unbiased=False).item() == pytest.approx(14 / 9)
    assert masked_var(VALUES, MASK).item() == pytest.approx(7 / 3)
    with pytest.raises(ValueError, match="at least 2"):
        masked_var(VALUES, torch.tensor([0, 0, 1, 0]))


def test_masked_whiten_hand_values_and_zero_on_mask():
    out = masked_whiten(VALUES, MASK)
    # (1 - 7/3) / sqrt(7/3) = -1.33333 / 1.52753 = -0.87287
    assert out[0].item() == pytest.approx(-0.87287, abs=1e-4)
    assert out[2].item() == 0.0
    # shift_mean=False keeps the mean: -0.87287 + 7/3 = 1.46046
    assert masked_whiten(VALUES, MASK, shift_mean=False)[0].item() == pytest.approx(1.46046, abs=1e-4)
    # one unmasked value has no spread: 0, not NaN (a batch of one one-token response)
    assert masked_whiten(VALUES, torch.tensor([0, 1, 0, 0])).tolist() == [0.0, 0.0, 0.0, 0.0]


def test_masked_whiten_equals_whitening_the_unmasked_values_alone():
    torch.manual_seed(0)
    x, mask = torch.randn(3, 5), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    kept = x[mask.bool()]
    expected = (kept - kept.mean()) / kept.std()  # torch.std is unbiased, as masked_var
    assert torch.allclose(masked_whiten(x, mask)[mask.bool()], expected, atol=1e-5)


def test_logprobs_and_entropy_from_logits():
    logits = torch.tensor([[[0.0, math.log(3.0)], [0.0, 0.0]]])  # (1, 2, 2): p = [1/4, 3/4] and [1/2, 1/2]
    # log(3/4) = -0.287682; log(1/2) = -0.693147
    assert logprobs_from_logits(logits, torch.tensor([[1, 0]]))[0].tolist() == pytest.approx([-0.287682, -0.693147], abs=1e-6)
    # H([1/4, 3/4]) = 0.25 ln 4 + 0.75 ln(4/3) = 0.346574 + 0.215762 = 0.562335; H([1/2, 1/2]) = ln 2
    assert entropy_from_logits(logits)[0].tolist() == pytest.approx([0.562335, math.log(2)], abs=1e-6)


def test_logprobs_vectorised_equals_float64_loop():
    torch.manual_seed(1)
    logits, labels = torch.randn(2, 3, 7), torch.randint(0, 7, (2, 3))
    out = logprobs_from_logits(logits, labels)
    for b in range(2):
        for t in range(3):
            row = logits[b, t].double()
            expected = row[labels[b, t]] - torch.log(torch.exp(row).sum())
            assert out[b, t].item() == pytest.approx(expected.item(), abs=1e-5)


def test_response_mask_keeps_first_eos_and_drops_the_rest():
    responses = torch.tensor([[5, 2, 7, 2], [5, 6, 7, 8], [2, 9, 9, 9]])
    assert response_mask_after_eos(responses, eos_token_id=2, pad_token_id=2).tolist() == [
        [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    # no EOS id: padding decides
    assert response_mask_after_eos(torch.tensor([[4, 4, 0]]), None, 0).tolist() == [[1, 1, 0]]
    assert trim_response(torch.tensor([5, 2, 7, 2]), 2, 2).tolist() == [5, 2]
    # several EOS ids (e.g. <|eot_id|> and <|end_of_text|>): the first of any ends the response
    assert response_mask_after_eos(torch.tensor([[5, 7, 2, 9]]), [2, 7], None).tolist() == [[1, 1, 0, 0]]


def test_pad_sequences_both_sides():
    seqs = [torch.tensor([1, 2, 3]), torch.tensor([4])]
    assert pad_sequences(seqs, 0, "right").tolist() == [[1, 2, 3], [4, 0, 0]]
    assert pad_sequences(seqs, 0, "left").tolist() == [[1, 2, 3], [0, 0, 4]]
    with pytest.raises(ValueError, match="side"):
        pad_sequences(seqs, 0, "middle")


def test_flatten_dict_and_stats_to_floats():
    assert flatten_dict({"ppo": {"loss": {"value": 1}, "lr": 2}}) == {"ppo/loss/value": 1, "ppo/lr": 2}
    assert stats_to_floats({"a": torch.tensor([1.0, 3.0]), "b": 2, "c": "text"}) == {"a": 2.0, "b": 2.0}


def test_running_moments_match_the_whole_sample():
    running = RunningMoments()
    running.update(torch.tensor([1.0, 2.0, 3.0]))
    running.update(torch.tensor([4.0, 5.0]))
    # 1..5: mean 3, population variance (4 + 1 + 0 + 1 + 4) / 5 = 2
    assert running.mean == pytest.approx(3.0)
    assert running.var == pytest.approx(2.0)
    clone = RunningMoments()
    clone.load_state_dict(running.state_dict())
    assert (clone.mean, clone.var, clone.count) == (running.mean, running.var, running.count)


def test_running_moments_over_two_ranks_equal_the_moments_of_both_batches():
    # Rank 0 holds [1, 2], rank 1 holds [3, 6]. A fake all-reduce adds rank 1's contribution to each of the
    # two reductions rank 0 makes: (sum, count) = (9, 2), then squared deviations from the global mean 3:
    # (3-3)^2 + (6-3)^2 = 9. Global: mean (1+2+3+6)/4 = 3, population variance (4 + 1 + 0 + 9) / 4 = 3.5.
    other_rank = [torch.tensor([9.0, 2.0], dtype=torch.float64), torch.tensor(9.0, dtype=torch.float64)]
    calls = iter(other_rank)
    running = RunningMoments()
    batch_mean, batch_std = running.update(torch.tensor([1.0, 2.0]), reduce_sum=lambda t: t + next(calls))
    assert (running.mean, running.var) == (pytest.approx(3.0), pytest.approx(3.5))
    assert batch_mean == pytest.approx(3.0)
    assert batch_std == pytest.approx((14 / 3) ** 0.5)  # unbiased: 14 / (4 - 1)
    single = RunningMoments()
    single.update(torch.tensor([1.0, 2.0, 3.0, 6.0]))
    assert (single.mean, single.var) == (pytest.approx(running.mean), pytest.approx(running.var))
