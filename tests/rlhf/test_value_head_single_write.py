"""The value head's TRL keys are written with the model's weights in one pass: saving never reads the model file
back to rewrite it (a 1.5B model's 6 GB at every checkpoint), and both layouts still load."""
from __future__ import annotations

import torch
from safetensors import safe_open

from rlhf.value_head import VALUE_HEAD_FILE, AutoModelForCausalLMWithValueHead


def test_saving_writes_the_model_file_once_and_reads_nothing_back(tiny_model_dir, tmp_path, monkeypatch):
    import safetensors.torch

    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir, seed=5)

    def read_back(*args, **kwargs):
        raise AssertionError(f"a weights file was read back while saving: {args}")

    monkeypatch.setattr(safetensors.torch, "load_file", read_back)
    model.save_pretrained(tmp_path)
    monkeypatch.undo()
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as f:  # TRL 0.11's layout
        assert torch.equal(f.get_tensor("v_head.summary.weight"), model.v_head.summary.weight.detach())
    assert (tmp_path / VALUE_HEAD_FILE).exists()  # this library's, loaded on resume
    (tmp_path / VALUE_HEAD_FILE).unlink()
    again = AutoModelForCausalLMWithValueHead.from_pretrained(tmp_path)  # the TRL layout alone still loads
    assert torch.equal(again.v_head.summary.bias, model.v_head.summary.bias)
