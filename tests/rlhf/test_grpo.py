"""GRPO: the pure math against hand-computed values, the config's TRL defaults and errors, and the trainer on a tiny
model (trainable weights move, the reference does not, TRL's stat names are logged), run the way TRL 1.16's docs
write it with only the import changed."""
import math

import pytest
import torch

from rlhf.losses import aggregate_token_losses, clipped_surrogate, group_relative_advantages, k3_kl, nan_std

from param_checks import changed, snapshot


# ---- math --------------------------------------------------------------------------------------------------
def test_group_relative_advantages_by_hand():
    rewards = torch.tensor([1.0, 2.0, 3.0, 5.0, 4.0, 4.0, 4.0, 4.0])
    advantages, std = group_relative_advantages(rewards, num_generations=4, scale_rewards="group")
    # group 1: mean 2.75; deviations -1.75 -0.75 0.25 2.25; unbiased var (3.0625 + 0.5625 + 0.0625 + 5.0625) / 3
    # = 2.9167, std 1.7078; A = dev / (1.7078 + 1e-4). Group 2: all equal -> std 0, A = 0.
    expected = torch.tensor([-1.75, -0.75, 0.25, 2.25]) / (math.sqrt(8.75 / 3) + 1e-4)
    assert torch.allclose(advantages[:4], expected, atol=1e-5)
    assert torch.equal(advantages[4:], torch.zeros(4))
    assert std[0] == pytest.approx(math.sqrt(8.75 / 3), rel=1e-5) and std[4] == 0
    # none (Dr. GRPO): only the mean is removed
    plain, _ = group_relative_advantages(rewards, 4, "none")
    assert torch.allclose(plain, torch.tensor([-1.75, -0.75, 0.25, 2.25, 0, 0, 0, 0]))
    # batch: the one std of all 8 rewards; mean 3.375, sum of squared deviations 11.875, var 11.875 / 7
    batch, _ = group_relative_advantages(rewards, 4, "batch")
    assert batch[0].item() == pytest.approx(-1.75 / (math.sqrt(11.875 / 7) + 1e-4), rel=1e-5)


def test_group_advantages_leave_out_missing_rewards_and_match_a_float64_loop():
    rewards = torch.tensor([1.0, float("nan"), 3.0, 2.0])
    advantages, _ = group_relative_advantages(rewards, 4)
    # NaN row: advantage 0, and left out of the group's mean 2 and std 1 (values 1, 3, 2)
    assert torch.allclose(advantages, torch.tensor([-1.0, 0.0, 1.0, 0.0]) / (1 + 1e-4), atol=1e-6)
    generator = torch.Generator().manual_seed(0)
    rewards = torch.randn(12, generator=generator)
    vectorised, _ = group_relative_advantages(rewards, 3)
    for g in range(4):
        group = [float(r) for r in rewards[3 * g : 3 * g + 3]]
        mean = sum(group) / 3
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / 2)
        for i, r in enumerate(group):
            assert vectorised[3 * g + i].item() == pytest.approx((r - mean) / (std + 1e-4), rel=1e-5, abs=1e-6)
    with pytest.raises(ValueError, match="whole groups of num_generations=4"):
        group_relative_advantages(torch.zeros(6), 4)


