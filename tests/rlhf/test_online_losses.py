"""The online preference trainers' math (rlhf/online_losses.py) against hand-worked values."""
import math

import pytest
import torch

from rlhf.online_losses import (
    chosen_rejected_rows,
    geometric_mixture_logits,
    missing_eos_penalty,
    nash_md_losses,
    online_dpo_losses,
    value_for_epoch,
    weighted_mean,
    win_probability_from_scores,
    win_probability_from_verdicts,
    xpo_exploration,
)

# Two pairs. Pair 1: policy log-ratios chosen -1 - (-2) = 1, rejected -3 - (-2) = -1, so h = 2.
# Pair 2: chosen -4 - (-3) = -1, rejected -2 - (-3) = 1, so h = -2.
POLICY_CHOSEN, POLICY_REJECTED = torch.tensor([-1.0, -4.0]), torch.tensor([-3.0, -2.0])
REF_CHOSEN, REF_REJECTED = torch.tensor([-2.0, -3.0]), torch.tensor([-2.0, -3.0])


def test_sigmoid_loss_by_hand():
    losses = online_dpo_losses(POLICY_CHOSEN, POLICY_REJECTED, REF_CHOSEN, REF_REJECTED, beta=0.5, loss_type="sigmoid")
    # beta * h = 1 and -1: -log sigmoid(1) = log(1 + e^-1) = 0.31326; -log sigmoid(-1) = log(1 + e) = 1.31326
    assert losses.tolist() == pytest.approx([math.log1p(math.exp(-1)), math.log1p(math.e)], abs=1e-6)
    assert losses.mean().item() == pytest.approx((0.313262 + 1.313262) / 2, abs=1e-5)  # 0.81326


def test_ipo_loss_by_hand_on_sums_not_per_token():
    losses = online_dpo_losses(POLICY_CHOSEN, POLICY_REJECTED, REF_CHOSEN, REF_REJECTED, beta=0.5, loss_type="ipo")
    # 1 / (2 beta) = 1: (2 - 1)^2 = 1 and (-2 - 1)^2 = 9; mean 5 (TRL's online IPO does not divide by length)
    assert losses.tolist() == pytest.approx([1.0, 9.0])
    with pytest.raises(ValueError, match="loss_type='hinge'"):
        online_dpo_losses(POLICY_CHOSEN, POLICY_REJECTED, REF_CHOSEN, REF_REJECTED, 0.5, "hinge")


def test_a_judge_s_confidence_trains_each_pair_only_as_far_as_it_is_sure():
    # Pair 1 at p = 0.75: -(0.75 log sigmoid(1) + 0.25 log sigmoid(-1)) = 0.75 * 0.31326 + 0.25 * 1.31326 = 0.56326.
    # Pair 2 at p = 1: the hard loss, log(1 + e) = 1.31326.
    sure = torch.tensor([0.75, 1.0])
    losses = online_dpo_losses(POLICY_CHOSEN, POLICY_REJECTED, REF_CHOSEN, REF_REJECTED, 0.5, "sigmoid", sure)
    assert losses.tolist() == pytest.approx([0.563262, 1.313262], abs=1e-6)
    # IPO: targets (2p - 1) / (2 beta) = 0.5 and 1: (2 - 0.5)^2 = 2.25, (-2 - 1)^2 = 9
    losses = online_dpo_losses(POLICY_CHOSEN, POLICY_REJECTED, REF_CHOSEN, REF_REJECTED, 0.5, "ipo", sure)
    assert losses.tolist() == pytest.approx([2.25, 9.0])
    # The smoothed loss is least where sigmoid(beta * h) = p: at p = 0.75, beta = 0.5, h = 2 log 3 (its gradient 0);
    # a pair at p = 1/2 pulls h back to 0.
    for p, best in ((0.75, 2 * math.log(3)), (0.5, 0.0)):
        h = torch.tensor([best], requires_grad=True)
        online_dpo_losses(h, torch.zeros(1), torch.zeros(1), torch.zeros(1), 0.5, "sigmoid",
                          torch.tensor([p])).sum().backward()
        assert h.grad.item() == pytest.approx(0.0, abs=1e-6)


def test_verdicts_pick_rows_and_ties_weigh_nothing():
    # B = 3 prompts; rows 0-2 the first answers, 3-5 the second. Verdicts: first wins, second wins, tie.
    chosen, rejected, weight = chosen_rejected_rows(torch.tensor([0, 1, -1]), 3)
    assert chosen.tolist() == [0, 4, 2] and rejected.tolist() == [3, 1, 5] and weight.tolist() == [1.0, 1.0, 0.0]
    # tie left out of the mean: (0.3 + 0.9) / 2 = 0.6, not (0.3 + 0.9 + 5) / 3
    assert weighted_mean(torch.tensor([0.3, 0.9, 5.0]), weight).item() == pytest.approx(0.6)
    # all ties: 0, still a tensor on the graph
    losses = torch.tensor([1.0, 2.0], requires_grad=True)
    total = weighted_mean(losses, torch.zeros(2))
    total.backward()
    assert total.item() == 0 and losses.grad.tolist() == [0.0, 0.0]


