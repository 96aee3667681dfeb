"""rlhf.peft_utils: the one PEFT check, the wrapped model, adapters applied and merged."""
import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

from rlhf.peft_utils import apply_peft, base_model, is_peft_model, merge_adapter

LORA = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)


def tiny_lm(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    return LlamaForCausalLM(config).eval()


def test_is_peft_model_and_base_model():
    plain = tiny_lm()
    assert not is_peft_model(plain) and base_model(plain) is plain
    wrapped = get_peft_model(plain, LORA)
    assert is_peft_model(wrapped)
    assert base_model(wrapped) is wrapped.get_base_model()
    assert isinstance(base_model(wrapped), LlamaForCausalLM)


def test_apply_peft_trains_only_the_adapter_and_refuses_a_second_one():
    model = tiny_lm()
    assert apply_peft(model, None) is model
    wrapped = apply_peft(model, LORA)
    trainable = sorted(name for name, p in wrapped.named_parameters() if p.requires_grad)
    # 1 layer x (q_proj, v_proj) x (lora_A, lora_B)
    assert len(trainable) == 4 and all("lora_" in name for name in trainable)
    with pytest.raises(ValueError, match="already carries an adapter"):
        apply_peft(wrapped, LORA)


def test_merge_adapter_keeps_the_outputs_and_makes_every_weight_trainable():
    wrapped = get_peft_model(tiny_lm(), LORA)
    with torch.no_grad():  # lora_B starts at zero (adapter = identity): make it change the outputs
        for name, p in wrapped.named_parameters():
            if "lora_B" in name:
                p.fill_(0.1)
    ids = torch.tensor([[1, 5, 7, 3]])
    before = wrapped(input_ids=ids).logits
    with wrapped.disable_adapter():
        assert not torch.allclose(before, wrapped(input_ids=ids).logits)  # the adapter changes the outputs
    merged = merge_adapter(wrapped)
    assert not is_peft_model(merged) and isinstance(merged, LlamaForCausalLM)
    assert torch.allclose(merged(input_ids=ids).logits, before, atol=1e-5)
    assert all(p.requires_grad for p in merged.parameters())
    plain = tiny_lm()
    assert merge_adapter(plain) is plain