def test_nan_std_k3_kl_and_clipped_surrogate_by_hand():
    assert nan_std(torch.tensor([1.0, 3.0, float("nan")])).item() == pytest.approx(math.sqrt(2))  # var (1 + 1) / 1
    # k3: p = -1, q = -2: exp(-1) - (-1) - 1 = 0.36788; equal log-probs give 0
    assert k3_kl(torch.tensor([-1.0, -0.5]), torch.tensor([-2.0, -0.5])).tolist() == pytest.approx([math.exp(-1), 0.0])
    log_ratio = torch.log(torch.tensor([1.5, 0.5, 1.1]))
    advantages = torch.tensor([1.0, -1.0, 2.0])
    losses, clipped = clipped_surrogate(log_ratio, advantages, epsilon_low=0.2, epsilon_high=0.2)
    # -min(1.5, 1.2) = -1.2 (clipped high); -min(-0.5, -0.8) = 0.8 (clipped low); -min(2.2, 2.2) = -2.2
    assert losses.tolist() == pytest.approx([-1.2, 0.8, -2.2])
    assert clipped["high"].tolist() == [True, False, False] and clipped["low"].tolist() == [False, True, False]
    # DAPO's wider upper clip 0.28: -min(1.5, 1.28) = -1.28; delta=1.05 caps the unclipped ratio: -min(2.1, 2.2) = -2.1
    losses, _ = clipped_surrogate(log_ratio, advantages, 0.2, 0.28, delta=1.05)
    assert losses.tolist() == pytest.approx([-1.05, 0.8, -2.1])


def test_each_loss_type_normalises_as_its_paper():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 99.0, 99.0]])  # 99: padding, must never count
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert aggregate_token_losses(per_token, mask, "grpo").item() == pytest.approx(3.0)  # (6/3 + 4/1) / 2
    assert aggregate_token_losses(per_token, mask, "bnpo").item() == pytest.approx(2.5)  # 10 / 4 tokens
    assert aggregate_token_losses(per_token, mask, "dr_grpo", max_completion_length=4).item() == pytest.approx(1.25)  # 10 / (2 * 4)
    assert aggregate_token_losses(per_token, mask, "dapo", num_active_tokens=8).item() == pytest.approx(1.25)  # 10 / 8
    with pytest.raises(ValueError, match="loss_type='cispo'"):
        aggregate_token_losses(per_token, mask, "cispo")


# ---- config ------------------------------------------------------------------------------------------------
def test_config_has_trl_defaults_and_refuses_what_cannot_run_here():
    import dataclasses

    from rlhf.grpo import GRPOConfig

    config = GRPOConfig(output_dir="unused", report_to="none")
    assert (config.learning_rate, config.beta, config.num_generations, config.loss_type, config.scale_rewards,
            config.epsilon, config.max_completion_length, config.num_iterations, config.temperature) == \
        (1e-6, 0.0, 8, "dapo", "group", 0.2, 512, 1, 1.0)
    assert config.generation_batch_size == 8 and config.steps_per_generation == 1  # per_device 8 x 1 process x GA 1
    assert [f.name for f in dataclasses.fields(GRPOConfig) if not f.metadata.get("help")] == []
    with pytest.raises(ValueError, match=r"^use_vllm=True: not supported here \(vLLM generation needs a CUDA GPU"):
        GRPOConfig(output_dir="unused", use_vllm=True)
    with pytest.raises(ValueError, match="generation_batch_size=6: must be a multiple of num_generations=4"):
        GRPOConfig(output_dir="unused", per_device_train_batch_size=6, num_generations=4)
    with pytest.raises(ValueError, match="loss_type='sapo'"):
        GRPOConfig(output_dir="unused", loss_type="sapo")
    assert GRPOConfig(output_dir="unused", scale_rewards=False).scale_rewards == "none"  # TRL's boolean form


def test_old_log_probs_are_computed_only_where_the_policy_moves_within_a_generation_batch():
    from rlhf.grpo import GRPOConfig
    from rlhf.rloo import RLOOConfig

    def config(cls, **changes):
        return cls(output_dir="unused", report_to="none", per_device_train_batch_size=8, num_generations=4, **changes)

    # 1 micro-batch per generation batch, used once, optimizer step after it: the policy that sampled is trained
    assert not config(GRPOConfig).needs_old_logps
    assert config(GRPOConfig, num_iterations=2).needs_old_logps  # the 2nd pass meets a moved policy
    assert config(GRPOConfig, steps_per_generation=4).needs_old_logps  # optimizer steps between micro-batches
    # accumulating all 4 x 2 micro-steps: one optimizer step per generation batch
    assert not config(GRPOConfig, steps_per_generation=4, num_iterations=2, gradient_accumulation_steps=8).needs_old_logps
    # RLOO's KL penalty on the reward needs the sampling policy's log-probs whenever there is a reference
    assert config(RLOOConfig).needs_old_logps and not config(RLOOConfig, beta=0.0).needs_old_logps


