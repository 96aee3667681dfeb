import math

import pytest
import torch

from rlhf.losses import (
    gae_advantages,
    group_ids,
    kl_penalty,
    per_token_rewards,
    ppo_policy_loss,
    ppo_value_loss,
    process_scores,
    rloo_advantages,
)


def test_kl_penalty_kinds():
    logp, ref = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]])
    # logp - ref = [0.5, -1.0]
    assert kl_penalty(logp, ref, "kl")[0].tolist() == pytest.approx([0.5, -1.0])
    assert kl_penalty(logp, ref, "abs")[0].tolist() == pytest.approx([0.5, 1.0])
    # 0.5 * 0.25 = 0.125; 0.5 * 1 = 0.5
    assert kl_penalty(logp, ref, "mse")[0].tolist() == pytest.approx([0.125, 0.5])
    with pytest.raises(ValueError, match="kind='nope'"):
        kl_penalty(logp, ref, "nope")


def test_kl_penalty_full_is_the_exact_kl():
    logits = torch.tensor([[[0.0, math.log(3.0)]]])  # p = [1/4, 3/4]
    ref_logits = torch.zeros(1, 1, 2)  # q = [1/2, 1/2]
    # KL = 0.25 ln(0.25/0.5) + 0.75 ln(0.75/0.5) = -0.173287 + 0.304099 = 0.130812
    kl = kl_penalty(torch.zeros(1, 1), torch.zeros(1, 1), "full", logits, ref_logits)
    assert kl.item() == pytest.approx(0.130812, abs=1e-6)
    with pytest.raises(ValueError, match="logits"):
        kl_penalty(torch.zeros(1, 1), torch.zeros(1, 1), "full")


def test_per_token_rewards_put_the_score_on_the_last_real_token():
    scores = torch.tensor([2.0, 3.0])
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    rewards, non_score = per_token_rewards(scores, kl, mask, kl_coef=0.5)
    # -0.5 * kl: [[-0.05, -0.1, -0.15], [-0.2, -0.25, 0 (masked)]]
    assert torch.allclose(non_score, torch.tensor([[-0.05, -0.1, -0.15], [-0.2, -0.25, 0.0]]))
    # score added at index 2 of row 0 (-0.15 + 2 = 1.85) and index 1 of row 1 (-0.25 + 3 = 2.75)
    assert torch.allclose(rewards, torch.tensor([[-0.05, -0.1, 1.85], [-0.2, 2.75, 0.0]]))


def test_gae_on_a_four_token_example():
    values = torch.tensor([[0.5, 0.5, 0.5, 0.5]])
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    adv, ret = gae_advantages(values, rewards, torch.ones(1, 4), gamma=0.9, lam=0.5)
    # t=3: delta = 1 + 0 - 0.5 = 0.5;              A3 = 0.5
    # t=2: delta = 0 + 0.9*0.5 - 0.5 = -0.05;     A2 = -0.05 + 0.45*0.5     = 0.175
    # t=1: delta = -0.05;                          A1 = -0.05 + 0.45*0.175   = 0.02875
    # t=0: delta = -0.05;                          A0 = -0.05 + 0.45*0.02875 = -0.0370625
    assert adv[0].tolist() == pytest.approx([-0.0370625, 0.02875, 0.175, 0.5])
    assert ret[0].tolist() == pytest.approx([0.4629375, 0.52875, 0.675, 1.0])


def test_gae_padding_changes_nothing():
    values = torch.tensor([[0.5, 0.5, 0.5, 0.5, 9.0, -7.0]])
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0, 5.0, 5.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]])
    adv, ret = gae_advantages(values, rewards, mask, gamma=0.9, lam=0.5)
    short_adv, short_ret = gae_advantages(values[:, :4], rewards[:, :4], mask[:, :4], gamma=0.9, lam=0.5)
    assert torch.allclose(adv[:, :4], short_adv) and torch.allclose(ret[:, :4], short_ret)
    assert adv[0, 4:].tolist() == [0.0, 0.0]


