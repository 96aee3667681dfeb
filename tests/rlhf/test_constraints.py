"""Several criteria in one reward: weighted sums and a Lagrangian constraint, against hand-worked values."""
import pytest
import torch

from rlhf.constraints import lagrangian_rewards, update_multiplier, weighted_rewards


def test_weighted_rewards():
    scores = torch.tensor([[1.0, 0.0, 2.0],    # helpful
                           [0.0, 1.0, -1.0]])  # safe
    # 0.7 * helpful + 0.3 * safe: [0.7, 0.3, 1.4 - 0.3 = 1.1]
    assert torch.allclose(weighted_rewards(scores, [0.7, 0.3]), torch.tensor([0.7, 0.3, 1.1]))
    with pytest.raises(ValueError, match="one row per weight"):
        weighted_rewards(scores, [1.0])


def test_lagrangian_rewards():
    reward = torch.tensor([2.0, 1.0])
    constraint = torch.tensor([-1.0, 3.0])
    # lambda 0: the reward alone.
    assert torch.allclose(lagrangian_rewards(reward, constraint, 0.0, 0.0), reward)
    # lambda 1, threshold 0: (2 + 1 * (-1 - 0)) / 2 = 0.5; (1 + 3) / 2 = 2.0: the safe answer now wins.
    assert torch.allclose(lagrangian_rewards(reward, constraint, 0.0, 1.0), torch.tensor([0.5, 2.0]))
    # lambda 3, threshold 1: (2 + 3 * (-2)) / 4 = -1.0; (1 + 3 * 2) / 4 = 1.75.
    assert torch.allclose(lagrangian_rewards(reward, constraint, 1.0, 3.0), torch.tensor([-1.0, 1.75]))
    with pytest.raises(ValueError, match="never negative"):
        lagrangian_rewards(reward, constraint, 0.0, -0.1)


def test_update_multiplier():
    # Broken (mean -0.5 below 0): 0.2 - 0.1 * (-0.5 - 0) = 0.25.
    assert update_multiplier(0.2, -0.5, 0.0, 0.1) == pytest.approx(0.25)
    # Holding (mean 1.0 above 0): 0.2 - 0.1 * 1.0 = 0.1; a large surplus stops at 0.
    assert update_multiplier(0.2, 1.0, 0.0, 0.1) == pytest.approx(0.1)
    assert update_multiplier(0.2, 10.0, 0.0, 0.1) == 0.0
