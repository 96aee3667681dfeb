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


class Fixed:
    """A reward source returning the scores it is given, one list per call."""

    def __init__(self, *calls):
        self.calls = list(calls)
        self.last_stats = {}

    def __call__(self, queries, responses):
        return self.calls.pop(0)


def test_weighted_reward_source():
    from rlhf.constraints import WeightedReward

    reward = WeightedReward([("helpful", Fixed([1.0, 0.0, 2.0]), 0.7), ("safe", Fixed([0.0, None, -1.0]), 0.3)])
    # 0.7 * 1 + 0.3 * 0 = 0.7; answer 2 has no safe score: no reward; 0.7 * 2 + 0.3 * -1 = 1.1
    scores = reward(["q"] * 3, ["a"] * 3)
    assert scores[1] is None and scores[0] == pytest.approx(0.7) and scores[2] == pytest.approx(1.1)
    assert reward.last_stats == pytest.approx({"reward/count": 2.0, "reward/helpful_mean": 1.0,
                                               "reward/safe_mean": -0.5, "reward/mean": 0.9})


def test_constrained_reward_moves_its_multiplier_each_batch():
    from rlhf.constraints import ConstrainedReward

    reward = ConstrainedReward(Fixed([2.0, 1.0], [2.0, 1.0], [2.0, 1.0]),
                               Fixed([-1.0, 3.0], [-3.0, -1.0], [1.0, 1.0]), threshold=0.0, learning_rate=0.5,
                               name="safe")
    # Batch 1: E[C] = 1 >= 0, lambda stays max(0, 0 - 0.5 * 1) = 0: the reward alone.
    assert reward(["q"] * 2, ["a"] * 2) == pytest.approx([2.0, 1.0])
    assert reward.last_stats["reward/lagrange_multiplier"] == 0.0
    # Batch 2: E[C] = -2, lambda = 0 - 0.5 * (-2) = 1: (2 + 1 * -3) / 2 = -0.5, (1 + 1 * -1) / 2 = 0.
    assert reward(["q"] * 2, ["a"] * 2) == pytest.approx([-0.5, 0.0])
    assert reward.last_stats["reward/lagrange_multiplier"] == 1.0
    assert reward.last_stats["reward/safe_mean"] == -2.0 and reward.last_stats["reward/constraint_satisfied"] == 0.0
    # Batch 3: E[C] = 1, lambda = 1 - 0.5 * 1 = 0.5: (2 + 0.5) / 1.5 = 5/3, (1 + 0.5) / 1.5 = 1.
    assert reward(["q"] * 2, ["a"] * 2) == pytest.approx([5 / 3, 1.0])
    assert reward.last_stats["reward/lagrange_multiplier"] == 0.5


def test_a_constraint_at_the_base_s_level_takes_its_threshold_from_the_first_batch():
    from rlhf.constraints import ConstrainedReward

    reward = ConstrainedReward(Fixed([1.0, 1.0], [1.0, 1.0], [1.0, 1.0]),
                               Fixed([0.2, 0.4], [0.0, 0.2], [0.5, 0.7]), threshold=None, learning_rate=2.0)
    # Batch 1 (the base's answers): E[C] = 0.3 is the threshold; lambda = max(0, 0 - 2 * 0) = 0: the reward alone.
    assert reward(["q"] * 2, ["a"] * 2) == pytest.approx([1.0, 1.0])
    assert reward.last_stats["reward/constraint_threshold"] == pytest.approx(0.3)
    assert reward.last_stats["reward/lagrange_multiplier"] == 0.0
    # Batch 2: E[C] = 0.1, 0.2 below: lambda = 2 * 0.2 = 0.4; (1 + 0.4 * (0 - 0.3)) / 1.4 = 0.88 / 1.4,
    # (1 + 0.4 * (0.2 - 0.3)) / 1.4 = 0.96 / 1.4.
    assert reward(["q"] * 2, ["a"] * 2) == pytest.approx([0.88 / 1.4, 0.96 / 1.4])
    assert reward.last_stats["reward/lagrange_multiplier"] == pytest.approx(0.4)
    assert reward.state_dict() == pytest.approx({"lagrange_multiplier": 0.4, "constraint_threshold": 0.3})
    # A resumed run keeps the base's level it measured, not its own first batch's (E[C] = 0.6 here).
    resumed = ConstrainedReward(Fixed([1.0]), Fixed([0.6]), threshold=None, learning_rate=2.0)
    resumed.load_state_dict(reward.state_dict())
    resumed(["q"], ["a"])
    # lambda = max(0, 0.4 - 2 * (0.6 - 0.3)) = 0
    assert resumed.threshold == pytest.approx(0.3) and resumed.multiplier == 0.0
    # A fixed threshold is a setting: not saved, not replaced by a saved one.
    fixed = ConstrainedReward(Fixed([1.0]), Fixed([0.6]), threshold=0.0)
    fixed.load_state_dict({"lagrange_multiplier": 0.1, "constraint_threshold": 0.3})
    assert fixed.threshold == 0.0 and fixed.state_dict() == {"lagrange_multiplier": 0.1}
    with pytest.raises(ValueError, match="finite"):
        ConstrainedReward(Fixed(), Fixed(), threshold=None).load_state_dict(
            {"lagrange_multiplier": 0.0, "constraint_threshold": float("nan")})