def test_gae_vectorised_equals_float64_loop():
    torch.manual_seed(0)
    values, rewards = torch.randn(3, 6), torch.randn(3, 6)
    adv, _ = gae_advantages(values, rewards, torch.ones(3, 6), gamma=0.99, lam=0.95)
    for b in range(3):
        v, r = values[b].double().tolist() + [0.0], rewards[b].double().tolist()
        running, expected = 0.0, []
        for t in reversed(range(6)):
            running = r[t] + 0.99 * v[t + 1] - v[t] + 0.99 * 0.95 * running
            expected.insert(0, running)
        assert adv[b].tolist() == pytest.approx(expected, abs=1e-5)


def test_policy_loss_with_clipping_active():
    # ratios [1.5, 0.5, 1.1, 1.5], advantages [1, -1, 2, -1], cliprange 0.2
    old = torch.zeros(1, 4)
    new = torch.log(torch.tensor([[1.5, 0.5, 1.1, 1.5]]))
    adv = torch.tensor([[1.0, -1.0, 2.0, -1.0]])
    loss, stats = ppo_policy_loss(new, old, adv, torch.ones(1, 4), cliprange=0.2)
    # t0: max(-1.5, -1.2) = -1.2 (clipped); t1: max(0.5, 0.8) = 0.8 (clipped);
    # t2: max(-2.2, -2.2) = -2.2; t3: max(1.5, 1.2) = 1.5 (the unclipped term is the larger loss)
    # mean = (-1.2 + 0.8 - 2.2 + 1.5) / 4 = -0.275; clipfrac = 2/4
    assert loss.item() == pytest.approx(-0.275, abs=1e-6)
    assert stats["clipfrac"].item() == pytest.approx(0.5)
    # approxkl = 0.5 * mean(ln(1.5)^2, ln(0.5)^2, ln(1.1)^2, ln(1.5)^2)
    #          = 0.5 * (0.164402 + 0.480453 + 0.009084 + 0.164402) / 4 = 0.102293
    assert stats["approxkl"].item() == pytest.approx(0.102293, abs=1e-5)


def test_policy_loss_masked_token_changes_nothing():
    new = torch.log(torch.tensor([[1.5, 0.5, 1.1, 1.5, 50.0]]))
    adv = torch.tensor([[1.0, -1.0, 2.0, -1.0, 3.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    loss, stats = ppo_policy_loss(new, torch.zeros(1, 5), adv, mask, cliprange=0.2)
    assert loss.item() == pytest.approx(-0.275, abs=1e-6)
    assert stats["clipfrac"].item() == pytest.approx(0.5)


def test_policy_loss_gradient_is_zero_where_clipped():
    new = torch.log(torch.tensor([[1.5, 1.1]])).requires_grad_(True)
    loss, _ = ppo_policy_loss(new, torch.zeros(1, 2), torch.tensor([[1.0, 1.0]]), torch.ones(1, 2), 0.2)
    loss.backward()
    # token 0 is clipped (ratio 1.5 > 1.2, A > 0): no gradient; token 1: d(-A r / 2)/d logp = -r / 2 = -0.55
    assert new.grad[0].tolist() == pytest.approx([0.0, -0.55])


def test_value_loss_with_clipping_active():
    old = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, -0.1, 1.3]])
    returns = torch.tensor([[1.0, 0.0, 2.0]])
    loss, stats = ppo_value_loss(values, old, returns, torch.ones(1, 3), cliprange_value=0.2)
    # t0: clip(0.5) = 0.2; errors (0.5-1)^2 = 0.25 vs (0.2-1)^2 = 0.64 -> 0.64 (clipped)
    # t1: -0.1 within +-0.2; 0.01 vs 0.01 -> 0.01
    # t2: clip(1.3) = 1.2; (1.3-2)^2 = 0.49 vs (1.2-2)^2 = 0.64 -> 0.64 (clipped)
    # loss = 0.5 * (0.64 + 0.01 + 0.64) / 3 = 0.215; clipfrac 2/3; error = (0.25 + 0.01 + 0.49) / 3 = 0.25
    assert loss.item() == pytest.approx(0.215, abs=1e-6)
    assert stats["clipfrac"].item() == pytest.approx(2 / 3)
    assert stats["error"].item() == pytest.approx(0.25)
    masked, _ = ppo_value_loss(torch.cat([values, torch.tensor([[99.0]])], 1), torch.cat([old, torch.zeros(1, 1)], 1),
                               torch.cat([returns, torch.zeros(1, 1)], 1), torch.tensor([[1, 1, 1, 0]]), 0.2)
    assert masked.item() == pytest.approx(0.215, abs=1e-6)


