"""rlhf/loading.py: short names, the cache folder, tokenizers with a pad token, safetensors-only loading, adapters."""
import shutil

import pytest
import torch

from rlhf.loading import (
    CHAT_END_TOKEN, cache_dir, default_encoder_path, default_model_path, load_causal_lm, load_tokenizer,
    resolve_model_path,
)


def test_short_names_folders_and_hub_ids(monkeypatch, tmp_path):
    assert resolve_model_path("default") == str(default_model_path())
    assert resolve_model_path("default-encoder") == str(default_encoder_path())
    assert resolve_model_path(tmp_path) == str(tmp_path)
    assert resolve_model_path("org/model") == "org/model"  # a hub id is passed on unchanged
    monkeypatch.setenv("RLHF_STUDIO_CACHE", str(tmp_path / "cache"))
    assert cache_dir() == tmp_path / "cache"


def test_the_converted_default_model_ends_turns_with_its_pad_token():
    folder = default_model_path()
    assert (folder / "model.safetensors").exists() and not list(folder.glob("*.bin"))
    tokenizer = load_tokenizer("default")
    assert tokenizer.eos_token == tokenizer.pad_token == CHAT_END_TOKEN and tokenizer.padding_side == "left"
    assert load_tokenizer("default", padding_side="right").padding_side == "right"


def test_an_encoder_without_eos_pads_with_sep(tiny_encoder_dir):
    tokenizer = load_tokenizer(tiny_encoder_dir)
    assert tokenizer.eos_token is None and tokenizer.pad_token is not None


def test_safetensors_only_and_adapters_on_their_base(tiny_model_dir, tmp_path):
    model = load_causal_lm(tiny_model_dir)
    ids = torch.tensor([[1, 2, 3]])
    # a folder with only pytorch_model.bin (pickle) is refused, not loaded
    pickled = tmp_path / "pickled"
    shutil.copytree(tiny_model_dir, pickled)
    (pickled / "model.safetensors").unlink()
    torch.save(model.state_dict(), pickled / "pytorch_model.bin")
    with pytest.raises(OSError):
        load_causal_lm(pickled)
    # an adapter folder is loaded on the base model its adapter_config.json names
    from peft import LoraConfig, PeftModel, get_peft_model

    torch.manual_seed(0)
    adapter = get_peft_model(load_causal_lm(tiny_model_dir), LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False))
    adapter.save_pretrained(tmp_path / "adapter")
    loaded = load_causal_lm(tmp_path / "adapter")
    assert isinstance(loaded, PeftModel)
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, adapter(ids).logits, atol=1e-5)
        assert not torch.allclose(loaded(ids).logits, model(ids).logits, atol=1e-3)  # the adapter is applied
