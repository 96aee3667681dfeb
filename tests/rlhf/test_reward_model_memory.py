"""PPO's reward model on each rank is inference only: eval mode, no gradients, and in bf16 when the run trains in
bf16, half the bytes of fp32 (docs/SCALING.md counts 2 bytes a parameter per rank)."""
from types import SimpleNamespace

import pytest
import torch

from rlhf.reward import RewardScorer
from rlhf.rewards import RewardModelReward


def weight_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def test_bf16_scorer_is_inference_only_and_half_the_bytes(tiny_encoder_dir):
    full = RewardScorer(tiny_encoder_dir)
    half = RewardScorer(tiny_encoder_dir, dtype=torch.bfloat16)
    for scorer, dtype in ((full, torch.float32), (half, torch.bfloat16)):
        assert not scorer.model.training
        assert {p.dtype for p in scorer.model.parameters()} == {dtype}
        assert not any(p.requires_grad for p in scorer.model.parameters())
    # 4 bytes a parameter against 2: exactly half.
    assert weight_bytes(half.model) * 2 == weight_bytes(full.model)
    # The same scores to bf16's precision (8 bits of mantissa: 0.4% a rounding, ~1% after two layers; the random
    # model scores ~0.0117), and not the very same floats: the forward pass did run in bf16.
    prompts, answers = ["A film"] * 3, ["that I loved.", "that I hated.", "that was long."]
    full_scores, half_scores = full.score(prompts, answers), half.score(prompts, answers)
    assert min(abs(s) for s in full_scores) > 1e-3
    assert half_scores == pytest.approx(full_scores, rel=0.03) and half_scores != full_scores


def test_ppo_loads_its_reward_model_in_the_runs_precision(db, tiny_encoder_dir):
    from labeler.services.serving import models
    from labeler.services.training.runners import common
    from labeler.services.settings.job_settings import JobConfig

    models.register_model(db, "rm-tiny", str(tiny_encoder_dir), "reward")
    for bf16, dtype in ((True, torch.bfloat16), (False, torch.float32)):
        ctx = SimpleNamespace(job=JobConfig(reward="rm", reward_model="rm-tiny", rm_score_std=None, bf16=bf16))
        reward = common.reward_source(ctx, db)
        assert isinstance(reward, RewardModelReward)
        model = reward.scorer.__self__.model  # the RewardScorer whose score() it calls
        assert {p.dtype for p in model.parameters()} == {dtype} and not model.training