def test_group_ids_follow_equal_queries():
    a, b = torch.tensor([1, 2]), torch.tensor([3])
    assert group_ids([a, b, a.clone(), b, torch.tensor([1, 2, 3])]).tolist() == [0, 1, 0, 1, 2]


def test_rloo_advantages_by_hand():
    # Group 0: rewards 1, 2, 6 -> baselines (2+6)/2 = 4, (1+6)/2 = 3.5, (1+2)/2 = 1.5 -> A = -3, -1.5, 4.5.
    # Group 1: rewards 0, 1 -> baselines 1, 0 -> A = -1, 1.
    # Group 2: reward 5 alone -> baseline = mean of the other 5 rows (1+2+6+0+1)/5 = 2 -> A = 3.
    rewards = torch.tensor([1.0, 2.0, 0.0, 6.0, 1.0, 5.0])
    groups = torch.tensor([0, 0, 1, 0, 1, 2])
    assert rloo_advantages(rewards, groups).tolist() == pytest.approx([-3.0, -1.5, -1.0, 4.5, 1.0, 3.0])


def test_rloo_advantages_equal_a_float64_loop():
    generator = torch.Generator().manual_seed(0)
    rewards = torch.randn(12, generator=generator)
    groups = torch.tensor([0, 1, 2] * 4)
    fast = rloo_advantages(rewards, groups)
    for i in range(12):
        others = [float(rewards[j]) for j in range(12) if j != i and groups[j] == groups[i]]
        assert float(fast[i]) == pytest.approx(float(rewards[i]) - sum(others) / len(others), abs=1e-6)
    # Adding a constant to every reward changes no advantage (the baseline absorbs it).
    assert rloo_advantages(rewards + 7.0, groups).tolist() == pytest.approx(fast.tolist(), abs=1e-5)


def test_process_scores_scale_norm_clip():
    scores = torch.tensor([3.0, 5.0, -1.0])
    # scaling only: divide by the running std 2 -> [1.5, 2.5, -0.5] (the mean is not subtracted)
    assert process_scores(scores, mean=4.0, std=2.0).tolist() == pytest.approx([1.5, 2.5, -0.5])
    # norm: (x - 4) / 2 -> [-0.5, 0.5, -2.5]
    assert process_scores(scores, mean=4.0, std=2.0, norm=True).tolist() == pytest.approx([-0.5, 0.5, -2.5])
    # then clip at 1: [-0.5, 0.5, -1]
    assert process_scores(scores, mean=4.0, std=2.0, norm=True, clip=1.0).tolist() == pytest.approx([-0.5, 0.5, -1.0])
    # no std: no scaling (norm alone does nothing, as in TRL); clip 2 -> [2, 2, -1]
    assert process_scores(scores, mean=4.0, norm=True, clip=2.0).tolist() == [2.0, 2.0, -1.0]
    assert process_scores(scores).tolist() == [3.0, 5.0, -1.0]


def test_process_scores_zero_std_stays_finite_and_matches_a_float64_loop():
    # std 0 (every score seen so far equal): divided by eps, not by zero
    assert torch.isfinite(process_scores(torch.tensor([1.0, 1.0]), mean=1.0, std=0.0, norm=True)).all()
    scores = torch.randn(16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    eps = torch.finfo(torch.float64).eps
    loop = [min(max((float(x) - 0.3) / (1.7 + eps), -1.2), 1.2) for x in scores]
    assert process_scores(scores, 0.3, 1.7, norm=True, clip=1.2).tolist() == pytest.approx(loop, abs=1e-12)

