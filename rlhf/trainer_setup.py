"""The steps every Trainer subclass here (SFT, Reward, DPO, KTO, GRPO, RLOO) applies to the model it trains and to
its frozen reference, in one place so they cannot drift apart. rlhf/base_trainer.py calls them."""
from __future__ import annotations

import torch

from rlhf.attention import use_attention
from rlhf.autocast_inputs import share_input_casts
from rlhf.loading import load_causal_lm
from rlhf.peft_utils import apply_peft, base_model, merge_adapter
from rlhf.precision import model_load_kwargs, warn_if_no_master_weights


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Activation checkpointing of a transformers model (also under a peft wrapper): each block's activations are
    recomputed in the backward pass. Non-reentrant (torch's recommended variant): it needs no input that
    requires grad, so LoRA's frozen embeddings need no enable_input_require_grads."""
    model = base_model(model)
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2's name; the old one warns
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def prepare_model(model: torch.nn.Module, args, peft_config=None) -> torch.nn.Module:
    """LoRA adapters when `peft_config` is given, then the training attention kernel (`args.attn_implementation`)
    and, with `args.share_input_casts`, one bf16 input cast per attention/MLP block. The order matters: the
    kernel and the cast hooks must see the modules that will run, i.e. the adapter-wrapped model."""
    model = apply_peft(model, peft_config, args.gradient_checkpointing)
    warn_if_no_master_weights(model)
    use_attention(model, args.attn_implementation, args.device)
    if args.share_input_casts:
        share_input_casts(model)
    return model


def disable_dropout(*models: torch.nn.Module | None) -> None:
    """Every dropout probability to 0 (the same log-probs for the same input), in each model given (None skipped)."""
    for model in models:
        if model is None:
            continue
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0


def load_reference(name_or_path, args) -> torch.nn.Module:
    """A reference model named by path or name ('default', a folder, an adapter folder: merged), loaded as the
    policy is but without LoRA, and frozen for memory (model_load_kwargs' frozen=True)."""
    return merge_adapter(load_causal_lm(name_or_path, **model_load_kwargs(args, lora=False, frozen=True)))


def freeze_reference(model: torch.nn.Module, args) -> torch.nn.Module:
    """The reference as it runs: eval mode (no dropout), no gradients, the training attention kernel."""
    model = model.eval().requires_grad_(False)
    use_attention(model, args.attn_implementation, args.device)
    return model
