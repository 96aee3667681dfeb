"""XPOTrainer and NashMDTrainer on a tiny random model: what differs from online DPO (the second answer's source, the
extra loss term, the mixture sampler), and that each trains the policy and leaves the reference alone."""
import dataclasses

import pytest
import torch
from datasets import Dataset

from param_checks import changed, snapshot

PROMPTS = Dataset.from_dict({"prompt": [f"Review {i}:" for i in range(8)]})


def prefers_short(prompts, completions, **kwargs):
    return [-len(c) for c in completions]


def small_args(cls, tmp_path, **changes):
    settings = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, max_new_tokens=6, max_steps=2,
                    logging_steps=1, learning_rate=1e-2, report_to="none", save_strategy="no", bf16=False,
                    temperature=1.0)
    return cls(**{**settings, **changes})


def test_configs_take_trl_fields_with_help():
    from rlhf import NashMDConfig, XPOConfig

    assert XPOConfig(output_dir="unused").alpha == 1e-5 and XPOConfig(output_dir="unused", alpha=[1e-3]).alpha == 1e-3
    assert XPOConfig(output_dir="unused", alpha=[1e-3, 0.0]).alpha == [1e-3, 0.0]
    assert NashMDConfig(output_dir="unused").mixture_coef == 0.5
    for cls in (XPOConfig, NashMDConfig):
        assert [f.name for f in dataclasses.fields(cls) if not f.metadata.get("help")] == []
    with pytest.raises(ValueError, match=r"mixture_coef=1.5: every value must be in \[0, 1\]"):
        NashMDConfig(output_dir="unused", mixture_coef=1.5)
    with pytest.raises(ValueError, match=r"alpha=-0.1: every value must be >= 0"):
        XPOConfig(output_dir="unused", alpha=-0.1)


def test_mixture_sampler_is_the_policy_when_both_are_the_policy_and_the_reference_at_coef_one(tiny_model_dir):
    """Greedy decoding from the mixture, with its KV caches and left-padded prompts, equals generate()'s."""
    from rlhf.generation import left_pad
    from rlhf.loading import load_causal_lm
    from rlhf.nash_md import sample_geometric_mixture

    torch.manual_seed(0)
    policy = load_causal_lm(tiny_model_dir).eval()
    reference = load_causal_lm(tiny_model_dir).eval()
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    input_ids, mask = left_pad([torch.tensor([5, 6, 7, 8, 9]), torch.tensor([11, 12])], pad_id=0)

    def greedy(model):
        out = model.generate(input_ids=input_ids, attention_mask=mask, do_sample=False, max_new_tokens=5,
                             eos_token_id=[2], pad_token_id=0, top_k=None, top_p=None, temperature=None)
        return out[:, input_ids.shape[1]:]

    same = sample_geometric_mixture(policy, policy, input_ids, mask, 5, 0.3, [2], 0, temperature=None)
    assert torch.equal(same, greedy(policy))  # the mixture of a model with itself is the model
    assert torch.equal(sample_geometric_mixture(policy, reference, input_ids, mask, 5, 1.0, [2], 0, None), greedy(reference))
    assert torch.equal(sample_geometric_mixture(policy, reference, input_ids, mask, 5, 0.0, [2], 0, None), greedy(policy))
    sampled = sample_geometric_mixture(policy, reference, input_ids, mask, 5, 0.5, [2], 0,
                                       generator=torch.Generator().manual_seed(1))
    assert sampled.shape[0] == 2 and sampled.shape[1] <= 5


def test_xpo_pairs_the_policy_with_the_reference_and_adds_the_exploration_term(tiny_model_dir, tmp_path):
    from rlhf import XPOConfig, XPOTrainer

    trainer = XPOTrainer(str(tiny_model_dir), judge=prefers_short, args=small_args(XPOConfig, tmp_path, alpha=0.1),
                         train_dataset=PROMPTS)
    sources = []
    sample = trainer._sample
    trainer._sample = lambda prompt_ids, reference=False: sources.append(reference) or sample(prompt_ids, reference)
    # the term by hand: alpha 0.1 * mean of the reference answers' summed log-probs (-5, -10) = -0.75
    token_logps = torch.tensor([[-1.0, 0.0], [-1.0, 0.0], [-2.0, -3.0], [-4.0, -6.0]])
    assert trainer.extra_loss({"verdicts": torch.tensor([0, 1])}, token_logps).item() == pytest.approx(-0.75)
    policy, reference = snapshot(trainer.model), snapshot(trainer.ref_model)
    trainer.train()
    assert sources == [False, True, False, True]  # per step: the policy's answers, then the reference's
    assert len(changed(policy, trainer.model)) == len(policy) and changed(reference, trainer.ref_model) == []
    logged = trainer.state.log_history[0]
    assert logged["alpha"] == pytest.approx(0.1) and "loss/xpo" in logged and "rewards/margins" in logged


def test_nash_md_trains_its_own_answers_against_the_mixture(tiny_model_dir, tmp_path):
    from rlhf import NashMDConfig, NashMDTrainer

    trainer = NashMDTrainer(str(tiny_model_dir), judge=prefers_short, args=small_args(NashMDConfig, tmp_path),
                            train_dataset=PROMPTS)
    policy, reference = snapshot(trainer.model), snapshot(trainer.ref_model)
    trainer.train()
    assert len(changed(policy, trainer.model)) == len(policy) and changed(reference, trainer.ref_model) == []
    logged = trainer.state.log_history[0]
    for name in ("loss", "loss/kl", "loss/score", "rewards/probabilities", "objective/entropy", "beta", "mixture_coef",
                 "val/model_contain_eos_token", "val/ref_contain_eos_token"):
        assert name in logged, name
    assert 0 <= logged["rewards/probabilities"] <= 1 and logged["mixture_coef"] == 0.5


def test_nash_md_with_lora_mixes_with_the_adapter_free_policy(tiny_model_dir, tmp_path):
    from peft import LoraConfig

    from rlhf import BasePairwiseJudge, NashMDConfig, NashMDTrainer

    class FirstWins(BasePairwiseJudge):
        def judge(self, prompts, completions, shuffle_order=True):
            return [0] * len(prompts)

    trainer = NashMDTrainer(str(tiny_model_dir), judge=FirstWins(), args=small_args(NashMDConfig, tmp_path, max_steps=1),
                            train_dataset=PROMPTS,
                            peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    assert trainer.ref_model is None
    lora = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    trainer.train()
    assert lora and all(not torch.equal(lora[n], p.detach()) for n, p in trainer.model.named_parameters() if n in lora)
    assert trainer.state.log_history[0]["rewards/probabilities"] == 1.0  # every verdict: the policy's answer won
