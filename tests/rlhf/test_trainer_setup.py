"""rlhf/trainer_setup.py: the model steps the Trainer subclasses (SFT, Reward, DPO, KTO, GRPO, RLOO) share, in their
order."""
from types import SimpleNamespace

import pytest
import torch
from peft import LoraConfig, PeftModel
from transformers import LlamaConfig, LlamaForCausalLM

from rlhf.attention import LEAN_EAGER
from rlhf.autocast_inputs import _HOOKED
from rlhf.trainer_setup import prepare_model


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=64))


def args(share_input_casts: bool = True, attn_implementation: str = "auto"):
    return SimpleNamespace(gradient_checkpointing=False, attn_implementation=attn_implementation,
                           device=torch.device("cpu"), share_input_casts=share_input_casts)


def hooked(model: torch.nn.Module) -> list[str]:
    return sorted(type(module).__name__ for module in model.modules() if getattr(module, _HOOKED, False))


@pytest.mark.parametrize("share, expected", [(True, ["LlamaAttention"] * 2 + ["LlamaMLP"] * 2), (False, [])])
def test_plain_model_gets_the_cpu_kernel_and_the_shared_casts(share, expected):
    model = prepare_model(tiny_llama(), args(share_input_casts=share))
    assert model.config._attn_implementation == LEAN_EAGER  # "auto" on CPU
    assert hooked(model) == expected


def test_lora_comes_first_so_its_wrapped_projections_are_not_hooked():
    lora = LoraConfig(r=2, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    model = prepare_model(tiny_llama(), args(), lora)
    assert isinstance(model, PeftModel)
    assert model.base_model.model.config._attn_implementation == LEAN_EAGER
    # Attention's q and v are LoRA layers (their own input paths): only the MLPs' gate/up share a cast.
    assert hooked(model) == ["LlamaMLP", "LlamaMLP"]
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)


def test_the_model_kernel_kept_when_asked():
    model = tiny_llama()
    before = model.config._attn_implementation
    assert prepare_model(model, args(attn_implementation="model")).config._attn_implementation == before


def test_dropout_off_in_every_model_given_and_the_reference_frozen_with_the_training_kernel():
    from rlhf.trainer_setup import disable_dropout, freeze_reference

    policy, reference = torch.nn.Sequential(torch.nn.Dropout(0.1)), tiny_llama()
    disable_dropout(policy, None)  # None (no reference) is skipped
    assert policy[0].p == 0.0
    frozen = freeze_reference(reference.train(), args())
    assert frozen is reference and not frozen.training
    assert not any(p.requires_grad for p in frozen.parameters())
    assert frozen.config._attn_implementation == LEAN_EAGER  # "auto" on CPU, as the policy gets
