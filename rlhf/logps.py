"""Summed completion log-probs of a `[chosen; rejected]` (or any prompt + completion) batch under a causal LM: the
one forward pass DPO and KTO both train on (and score their references with), with the shared-prompt layout that
runs a pair's prompt once.
"""
from __future__ import annotations

import inspect

import torch
from transformers import PreTrainedModel

from rlhf.attention import LEAN_EAGER
from rlhf.core import logprobs_from_logits, masked_sum
from rlhf.peft_utils import base_model, is_peft_model


def accepts_logits_to_keep(model: torch.nn.Module) -> bool:
    """Whether the model's forward can compute logits for the last positions only (transformers' logits_to_keep).
    A PeftModel's forward takes **kwargs: look at the model it wraps."""
    return "logits_to_keep" in inspect.signature(type(base_model(model)).forward).parameters


# Decoders whose logits are exactly lm_head(decoder(...).last_hidden_state) and whose attention takes a custom
# 4D mask with position_ids (eager, lean eager or SDPA): the shared-prompt forward below is exact for them.
SHARED_PROMPT_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")


def shared_prompt_layout(batch: dict[str, torch.Tensor]):
    """The `[chosen; rejected]` batch (2B, T) as B rows `prompt + chosen + rejected`, or None when a pair's
    two rows do not share their prompt tokens (or a completion is empty).

    Returns input_ids and position_ids (B, L), `allowed` (B, L, L): causal, real tokens only, and rejected
    tokens never see the chosen ones (their positions restart after the prompt, so each completion sees
    exactly what it sees in its own row); and for every completion token its (row, predictor index, token,
    output slot), the predictor being the token before it in its own sequence.
    """
    input_ids, attention_mask, completion_mask = batch["input_ids"], batch["attention_mask"], batch["completion_mask"]
    n = input_ids.shape[0]
    if n % 2 or not bool(completion_mask.any(dim=-1).all()):
        return None
    half = n // 2
    lengths = attention_mask.sum(dim=-1).tolist()
    prompt_lengths = completion_mask.argmax(dim=-1).tolist()  # first completion token
    rows, positions, rejected_from, ends = [], [], [], []
    gather_rows, gather_index, gather_tokens, gather_slots = [], [], [], []
    for b in range(half):
        c, r = b, half + b
        p = prompt_lengths[c]
        if p != prompt_lengths[r] or p == 0 or not torch.equal(input_ids[c, :p], input_ids[r, :p]):
            return None
        chosen, rejected = input_ids[c, p:lengths[c]], input_ids[r, p:lengths[r]]
        rows.append(torch.cat([input_ids[c, :p], chosen, rejected]))
        positions.append(torch.cat([torch.arange(p + len(chosen)), torch.arange(p, p + len(rejected))]))
        start_rejected = p + len(chosen)
        rejected_from.append(start_rejected)
        ends.append(start_rejected + len(rejected))
        predictors = torch.cat([torch.arange(p - 1, start_rejected - 1),  # chosen token j: predicted at j - 1
                                torch.tensor([p - 1]),  # the first rejected token follows the prompt
                                torch.arange(start_rejected, ends[-1] - 1)])
        gather_rows.append(torch.full((len(predictors),), b))
        gather_index.append(predictors)
        gather_tokens.append(torch.cat([chosen, rejected]))
        gather_slots.append(torch.cat([torch.full((len(chosen),), c), torch.full((len(rejected),), r)]))
    length = max(ends)
    ids = torch.zeros(half, length, dtype=input_ids.dtype)
    position_ids = torch.zeros(half, length, dtype=torch.long)
    for b, (row, pos) in enumerate(zip(rows, positions)):
        ids[b, : len(row)], position_ids[b, : len(pos)] = row, pos
    k = torch.arange(length)
    ends_t, rejected_t = torch.tensor(ends)[:, None], torch.tensor(rejected_from)[:, None]
    real = k[None, :] < ends_t  # (B, L)
    in_rejected = (k[None, :] >= rejected_t) & real  # (B, L)
    in_chosen = (k[None, :] >= torch.tensor(prompt_lengths[:half])[:, None]) & (k[None, :] < rejected_t)  # (B, L)
    # Padding queries see every real key before them (never an empty row: no NaN in the unused outputs).
    allowed = (k[None, None, :] <= k[None, :, None]) & real[:, None, :] & ~(in_rejected[:, :, None] & in_chosen[:, None, :])
    device = input_ids.device
    gather = tuple(torch.cat(g).to(device) for g in (gather_rows, gather_index, gather_tokens, gather_slots))
    return ids.to(device), position_ids.to(device), allowed.to(device), gather


