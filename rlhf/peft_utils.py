"""LoRA helpers shared by the trainers: wrap a model, and merge an adapter into a plain model folder."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch


def apply_peft(model: torch.nn.Module, peft_config, gradient_checkpointing: bool = False) -> torch.nn.Module:
    """Wrap `model` with a fresh adapter from `peft_config` (None: unchanged)."""
    if peft_config is None:
        return model
    from peft import PeftModel, get_peft_model

    if isinstance(model, PeftModel):
        raise ValueError("peft_config was given but the model already carries an adapter; pass one or the other")
    if is_quantized(model):
        from peft import prepare_model_for_kbit_training

        # QLoRA: norms and the LM head in fp32, input gradients on (peft's recipe for a 4-bit base).
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing)
    elif gradient_checkpointing:
        # With frozen embeddings no input requires grad, and checkpointed blocks would then get no gradient.
        model.enable_input_require_grads()
    model = get_peft_model(model, peft_config)
    # peft keeps the adapters in fp32, but a trainable copy it makes of a half-precision base's module (a reward
    # model's score head, modules_to_save) stays half: give every trained weight an fp32 master (rlhf/precision.py).
    for parameter in model.parameters():
        if parameter.requires_grad and parameter.dtype in (torch.bfloat16, torch.float16):
            parameter.data = parameter.data.float()
    return model


def is_quantized(model: torch.nn.Module) -> bool:
    """Whether the (base) model's weights were loaded 4- or 8-bit through bitsandbytes."""
    model = base_model(model)
    return bool(getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_loaded_in_8bit", False))


def is_peft_model(model: torch.nn.Module) -> bool:
    """The one "does this model carry a peft adapter" check (a peft.PeftModel wrapper)."""
    # Only peft builds a PeftModel, so until peft is imported no model is one: no 2 s import for plain models.
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under a peft wrapper (the model itself when it has none)."""
    return model.get_base_model() if is_peft_model(model) else model


def merge_adapter(model: torch.nn.Module) -> torch.nn.Module:
    """A loaded adapter folded into its base weights (other models unchanged).

    Training that starts from an adapter run (DPO after LoRA SFT) starts from the merged model: it can
    then be trained fully or take a fresh adapter, and DPO's reference is that merged model.
    """
    if not is_peft_model(model):
        return model
    # peft froze the base weights when loading the adapter; the merged model is what we now train.
    return model.merge_and_unload().requires_grad_(True)


def merged_model(model: torch.nn.Module) -> torch.nn.Module:
    """A PeftModel's adapter merged into its base: a plain model (other models unchanged). A 4-bit base (QLoRA)
    cannot hold merged weights, so its adapter is merged into the base reloaded unquantised, in the compute
    dtype (QLoRA's recipe), from the folder or hub id it was loaded from."""
    if not is_peft_model(model):
        return model
    if not is_quantized(model):
        return model.merge_and_unload()
    import tempfile

    from peft import PeftModel

    from rlhf.loading import load_causal_lm

    base = base_model(model)
    quantization = getattr(base.config, "quantization_config", None)
    compute = getattr(quantization, "bnb_4bit_compute_dtype", None) if not isinstance(quantization, dict) else \
        quantization.get("bnb_4bit_compute_dtype")
    with tempfile.TemporaryDirectory() as adapter:
        model.save_pretrained(adapter)
        full = load_causal_lm(base.name_or_path, dtype=compute or "auto")
        return PeftModel.from_pretrained(full, adapter).merge_and_unload()


def merge_and_save(model_or_adapter, out_dir: str | os.PathLike, tokenizer=None) -> Path:
    """Merge a LoRA adapter into its base weights and save a plain safetensors folder that
    AutoModelForCausalLM (or AutoModelForSequenceClassification) loads with no peft installed.

    `model_or_adapter` is a PeftModel or the folder of a saved causal-LM adapter.
    """
    out = Path(out_dir)
    if isinstance(model_or_adapter, (str, os.PathLike)):
        from rlhf.loading import load_causal_lm, load_tokenizer

        folder = Path(model_or_adapter)
        if not (folder / "adapter_config.json").exists():
            raise FileNotFoundError(f"{folder}: no adapter_config.json, so this is not a saved adapter")
        model = load_causal_lm(folder)
        if tokenizer is None:
            has_tokenizer = (folder / "tokenizer_config.json").exists()
            base = json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"]
            tokenizer = load_tokenizer(folder if has_tokenizer else base, padding_side="right")
    else:
        model = model_or_adapter
    if not is_peft_model(model):
        raise ValueError("merge_and_save needs a model with a LoRA adapter")
    merged = model.merge_and_unload()
    merged.save_pretrained(out, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out
