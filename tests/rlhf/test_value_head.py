import pytest
import torch
from transformers import AutoModelForCausalLM

from rlhf.value_head import VALUE_HEAD_FILE, AutoModelForCausalLMWithValueHead, create_reference_model

IDS = torch.tensor([[1, 200, 300, 400, 500], [1, 600, 700, 800, 900]])


def test_forward_shapes_and_fp32_values(tiny_model_dir):
    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    logits, _, values = model(input_ids=IDS)
    assert logits.shape == (2, 5, model.config.vocab_size)
    assert values.shape == (2, 5) and values.dtype == torch.float32
    assert model.v_head.summary.weight.dtype == torch.float32
    # logits_to_keep=2: the last two positions only, values aligned with them
    kept_logits, _, kept_values = model(input_ids=IDS, logits_to_keep=2)
    assert kept_logits.shape[1] == 2 and torch.allclose(kept_values, values[:, -2:])


def test_zero_init_gives_zero_values(tiny_model_dir):
    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir, v_head_init="zero")
    assert model(input_ids=IDS)[2].abs().max().item() == 0.0


def test_save_and_load_round_trip(tiny_model_dir, tmp_path):
    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir, seed=3)
    with torch.no_grad():
        model.pretrained_model.model.layers[0].mlp.down_proj.weight.add_(0.5)  # differ from the base folder
    model.save_pretrained(tmp_path)
    assert (tmp_path / VALUE_HEAD_FILE).exists() and (tmp_path / "model.safetensors").exists()
    logits, _, values = model(input_ids=IDS)

    plain = AutoModelForCausalLM.from_pretrained(tmp_path)  # the value head file is ignored
    assert torch.allclose(plain(input_ids=IDS).logits, logits, atol=1e-5)
    again = AutoModelForCausalLMWithValueHead.from_pretrained(tmp_path, seed=99)  # seed would change a fresh head
    assert torch.allclose(again(input_ids=IDS)[2], values, atol=1e-6)


def test_lora_save_load_and_merge(tiny_model_dir, tmp_path):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir, peft_config=lora)
    assert model.is_peft_model
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or n.startswith("v_head") for n in trainable)
    with torch.no_grad():  # LoRA's B starts at zero: make the adapter do something
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    logits, _, values = model(input_ids=IDS)
    with model.disable_adapter():
        base_logits = model(input_ids=IDS)[0]
    assert not torch.allclose(logits, base_logits, atol=1e-4)

    model.save_pretrained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").exists()
    assert (tmp_path / "adapter" / VALUE_HEAD_FILE).exists()
    again = AutoModelForCausalLMWithValueHead.from_pretrained(tmp_path / "adapter")
    assert again.is_peft_model
    again_logits, _, again_values = again(input_ids=IDS)
    assert torch.allclose(again_logits, logits, atol=1e-5) and torch.allclose(again_values, values, atol=1e-6)

    merged = model.merge_and_unload()
    assert not model.is_peft_model and not hasattr(merged, "peft_config")
    model.save_pretrained(tmp_path / "merged")
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    assert torch.allclose(plain(input_ids=IDS).logits, logits, atol=1e-4)


def test_reference_model_is_a_frozen_copy(tiny_model_dir):
    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir)
    ref = create_reference_model(model)
    assert not ref.training and not any(p.requires_grad for p in ref.parameters())
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    assert not torch.equal(next(model.parameters()), next(ref.parameters()))
