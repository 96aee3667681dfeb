"""A tuned model is written in the dtype its base checkpoint was stored in: training keeps fp32 master weights, and
saving them as they were doubled every run's model on disk (the app-loop check at the 1.5B shape: a 3.1 GB bf16 base
gave 6.2 GB fp32 models from each PPO run)."""
from __future__ import annotations

import json
import pytest
import torch
from safetensors import safe_open

from rlhf.loading import load_causal_lm, save_in_stored_dtype, stored_dtype, weights_in_dtype
from rlhf.value_head import AutoModelForCausalLMWithValueHead


@pytest.fixture
def bf16_base(tiny_bf16_model_dir):
    return tiny_bf16_model_dir


def dtypes(folder) -> set[torch.dtype]:
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return {f.get_tensor(k).dtype for k in f.keys() if not k.startswith("v_head.")}


def test_stored_dtype_reads_the_checkpoints_config(bf16_base, tiny_model_dir, tmp_path):
    assert stored_dtype(bf16_base) == torch.bfloat16
    assert stored_dtype(tiny_model_dir) is None  # fp32: nothing to change
    assert stored_dtype("someone/not-on-this-disk") is None
    old = tmp_path / "old"
    old.mkdir()
    (old / "config.json").write_text(json.dumps({"torch_dtype": "float16"}))  # transformers 4's key
    assert stored_dtype(old) == torch.float16
    weights = {"w": torch.ones(2), "steps": torch.tensor([3])}
    cast = weights_in_dtype(weights, torch.bfloat16)
    assert cast["w"].dtype == torch.bfloat16 and cast["steps"].dtype == torch.int64
    assert weights_in_dtype(weights, None) is weights


def test_a_ppo_policy_from_a_bf16_base_is_saved_in_bf16_and_loads_the_same(bf16_base, tmp_path):
    model = AutoModelForCausalLMWithValueHead.from_pretrained(str(bf16_base), dtype=torch.float32)
    with torch.no_grad():  # a "trained" policy: weights that differ from the base
        for p in model.pretrained_model.parameters():
            p.add_(0.01)
    model.save_merged(tmp_path / "as-trained")  # no dtype: the fp32 master weights, as before
    model.save_merged(tmp_path / "stored", dtype=torch.bfloat16)
    assert dtypes(tmp_path / "as-trained") == {torch.float32} and dtypes(tmp_path / "stored") == {torch.bfloat16}
    size = {name: (tmp_path / name / "model.safetensors").stat().st_size for name in ("as-trained", "stored")}
    assert size["stored"] < 0.55 * size["as-trained"]
    assert json.loads((tmp_path / "stored" / "config.json").read_text())["dtype"] == "bfloat16"
    # The value head stays fp32 beside it, and the saved model loads "auto" in bf16 with its embeddings tied.
    with safe_open(str(tmp_path / "stored" / "value_head.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float32}
    loaded = load_causal_lm(str(tmp_path / "stored"), dtype="auto")
    assert loaded.dtype == torch.bfloat16
    assert loaded.lm_head.weight.data_ptr() == loaded.get_input_embeddings().weight.data_ptr()
    trained = model.pretrained_model.state_dict()
    assert all(torch.equal(value, trained[name].to(torch.bfloat16)) for name, value in loaded.state_dict().items())


def test_a_merged_lora_policy_is_saved_in_the_bases_dtype(bf16_base, tmp_path):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    model = AutoModelForCausalLMWithValueHead.from_pretrained(str(bf16_base), peft_config=lora, dtype=torch.float32)
    model.save_merged(tmp_path / "lora", dtype=torch.bfloat16)
    assert dtypes(tmp_path / "lora") == {torch.bfloat16}
    assert not (tmp_path / "lora" / "adapter_config.json").exists()  # a whole model, merged


def test_a_plain_model_is_saved_in_its_bases_dtype(bf16_base, tiny_model_dir, tmp_path):
    model = load_causal_lm(str(bf16_base), dtype=torch.float32)
    save_in_stored_dtype(model, tmp_path / "grpo", bf16_base)
    assert dtypes(tmp_path / "grpo") == {torch.bfloat16}
    assert model.dtype == torch.float32  # the model in memory is left as it was
    save_in_stored_dtype(load_causal_lm(str(tiny_model_dir)), tmp_path / "fp32", tiny_model_dir)
    assert dtypes(tmp_path / "fp32") == {torch.float32}