# ---- the trainer -------------------------------------------------------------------------------------------
def reward_len(completions, **kwargs):
    return [-abs(20 - len(completion)) for completion in completions]


def small_args(cls, tmp_path, **changes):
    settings = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, num_generations=4,
                    max_completion_length=8, max_steps=2, logging_steps=1, learning_rate=1e-2, report_to="none",
                    save_strategy="no", bf16=False)
    return cls(**{**settings, **changes})


def test_trains_against_a_frozen_reference_and_logs_trl_names(tiny_model_dir, tmp_path):
    from datasets import Dataset

    from rlhf import GRPOConfig, GRPOTrainer

    seen = []

    def reward_topic(prompts, completions, topic, **kwargs):  # an extra dataset column arrives by name
        seen.extend(topic)
        return [None if t == "skip" else float(len(c) % 3) for c, t in zip(completions, topic)]

    rows = Dataset.from_dict({"prompt": [f"Review {i}:" for i in range(8)], "topic": ["film", "skip"] * 4})
    args = small_args(GRPOConfig, tmp_path, beta=0.1, loss_type="grpo", num_iterations=2, reward_weights=[1.0, 0.5])
    trainer = GRPOTrainer(str(tiny_model_dir), reward_funcs=[reward_len, reward_topic], args=args, train_dataset=rows)
    policy, reference = snapshot(trainer.model), snapshot(trainer.ref_model)
    trainer.train()
    assert len(changed(policy, trainer.model)) == len(policy)
    assert changed(reference, trainer.ref_model) == []
    assert set(seen) == {"film", "skip"}
    logged = trainer.state.log_history[0]
    for name in ("loss", "reward", "reward_std", "kl", "entropy", "completions/mean_length", "completions/clipped_ratio",
                 "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "frac_reward_zero_std",
                 "rewards/reward_len/mean", "rewards/reward_len/std", "rewards/reward_topic/mean", "num_tokens"):
        assert name in logged, name
    assert logged["kl"] >= 0 and logged["completions/mean_length"] <= 8


def test_reward_model_path_and_conversational_prompts(tiny_model_dir, tiny_encoder_dir, tmp_path):
    from datasets import Dataset

    from rlhf import GRPOConfig, GRPOTrainer

    rows = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Say something about film {i}."}] for i in range(4)]})
    got = []

    def record(prompts, completions, **kwargs):
        got.extend(completions)
        return [1.0] * len(completions)

    args = small_args(GRPOConfig, tmp_path, max_steps=1, loss_type="bnpo")
    trainer = GRPOTrainer(str(tiny_model_dir), reward_funcs=[str(tiny_encoder_dir), record], args=args, train_dataset=rows)
    trainer.train()
    assert all(isinstance(c, list) and c[0]["role"] == "assistant" for c in got)  # TRL's conversational completions
    assert f"rewards/{tiny_encoder_dir.name}/mean" in trainer.state.log_history[0]