def test_sigmoid_loss_equals_a_float64_loop():
    generator = torch.Generator().manual_seed(0)
    values = [torch.randn(5, generator=generator, dtype=torch.float64) for _ in range(4)]
    vectorised = online_dpo_losses(*values, beta=0.3, loss_type="sigmoid")
    for i in range(5):
        h = (float(values[0][i]) - float(values[1][i])) - (float(values[2][i]) - float(values[3][i]))
        assert vectorised[i].item() == pytest.approx(math.log1p(math.exp(-0.3 * h)), rel=1e-12)


def test_missing_eos_penalty_and_epoch_schedules():
    scores = missing_eos_penalty(torch.tensor([1.0, 2.0]), torch.tensor([True, False]), 1.5)
    assert scores.tolist() == [1.0, 0.5]  # 2.0 - 1.5 on the answer that never ended
    assert missing_eos_penalty(torch.tensor([1.0]), torch.tensor([False]), None).tolist() == [1.0]
    assert value_for_epoch(0.1, 3.0) == 0.1
    # one per epoch, the last for later epochs; a fractional epoch is the epoch it is in
    assert [value_for_epoch([0.1, 0.05, 0.02], e) for e in (0.0, 0.5, 1.0, 2.9, 7.0)] == [0.1, 0.1, 0.05, 0.02, 0.02]


def test_xpo_exploration_by_hand():
    # alpha 0.1 times the policy's summed log-probs of the reference's answers -5 and -10
    assert xpo_exploration(torch.tensor([-5.0, -10.0]), 0.1).tolist() == pytest.approx([-0.5, -1.0])


def test_geometric_mixture_by_hand():
    policy, ref = torch.tensor([[0.0, 0.0]]), torch.tensor([[math.log(4.0), 0.0]])
    # c = 0.5: logits 0.5 * (ln 4, 0) + 0.5 * (0, 0) = (ln 2, 0) -> probabilities (2/3, 1/3)
    assert geometric_mixture_logits(policy, ref, 0.5).exp().tolist()[0] == pytest.approx([2 / 3, 1 / 3])
    assert geometric_mixture_logits(policy, ref, 0.0).exp().tolist()[0] == pytest.approx([0.5, 0.5])  # the policy
    assert geometric_mixture_logits(policy, ref, 1.0).exp().tolist()[0] == pytest.approx([0.8, 0.2])  # the reference


def test_win_probabilities():
    assert win_probability_from_verdicts(torch.tensor([0, 1, -1])).tolist() == [1.0, 0.0, 0.5]
    # sigmoid(2 - 0) = 0.8808; sigmoid(0) = 0.5
    assert win_probability_from_scores(torch.tensor([2.0, 1.0]), torch.tensor([0.0, 1.0])).tolist() == \
        pytest.approx([1 / (1 + math.exp(-2)), 0.5])


def test_nash_md_loss_and_gradient_by_hand():
    policy = torch.tensor([[-1.0, -2.0], [-2.0, 0.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.5], [-1.0, -9.0]])
    mask = torch.tensor([[1, 1], [1, 0]])  # answer 2 has one token; its second slot is padding
    loss, score, kl = nash_md_losses(policy, ref, mask, torch.tensor([1.0, 0.0]), beta=0.1)
    # answer 1: P(win) 1: score 0.5 * (-1 - 2) = -1.5; log-ratios 0.5, -0.5: KL term 0.5 * -1 + -0.5 * -2 = 0.5;
    #   loss 0.1 * 0.5 + 1.5 = 1.55.  answer 2: P(win) 0: score -0.5 * -2 = 1.0; log-ratio -1: KL term -1 * -2 = 2;
    #   loss 0.1 * 2 - 1 = -0.8
    assert loss.tolist() == pytest.approx([1.55, -0.8])
    assert score.tolist() == pytest.approx([-1.5, 1.0]) and kl.tolist() == pytest.approx([0.0, -1.0])
    loss.sum().backward()
    # d loss / d log pi_t = beta * sg(log-ratio_t) - (P - 0.5) on answer tokens, 0 on padding:
    # 0.1 * 0.5 - 0.5 = -0.45; 0.1 * -0.5 - 0.5 = -0.55; 0.1 * -1 + 0.5 = 0.4
    assert policy.grad.tolist() == [pytest.approx([-0.45, -0.55]), pytest.approx([0.4, 0.0])]
