"""PEFT value-head folders: ours load in both layouts (value_head.safetensors, and TRL 0.11's reading of
model.safetensors beside the adapter); TRL's pickle layout is refused with a command that converts it."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from rlhf.value_head import VALUE_HEAD_FILE, AutoModelForCausalLMWithValueHead


def lora_model(tiny_model_dir) -> AutoModelForCausalLMWithValueHead:
    from peft import LoraConfig

    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir, peft_config=LoraConfig(r=4, target_modules=["q_proj"]))
    with torch.no_grad():
        model.v_head.summary.weight.normal_(generator=torch.Generator().manual_seed(1))
        model.v_head.summary.bias.fill_(0.25)
    return model


def test_our_peft_folder_loads_here_with_peft_and_transformers_and_has_trls_safetensors_head(tiny_model_dir, tmp_path):
    from peft import PeftModel

    model = lora_model(tiny_model_dir)
    model.save_pretrained(tmp_path / "a")
    head = {k: v for k, v in model.v_head.summary.state_dict().items()}
    # What TRL 0.11's from_pretrained reads first in a PEFT folder: model.safetensors, keys with "v_head."
    trl_view = load_file(str(tmp_path / "a" / "model.safetensors"))
    assert set(trl_view) == {"v_head.summary.weight", "v_head.summary.bias"}
    assert all(torch.equal(trl_view[f"v_head.summary.{k}"], v) for k, v in head.items())
    again = AutoModelForCausalLMWithValueHead.from_pretrained(tmp_path / "a")
    assert again.is_peft_model and all(torch.equal(again.v_head.summary.state_dict()[k], v) for k, v in head.items())
    # the extra file changes nothing for peft and for transformers' adapter loading
    assert isinstance(PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), tmp_path / "a"), PeftModel)
    assert hasattr(AutoModelForCausalLM.from_pretrained(tmp_path / "a"), "peft_config")


def test_trls_pickled_peft_head_is_refused_with_a_command_that_converts_it(tiny_model_dir, tmp_path):
    model = lora_model(tiny_model_dir)
    folder = tmp_path / "trl"
    model.pretrained_model.save_pretrained(folder)  # TRL 0.11: the adapter, and the head as a pickle beside it
    torch.save({f"v_head.summary.{k}": v for k, v in model.v_head.summary.state_dict().items()}, folder / "pytorch_model.bin")
    with pytest.raises(ValueError) as error:
        AutoModelForCausalLMWithValueHead.from_pretrained(folder)
    message = str(error.value)
    assert "\n" not in message and "TRL 0.11's PEFT layout" in message and "safetensors only" in message
    command = message.split("convert it once with: ", 1)[1]
    subprocess.run(command, shell=True, check=True, env={**os.environ, "PYTHONWARNINGS": "ignore"}, timeout=120)
    converted = AutoModelForCausalLMWithValueHead.from_pretrained(folder)
    assert torch.equal(converted.v_head.summary.weight, model.v_head.summary.weight)
    assert converted.v_head.summary.bias.item() == 0.25
    assert (folder / VALUE_HEAD_FILE).exists()
