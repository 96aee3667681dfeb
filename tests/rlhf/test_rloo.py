"""RLOO (TRL 1.x): leave-one-out advantages by hand, the config's TRL defaults, and the trainer on a tiny model
(GRPO's loop with RLOO's advantages, KL-in-reward and per-answer ratio), run as TRL 1.16's docs write it."""
import pytest
import torch

from rlhf.losses import leave_one_out_advantages


def test_leave_one_out_advantages_by_hand():
    rewards = torch.tensor([1.0, 2.0, 3.0, 5.0, 0.0, 4.0])
    # group of 4: 1 - (2+3+5)/3 = -2.3333, 2 - 9/3 = -1, 3 - 8/3 = 0.3333, 5 - 6/3 = 3; group of 2: 0 - 4, 4 - 0
    assert leave_one_out_advantages(rewards[:4], 4).tolist() == pytest.approx([-7 / 3, -1.0, 1 / 3, 3.0])
    assert leave_one_out_advantages(rewards, 2).tolist() == pytest.approx([-1.0, 1.0, -2.0, 2.0, -4.0, 4.0])
    # a missing reward (NaN) is left out of the others' baselines and gets 0; a group's only scored answer gets 0
    with_missing = torch.tensor([1.0, float("nan"), 3.0, 7.0, float("nan"), float("nan")])
    assert leave_one_out_advantages(with_missing, 3).tolist() == pytest.approx([-2.0, 0.0, 2.0, 0.0, 0.0, 0.0])
    # the advantages of a group sum to 0 (each answer is compared with the others' mean)
    generator = torch.Generator().manual_seed(1)
    assert leave_one_out_advantages(torch.randn(12, generator=generator), 4).view(3, 4).sum(1).abs().max() < 1e-5


def test_config_defaults_are_trl_rloo_ones():
    from rlhf.rloo import RLOOConfig

    config = RLOOConfig(output_dir="unused", report_to="none")
    assert (config.num_generations, config.beta, config.learning_rate, config.normalize_advantages,
            config.reward_clip_range) == (2, 0.05, 1e-6, False, None)
    assert not hasattr(config, "loss_type")  # RLOO has one loss
    with pytest.raises(ValueError, match="^vllm_mode='server': not supported here"):
        RLOOConfig(output_dir="unused", vllm_mode="server")


def test_trains_with_kl_in_the_reward_and_the_reference_frozen(tiny_model_dir, tmp_path):
    from datasets import Dataset

    from rlhf import RLOOConfig, RLOOTrainer

    def reward_len(completions, **kwargs):
        return [-abs(20 - len(completion)) for completion in completions]

    rows = Dataset.from_dict({"prompt": [f"Review {i}:" for i in range(8)]})
    args = RLOOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=8, max_steps=2, logging_steps=1, learning_rate=1e-2, report_to="none",
                      save_strategy="no", bf16=False, normalize_advantages=True, reward_clip_range=(-30.0, 0.0))
    trainer = RLOOTrainer(str(tiny_model_dir), reward_funcs=reward_len, args=args, train_dataset=rows)
    policy = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    reference = {n: p.detach().clone() for n, p in trainer.ref_model.named_parameters()}
    trainer.train()
    assert all(not torch.equal(policy[n], p) for n, p in trainer.model.named_parameters())
    assert all(torch.equal(reference[n], p) for n, p in trainer.ref_model.named_parameters())
    logged = trainer.state.log_history[0]
    for name in ("loss", "kl", "reward", "reward_std", "entropy", "rewards/reward_len/mean", "clip_ratio/region_mean",
                 "completions/mean_length"):
        assert name in logged, name


def test_trl_quickstart_with_only_the_import_changed(tiny_model_dir, tmp_path, monkeypatch):
    """TRL 1.16's RLOO quick start (docs: rloo_trainer), `from trl` -> `from rlhf`, a local tiny model and rows, and
    a config small enough for a test."""
    from datasets import Dataset

    monkeypatch.chdir(tmp_path)
    dataset = Dataset.from_dict({"prompt": ["The movie was", "My review:", "In short,", "I watched"]})
    # --- the script ---
    from rlhf import RLOOConfig, RLOOTrainer

    def reward_num_unique_chars(completions, **kwargs):
        return [len(set(c)) for c in completions]

    training_args = RLOOConfig(output_dir="Qwen2-0.5B-RLOO", max_completion_length=16, max_steps=2,
                               per_device_train_batch_size=4, report_to="none")
    trainer = RLOOTrainer(
        model=str(tiny_model_dir),
        reward_funcs=reward_num_unique_chars,
        args=training_args,
        train_dataset=dataset,
    )
    trainer.train()
    # --- end ---
    assert trainer.state.global_step == 2
    assert "rewards/reward_num_unique_chars/mean" in trainer.state.log_history[0] or \
        "rewards/reward_num_unique_chars/mean" in trainer.state.log_history[-2]