def shared_prompt_logps(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor | None:
    """completion_logps with one forward per pair over prompt + chosen + rejected (the prompt, usually the
    longer part, is run once instead of twice), the LM head only on completion tokens and no padding through
    it. None when the model or the batch does not allow it."""
    if not isinstance(model, PreTrainedModel) and not is_peft_model(model):
        return None  # e.g. a DDP or DeepSpeed wrapper: its forward must run
    config = base_model(model).config
    implementation = getattr(config, "_attn_implementation", None)
    if config.model_type not in SHARED_PROMPT_MODEL_TYPES or implementation not in (LEAN_EAGER, "eager", "sdpa"):
        return None
    layout = shared_prompt_layout(batch)
    if layout is None:
        return None
    ids, position_ids, allowed, (rows, index, tokens, slots) = layout
    # eager and lean eager add the mask to the scores; SDPA takes True where attention is allowed.
    mask = allowed[:, None] if implementation == "sdpa" else \
        torch.zeros(allowed.shape, dtype=torch.float32, device=ids.device).masked_fill(~allowed, torch.finfo(torch.float32).min)[:, None]
    hidden = model.get_decoder()(input_ids=ids, attention_mask=mask, position_ids=position_ids).last_hidden_state  # (B, L, H)
    logits = model.get_output_embeddings()(hidden[rows, index])  # (N, V): completion tokens only
    logps = logprobs_from_logits(logits[None], tokens[None])[0]  # (N,)
    return torch.zeros(batch["input_ids"].shape[0], dtype=logps.dtype, device=logps.device).index_add(0, slots, logps)  # (2B,)


def completion_logps(model: torch.nn.Module, batch: dict[str, torch.Tensor], share_prompt: bool = True,
                     token_weights: torch.Tensor | None = None) -> torch.Tensor:
    """Summed log-probs of each sequence's completion tokens: (2B,) for the `[chosen; rejected]` batch.

    Prompt and padding tokens are masked out by completion_mask, so padding changes nothing. With
    share_prompt, a pair's chosen and rejected rows go through the model as one sequence (see
    shared_prompt_layout) when the model allows it; the numbers are the same. `token_weights` (2B, T), e.g.
    LD-DPO's, weight each token's log-prob in the sum instead of completion_mask.
    """
    if share_prompt and token_weights is None:
        logps = shared_prompt_logps(model, batch)
        if logps is not None:
            return logps
    input_ids, completion_mask = batch["input_ids"], batch["completion_mask"]
    length = input_ids.shape[1]
    # Token t is predicted by the logits at t - 1, so logits are needed from one position before the
    # batch's first completion token on. Skipping the prompt's logits saves part of the vocabulary
    # projection and log-softmax (49k wide for the default model), a large share of each step.
    start = max(int(completion_mask.argmax(dim=-1).min()), 1)
    keep = length - start + 1
    if accepts_logits_to_keep(model):
        logits = model(input_ids=input_ids, attention_mask=batch["attention_mask"], logits_to_keep=keep).logits  # (2B, keep, V)
    else:
        logits = model(input_ids=input_ids, attention_mask=batch["attention_mask"]).logits[:, -keep:]  # (2B, keep, V)
    logps = logprobs_from_logits(logits[:, :-1], input_ids[:, start:])  # (2B, T - start)
    weights = completion_mask if token_weights is None else token_weights
    return masked_sum(logps, weights[:, start:].to(logps.dtype), dim=-1)  # (2B,)


__all__ = ["SHARED_PROMPT_MODEL_TYPES", "accepts_logits_to_keep", "completion_logps", "shared_prompt_layout",
           "shared_prompt_logps"]
