"""Which attention kernel to train with.

On CPU, torch's SDPA runs a flash-attention kernel whose backward pass is slow for short sequences and
small heads. With SmolLM2-135M (9 heads of 64) plain "eager" attention (matmul, softmax, matmul) took 8%
less time per forward + backward at 4 x 35 tokens (a PPO mini-batch) and 15-18% less at 8 x 128 tokens (a
DPO batch), in fp32 and in bf16, on this 2-core machine. Its memory grows with the square of the sequence
length, which is no matter at these lengths. On GPUs SDPA is the better kernel, so "auto" leaves it there.

"auto" on CPU picks "lean_eager", not transformers' "eager": the same three operations, but under bf16 autocast
transformers' version adds the model's fp32 mask to the bf16 scores, which promotes the scores, the softmax and
the probabilities it keeps for the backward pass to fp32, then casts them to bf16 again for the matmul with the
values: 6 bytes per attention weight kept, against 2 here (scores, mask, softmax and probabilities stay in the
compute dtype; the CPU softmax kernel accumulates in fp32 either way). In fp32 the two agree to rounding.
"""
from __future__ import annotations

import importlib.util

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from rlhf.configs import ATTENTION_CHOICES as CHOICES
from rlhf.peft_utils import base_model

LEAN_EAGER = "lean_eager"


def lean_eager_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                         **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T * scaling + mask) v in the dtype of the scores; transformers' attention-function signature:
    query (B, H, Lq, D), key and value (B, H_kv, Lk, D) with H a multiple of H_kv (grouped-query attention),
    attention_mask additive (B, 1, Lq, >= Lk) or boolean (True: attend). Returns the output (B, Lq, H, D) and the
    attention weights (B, H, Lq, Lk)."""
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    groups = query.shape[1] // key.shape[1]
    if groups > 1:  # each key/value head serves `groups` query heads in a row (transformers' repeat_kv)
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    scores = torch.matmul(query, key.transpose(2, 3)).mul_(scaling)  # in place: matmul keeps its inputs, not this
    if attention_mask is not None:
        mask = attention_mask[..., : key.shape[-2]]
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        else:
            # finfo(float32).min is beyond bf16's largest magnitude and would round to -inf: a query that sees no
            # key at all (a left-padded row's padding) would then softmax to NaN, and 0 x NaN spreads it to the
            # real rows of the next layer. Clamped to the compute dtype's minimum it stays finite.
            scores = scores + mask.clamp(min=torch.finfo(scores.dtype).min).to(scores.dtype)
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nn.functional.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights.to(value.dtype), value)
    return output.transpose(1, 2).contiguous(), weights


# Registered once at import, as transformers' own kernels are: the model then builds eager's additive mask for it.
AttentionInterface.register(LEAN_EAGER, lean_eager_attention)
AttentionMaskInterface.register(LEAN_EAGER, eager_mask)


def training_attention(requested: str, device: torch.device | str) -> str | None:
    """The kernel to set for training, or None to keep the model's own. 'auto': lean eager on CPU."""
    if requested not in CHOICES:
        raise ValueError(f"attn_implementation={requested!r}: must be one of {', '.join(CHOICES)}")
    if requested == "model":
        return None
    if requested == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
        raise ValueError("attn_implementation='flash_attention_2' needs the flash-attn package and a CUDA GPU "
                         "(pip install flash-attn --no-build-isolation); sdpa is the kernel to use without it")
    if requested == "auto":
        return LEAN_EAGER if torch.device(device).type == "cpu" else None
    return requested


def use_attention(model: torch.nn.Module, requested: str, device: torch.device | str) -> None:
    """Switch a transformers model (also under a peft wrapper) to the kernel `training_attention` picks."""
    implementation = training_attention(requested, device)
    if implementation is None:
        return
    base = base_model(model)
    if hasattr(base, "set_attn_implementation"):
        base.set_attn_implementation(implementation)
