"""Which attention kernel to train with.

On CPU, torch's SDPA runs a flash-attention kernel whose backward pass is slow for short sequences and
small heads. With SmolLM2-135M (9 heads of 64) plain "eager" attention (matmul, softmax, matmul) took 8%
less time per forward + backward at 4 x 35 tokens (a PPO mini-batch) and 15-18% less at 8 x 128 tokens (a
DPO batch), in fp32 and in bf16, on this 2-core machine. Its memory grows with the square of the sequence
length, which is no matter at these lengths. On GPUs SDPA is the better kernel, so "auto" leaves it there.
"""
from __future__ import annotations

import torch

from rlhf.peft_utils import base_model

CHOICES = ("auto", "eager", "sdpa", "model")


def training_attention(requested: str, device: torch.device | str) -> str | None:
    """The kernel to set for training, or None to keep the model's own. 'auto': eager on CPU."""
    if requested not in CHOICES:
        raise ValueError(f"attn_implementation={requested!r}: must be one of {', '.join(CHOICES)}")
    if requested == "model":
        return None
    if requested == "auto":
        return "eager" if torch.device(device).type == "cpu" else None
    return requested


def use_attention(model: torch.nn.Module, requested: str, device: torch.device | str) -> None:
    """Switch a transformers model (also under a peft wrapper) to the kernel `training_attention` picks."""
    implementation = training_attention(requested, device)
    if implementation is None:
        return
    base = base_model(model)
    if hasattr(base, "set_attn_implementation"):
        base.set_attn_implementation(implementation)