def test_trl_quickstart_with_only_the_import_changed(tiny_model_dir, tmp_path, monkeypatch):
    """TRL 1.16's GRPO quick start (docs: grpo_trainer), `from trl` -> `from rlhf`; the hub model and dataset are a
    local tiny model and rows, and the config is made small enough for a test."""
    from datasets import Dataset

    monkeypatch.chdir(tmp_path)
    dataset = Dataset.from_dict({"prompt": ["The movie was", "My review:", "In short,", "I watched"] * 2})
    # --- the script ---
    from rlhf import GRPOConfig, GRPOTrainer

    # Define the reward function, which rewards completions that are close to 20 characters
    def reward_len(completions, **kwargs):
        return [-abs(20 - len(completion)) for completion in completions]

    training_args = GRPOConfig(output_dir="Qwen2-0.5B-GRPO", max_completion_length=16, max_steps=2, num_generations=4,
                               per_device_train_batch_size=8, report_to="none")
    trainer = GRPOTrainer(
        model=str(tiny_model_dir),
        reward_funcs=reward_len,
        args=training_args,
        train_dataset=dataset,
    )
    trainer.train()
    # --- end ---
    trainer.save_model()
    assert (tmp_path / "Qwen2-0.5B-GRPO" / "model.safetensors").exists()
    assert trainer.state.global_step == 2


def test_trainer_arguments_that_cannot_run_here_say_why(tiny_model_dir, tmp_path):
    from datasets import Dataset

    from rlhf import GRPOConfig, GRPOTrainer

    rows = Dataset.from_dict({"prompt": ["a", "b"]})
    with pytest.raises(ValueError, match=r"^GRPOTrainer\(tools=...\): not supported here"):
        GRPOTrainer(str(tiny_model_dir), reward_funcs=reward_len, args=small_args(GRPOConfig, tmp_path),
                    train_dataset=rows, tools=[len])
    with pytest.raises(ValueError, match=r"train_dataset: needs a 'prompt' column \(columns: \['text'\]\)"):
        GRPOTrainer(str(tiny_model_dir), reward_funcs=reward_len, args=small_args(GRPOConfig, tmp_path),
                    train_dataset=Dataset.from_dict({"text": ["a"]}))


def test_left_padded_batches_stay_finite_under_bf16_with_lean_eager(tiny_model_dir):
    """GRPO trains and generates on left-padded prompts: a padding query sees no key, and the fp32 mask minimum
    used to round to -inf in bf16 (NaN softmax, spread to the real rows by the next layer)."""
    from rlhf.attention import use_attention
    from rlhf.generation import left_pad
    from rlhf.loading import load_causal_lm

    model = load_causal_lm(tiny_model_dir).eval()
    use_attention(model, "lean_eager", "cpu")
    input_ids, attention_mask = left_pad([torch.tensor([5, 6, 7, 8, 9]), torch.tensor([5, 6])], pad_id=0)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    assert torch.isfinite(logits[:, -1]).all()


def test_log_probs_of_a_left_padded_row_equal_the_row_alone(tiny_model_dir, tmp_path):
    """The training forward gives a left-padded row the positions generate() gave it, so its log-probs are the
    ones it was sampled with, whatever the padding of the batch it is in."""
    from datasets import Dataset

    from rlhf import GRPOConfig, GRPOTrainer
    from rlhf.generation import left_pad

    trainer = GRPOTrainer(str(tiny_model_dir), reward_funcs=reward_len, args=small_args(GRPOConfig, tmp_path),
                          train_dataset=Dataset.from_dict({"prompt": ["a"]}))
    prompts = [torch.tensor([5, 6, 7, 8, 9]), torch.tensor([5, 6])]
    prompt_ids, prompt_mask = left_pad(prompts, pad_id=0)
    completions = torch.tensor([[10, 11, 12], [13, 14, 15]])
    batch = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completions,
             "completion_mask": torch.ones_like(completions)}
    alone = {"prompt_ids": prompts[1][None], "prompt_mask": torch.ones(1, 2, dtype=torch.long),
             "completion_ids": completions[1:], "completion_mask": torch.ones(1, 3, dtype=torch.long)}
    with torch.no_grad():
        padded = trainer._token_logps(trainer.model, batch)[0]
        single = trainer._token_logps(trainer.model, alone)[0]
        chunked = trainer._logps_in_chunks(trainer.model, batch)
    assert torch.allclose(padded[1], single[0], atol=1e-5)
    assert torch.allclose(chunked, padded, atol=1e-6)
