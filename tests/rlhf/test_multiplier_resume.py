"""A constrained reward's Lagrange multiplier as a checkpoint keeps it (rlhf.constraints.ConstrainedReward)."""
import json

import pytest

from rlhf.constraints import ConstrainedReward


def constant(value):
    def source(queries, responses):
        return [value for _ in responses]
    return source


def test_a_restored_multiplier_goes_on_from_the_saved_one():
    first = ConstrainedReward(constant(1.0), constant(-1.0), threshold=0.0, learning_rate=0.25)
    first(["q"], ["a"])
    first(["q"], ["a"])
    # Two batches 1 below the threshold: 0 + 0.25 * 1 = 0.25, then 0.5.
    saved = json.loads(json.dumps(first.state_dict()))  # as the checkpoint's JSON file holds it
    assert saved == {"lagrange_multiplier": 0.5}

    resumed = ConstrainedReward(constant(1.0), constant(-1.0), threshold=0.0, learning_rate=0.25)
    resumed.load_state_dict(saved)
    # The third batch steps from 0.5 to 0.75 (a fresh one would be at 0.25): (1 + 0.75 * (-1 - 0)) / 1.75 = 1/7.
    assert resumed(["q"], ["a"]) == pytest.approx([1 / 7])
    assert resumed.last_stats["reward/lagrange_multiplier"] == pytest.approx(0.75)


@pytest.mark.parametrize("bad", [-0.5, float("nan")])
def test_a_saved_multiplier_below_zero_is_refused(bad):
    reward = ConstrainedReward(constant(1.0), constant(-1.0), threshold=0.0)
    with pytest.raises(ValueError, match="Lagrange multiplier"):
        reward.load_state_dict({"lagrange_multiplier": bad})
    assert reward.multiplier == 0.0
