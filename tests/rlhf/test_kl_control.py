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


def test_default_horizon_lets_beta_follow_the_target_within_the_default_run():
    from rlhf.configs import PPOConfig

    config = PPOConfig()
    ctl = AdaptiveKLController(config.init_kl_coef, config.target, config.horizon)
    # The recipe's batch of 64 at KL 12 (twice the target of 6): error clipped to 0.2;
    # beta *= 1 + 0.2 * 64 / 512 = 1.025 each step -> 0.03 * 1.025 = 0.03075 after one step.
    ctl.update(12.0, n_steps=config.batch_size)
    assert ctl.value == pytest.approx(0.03075)
    # 39 more steps at KL 12: 0.03 * 1.025 ** 40 = 0.080552: the coefficient nearly triples within the run
    # (with TRL's horizon of 10000 it would end at 0.03 * 1.00128 ** 40 = 0.03155).
    for _ in range(39):
        ctl.update(12.0, n_steps=config.batch_size)
    assert ctl.value == pytest.approx(0.03 * 1.025 ** 40) and ctl.value == pytest.approx(0.080552, abs=1e-6)
    # Below target it comes back down: KL 3 -> error -0.5 clipped to -0.2 -> beta *= 0.975.
    before = ctl.value
    ctl.update(3.0, n_steps=config.batch_size)
    assert ctl.value == pytest.approx(before * 0.975)


def test_floor_keeps_beta_from_falling_below_its_start_then_it_rises():
    ctl = AdaptiveKLController(0.03, target=6.0, horizon=128, min_coef=0.03)
    # KL 1 at the start of a run: error 1/6 - 1 = -0.833 -> -0.2; beta would become 0.03 * (1 - 0.2 * 64 / 128)
    # = 0.027, but the floor holds it at 0.03.
    ctl.update(1.0, n_steps=64)
    assert ctl.value == pytest.approx(0.03)
    # KL 9: error 0.5 -> 0.2; beta *= 1 + 0.2 * 64 / 128 = 1.1 -> 0.033, then 0.0363.
    ctl.update(9.0, n_steps=64)
    assert ctl.value == pytest.approx(0.033)
    ctl.update(9.0, n_steps=64)
    assert ctl.value == pytest.approx(0.0363)
    # KL 5.4: error -0.1; beta *= 1 - 0.1 * 0.5 = 0.95 -> 0.034485 (above the floor: it may come back down).
    ctl.update(5.4, n_steps=64)
    assert ctl.value == pytest.approx(0.034485)
    with pytest.raises(ValueError, match="min_coef=-1"):
        AdaptiveKLController(0.1, target=6.0, horizon=10, min_coef=-1)


def test_app_ppo_runs_get_the_floor_and_a_horizon_of_one_batch_unless_set():
    from labeler.services.training.runners.ppo import kl_settings_for

    assert kl_settings_for({}) == {"horizon": 64, "kl_coef_min": 0.03}  # PPOConfig's batch of 64
    assert kl_settings_for({"batch_size": 16}) == {"horizon": 16, "kl_coef_min": 0.03}
    # So beta moves as far in a step at batch 16 as at 64: KL 18 against a target of 9 is an error clipped to 0.2,
    # K_beta = 16 / 16 = 1, beta 0.03 * 1.2 = 0.036 (the old fixed horizon of 64: 0.03 * (1 + 0.2 * 16/64) = 0.0315).
    ctl = AdaptiveKLController(0.03, target=9.0, horizon=16, min_coef=0.03)
    ctl.update(18.0, n_steps=16)
    assert ctl.value == pytest.approx(0.036)
    assert kl_settings_for({"init_kl_coef": 0.1}) == {"horizon": 64, "kl_coef_min": 0.1}
    assert kl_settings_for({"horizon": 512}) == {"kl_coef_min": 0.03}
    assert kl_settings_for({"horizon": 10000, "kl_coef_min": 0.0}) == {}


def test_kl_budget_reads_the_mean_of_the_last_window_steps():
    from rlhf.kl_control import kl_budget_spent

    assert not kl_budget_spent([], 8.0, 5)
    # one noisy step past the budget is not enough: the window's mean (12 + 4*4)/5 = 5.6 < 8
    assert not kl_budget_spent([4, 4, 4, 4, 12], 8.0, 5)
    # the last 5 of 6 steps: (6 + 8 + 9 + 8 + 9) / 5 = 8.0 reaches 8 (step 1's 0 is outside the window)
    assert kl_budget_spent([0, 6, 8, 9, 8, 9], 8.0, 5)
    # fewer steps than the window: their mean, 10
    assert kl_budget_spent([9, 11], 8.0, 5)
    with pytest.raises(ValueError, match="budget=0"):
        kl_budget_spent([1.0], 0, 5)