class TwoRanks:
    """A sum over two ranks, each rank a thread: both wait for each other's values, as an all-reduce does."""

    def __init__(self):
        import threading

        self.values: dict[int, list[float]] = {}
        self.barrier = threading.Barrier(2)

    def sum_for(self, rank: int):
        def sum_over_ranks(values: list[float]) -> list[float]:
            self.values[rank] = list(values)
            self.barrier.wait()  # both ranks' values are in
            total = [a + b for a, b in zip(self.values[0], self.values[1])]
            self.barrier.wait()  # both have read them before the next step overwrites them
            return total
        return sum_over_ranks


def test_several_ranks_agree_on_the_threshold_and_the_multiplier_of_the_whole_batch():
    import threading

    from rlhf.constraints import ConstrainedReward

    # Each rank scores its own half of each step's batch; constraint scores per rank and step:
    constraint = {0: Fixed([0.0, 0.2], [0.1, 0.3], [0.5, 0.5]), 1: Fixed([0.6, 1.0], [0.2, 0.4], [0.5, 0.5])}
    rewards = {r: ConstrainedReward(Fixed([1.0, 1.0], [1.0, 1.0], [1.0, 1.0]), constraint[r], threshold=None,
                                    learning_rate=1.0) for r in (0, 1)}
    ranks, seen = TwoRanks(), {0: [], 1: []}

    def rank(r: int) -> None:
        for _ in range(3):
            scores = rewards[r](["q"] * 2, ["a"] * 2)
            rewards[r].synchronise(ranks.sum_for(r))  # after the step
            seen[r].append((scores, rewards[r].threshold, rewards[r].multiplier))

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    # Step 1: the base's level is the mean over both ranks' answers, (0 + 0.2 + 0.6 + 1) / 4 = 0.45 (alone, each
    # rank would hold its own: 0.1 and 0.8); lambda = max(0, 0 - (0.45 - 0.45)) = 0.
    # Step 2: E[C] = (0.1 + 0.3 + 0.2 + 0.4) / 4 = 0.25: lambda = 0 - 1 * (0.25 - 0.45) = 0.2 on both ranks
    # (alone: rank 0 max(0, -(0.2 - 0.1)) = 0, rank 1 0.8 - 0.3 = 0.5).
    # Step 3: each rank scores with 0.2 and moves it on its own half (E[C] 0.5 on both): max(0, 0.2 - 0.05) = 0.15,
    # (1 + 0.15 * (0.5 - 0.45)) / 1.15; the agreed update on the whole batch is the same 0.15.
    for r in (0, 1):
        assert [threshold for _, threshold, _ in seen[r]] == pytest.approx([0.45] * 3)
        assert [multiplier for _, _, multiplier in seen[r]] == pytest.approx([0.0, 0.2, 0.15])
        assert seen[r][2][0] == pytest.approx([(1 + 0.15 * 0.05) / 1.15] * 2)
        assert rewards[r].state_dict() == pytest.approx({"lagrange_multiplier": 0.15, "constraint_threshold": 0.45})
