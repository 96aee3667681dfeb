import pytest

from rlhf.kl_control import AdaptiveKLController, FixedKLController


def test_adaptive_controller_hand_computed_updates():
    ctl = AdaptiveKLController(0.2, target=6.0, horizon=10000)
    # KL 9: error 9/6 - 1 = 0.5, clipped to 0.2; beta *= 1 + 0.2 * 16 / 10000 = 1.00032 -> 0.200064
    ctl.update(9.0, n_steps=16)
    assert ctl.value == pytest.approx(0.200064)
    # KL 3: error -0.5 -> -0.2; beta *= 1 - 0.00032 -> 0.200064 * 0.99968 = 0.19999998
    ctl.update(3.0, n_steps=16)
    assert ctl.value == pytest.approx(0.19999998, rel=1e-7)
    # KL 6.6: error 0.1 (inside the clip); beta *= 1 + 0.1 * 1000 / 10000 = 1.01 -> 0.20199998
    ctl.update(6.6, n_steps=1000)
    assert ctl.value == pytest.approx(0.20199998, rel=1e-7)


def test_adaptive_controller_at_target_is_unchanged_and_round_trips():
    ctl = AdaptiveKLController(0.1, target=6.0, horizon=100)
    ctl.update(6.0, n_steps=50)
    assert ctl.value == pytest.approx(0.1)
    other = AdaptiveKLController(0.5, target=6.0, horizon=100)
    other.load_state_dict(ctl.state_dict())
    assert other.value == ctl.value


def test_fixed_controller_never_moves():
    ctl = FixedKLController(0.3)
    ctl.update(100.0, n_steps=10**6)
    assert ctl.value == 0.3


def test_adaptive_controller_rejects_bad_target():
    with pytest.raises(ValueError, match="target=0"):
        AdaptiveKLController(0.1, target=0, horizon=10)
