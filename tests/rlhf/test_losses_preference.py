"""Preference losses against hand-computed values, plus a float64 loop invariance check."""
from __future__ import annotations

import math

import pytest
import torch

from rlhf.losses import dpo_loss, pairwise_reward_loss


def _softplus(x: float) -> float:  # -log sigmoid(-x) = log(1 + e^x)
    return math.log1p(math.exp(x))


def test_pairwise_reward_loss_hand_values():
    r_chosen, r_rejected = torch.tensor([2.0, 0.0]), torch.tensor([1.0, 0.0])
    # diffs 1 and 0: -log sigmoid(1) = log(1 + e^-1) = 0.313262, -log sigmoid(0) = log 2 = 0.693147
    # mean = (0.313262 + 0.693147) / 2 = 0.503204
    assert pairwise_reward_loss(r_chosen, r_rejected).item() == pytest.approx(0.503204, abs=1e-5)
    # margin 0.5 on the first pair: diff 0.5 -> log(1 + e^-0.5) = 0.474077; mean = (0.474077 + 0.693147) / 2 = 0.583612
    margin = torch.tensor([0.5, 0.0])
    assert pairwise_reward_loss(r_chosen, r_rejected, margin).item() == pytest.approx(0.583612, abs=1e-5)
    # centering: mean((r_c + r_r)^2) = ((2 + 1)^2 + 0) / 2 = 4.5; 0.503204 + 0.1 * 4.5 = 0.953204
    assert pairwise_reward_loss(r_chosen, r_rejected, center_coef=0.1).item() == pytest.approx(0.953204, abs=1e-5)


def test_pairwise_reward_loss_pushes_chosen_up():
    r_chosen = torch.tensor([0.3], requires_grad=True)
    r_rejected = torch.tensor([0.1], requires_grad=True)
    pairwise_reward_loss(r_chosen, r_rejected).backward()
    # d/dr_c -log sigmoid(r_c - r_r) = -(1 - sigmoid(0.2)) = -0.450166; the rejected gradient is its negative
    assert r_chosen.grad.item() == pytest.approx(-0.450166, abs=1e-5)
    assert r_rejected.grad.item() == pytest.approx(0.450166, abs=1e-5)


def _logps():
    # policy chosen -10, rejected -12; reference -11 for both:
    # chosen log-ratio +1, rejected log-ratio -1, logits = 1 - (-1) = 2
    return torch.tensor([-10.0]), torch.tensor([-12.0]), torch.tensor([-11.0]), torch.tensor([-11.0])


def test_dpo_sigmoid_hand_values():
    losses, chosen_rewards, rejected_rewards = dpo_loss(*_logps(), beta=0.5, loss_type="sigmoid")
    # -log sigmoid(0.5 * 2) = log(1 + e^-1) = 0.313262
    assert losses.item() == pytest.approx(0.313262, abs=1e-5)
    # rewards = beta * log-ratio: 0.5 * 1 = 0.5 and 0.5 * -1 = -0.5
    assert chosen_rewards.item() == pytest.approx(0.5)
    assert rejected_rewards.item() == pytest.approx(-0.5)


def test_dpo_label_smoothing_hand_values():
    losses, _, _ = dpo_loss(*_logps(), beta=0.5, loss_type="sigmoid", label_smoothing=0.1)
    # 0.9 * -log sigmoid(1) + 0.1 * -log sigmoid(-1) = 0.9 * 0.313262 + 0.1 * 1.313262 = 0.413262
    assert losses.item() == pytest.approx(0.413262, abs=1e-5)


def test_dpo_ipo_hand_values():
    # (logits - 1 / (2 beta))^2: beta 0.5 -> (2 - 1)^2 = 1; beta 0.25 -> (2 - 2)^2 = 0; beta 1 -> (2 - 0.5)^2 = 2.25
    assert dpo_loss(*_logps(), beta=0.5, loss_type="ipo")[0].item() == pytest.approx(1.0)
    assert dpo_loss(*_logps(), beta=0.25, loss_type="ipo")[0].item() == pytest.approx(0.0)
    assert dpo_loss(*_logps(), beta=1.0, loss_type="ipo")[0].item() == pytest.approx(2.25)


def test_dpo_hinge_hand_values():
    # relu(1 - beta * logits): beta 0.5 -> relu(1 - 1) = 0; beta 0.1 -> relu(1 - 0.2) = 0.8
    assert dpo_loss(*_logps(), beta=0.5, loss_type="hinge")[0].item() == pytest.approx(0.0)
    assert dpo_loss(*_logps(), beta=0.1, loss_type="hinge")[0].item() == pytest.approx(0.8)


def test_dpo_vectorised_equals_float64_loop():
    gen = torch.Generator().manual_seed(0)
    pc, pr, rc, rr = (-20 * torch.rand(6, generator=gen, dtype=torch.float64) for _ in range(4))
    beta = 0.3
    for loss_type in ("sigmoid", "ipo", "hinge"):
        losses, _, _ = dpo_loss(pc, pr, rc, rr, beta=beta, loss_type=loss_type)
        for i in range(6):
            logits = (pc[i].item() - rc[i].item()) - (pr[i].item() - rr[i].item())
            expected = {
                "sigmoid": _softplus(-beta * logits),
                "ipo": (logits - 1 / (2 * beta)) ** 2,
                "hinge": max(0.0, 1 - beta * logits),
            }[loss_type]
            assert losses[i].item() == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_dpo_unknown_loss_type_raises():
    with pytest.raises(ValueError, match="loss_type='kto'"):
        dpo_loss(*_logps(), beta=0.1, loss_type="kto")
