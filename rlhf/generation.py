"""Generation helpers on top of transformers' `generate`: prompt building, batched left-padded sampling.

Conventions: prompts are left padded so every row's last prompt token sits at the same
position and generation continues from there; the pad token is EOS when a tokenizer has none.
A returned response keeps its first EOS (PPO puts the reward on the last response token, TRL does the
same) and drops everything after it, padding included.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Sequence

import torch

from rlhf.configs import GenerationSettings
from rlhf.precision import autocast_dtype

Message = dict  # {"role": "system" | "user" | "assistant", "content": str}
Progress = Callable[[int, int], None]


def build_prompt_ids(
    tokenizer,
    prompt_or_messages: str | Sequence[Message],
    system_prompt: str | None = None,
    use_chat_template: bool | None = None,
) -> torch.Tensor:
    """Token ids (1-D LongTensor) of a prompt, ready for generation.

    A string is one user turn; a list is a conversation of {"role", "content"} messages. With a chat
    template (used when the tokenizer has one, unless use_chat_template=False) the assistant turn is
    opened; without one the messages are joined as plain text, so a base model simply continues it.
    """
    if isinstance(prompt_or_messages, str):
        messages = [{"role": "user", "content": prompt_or_messages}]
    else:
        messages = [dict(message) for message in prompt_or_messages]
    if system_prompt and not (messages and messages[0]["role"] == "system"):
        messages.insert(0, {"role": "system", "content": system_prompt})
    if use_chat_template is None:
        use_chat_template = getattr(tokenizer, "chat_template", None) is not None
    if use_chat_template:
        # Render to text, then tokenize without adding special tokens: the template already holds them.
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    else:
        text = "\n\n".join(message["content"] for message in messages)
        ids = tokenizer(text)["input_ids"]
    return torch.tensor(ids, dtype=torch.long)


def kl_unsafe_reasons(settings: GenerationSettings) -> list[str]:
    """Why samples drawn with these settings are not from the policy's own distribution.

    PPO's KL penalty estimates KL(policy || reference) from the sampled tokens; truncating or reshaping
    the distribution makes that estimate biased (and can make it negative). Empty list: safe.
    """
    reasons = []
    if not settings.do_sample:
        reasons.append("do_sample=False: greedy decoding is not a sample from the policy")
    if settings.top_k != 0:
        reasons.append(f"top_k={settings.top_k}: truncates the distribution (use 0)")
    if settings.top_p != 1.0:
        reasons.append(f"top_p={settings.top_p}: truncates the distribution (use 1.0)")
    if settings.temperature != 1.0:
        reasons.append(f"temperature={settings.temperature}: reshapes the distribution (use 1.0)")
    if settings.min_length > 0:
        reasons.append(f"min_length={settings.min_length}: forbids EOS early on (use -1)")
    if settings.autocast:
        reasons.append("autocast=True: samples come from the bfloat16 model, log-probs from the float32 one")
    return reasons


def eos_token_ids(model, tokenizer) -> list[int]:
    """Every id that ends a response: the tokenizer's EOS plus the model's generation_config EOS ids."""
    ids = []
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in [tokenizer.eos_token_id, configured]:
        for token_id in value if isinstance(value, (list, tuple)) else [value]:
            if token_id is not None and token_id not in ids:
                ids.append(int(token_id))
    return ids


def generation_kwargs(settings: GenerationSettings, eos_ids: list[int], pad_id: int) -> dict:
    """Keyword arguments for `model.generate`, every sampling knob explicit.

    transformers fills unset knobs from the model's generation_config and then from global defaults
    (top_k=50 among them), so top_k, top_p and temperature are always passed, never left implicit.
    """
    kwargs = dict(
        max_new_tokens=settings.max_new_tokens,
        do_sample=settings.do_sample,
        eos_token_id=eos_ids,
        pad_token_id=pad_id,
    )
    if settings.do_sample:
        kwargs.update(top_k=settings.top_k, top_p=settings.top_p, temperature=settings.temperature)
    else:
        # Greedy: neutral values, so a model's generation_config cannot slip sampling warpers in.
        kwargs.update(top_k=None, top_p=None, temperature=None)
    if settings.min_length > 0:
        kwargs["min_new_tokens"] = settings.min_length
    return kwargs


def autocast_context(model, enabled: bool):
    """bfloat16 autocast on the model's device type when enabled (fp16 on a GPU without bf16), else nothing."""
    if not enabled:
        return contextlib.nullcontext()
    device_type = next(model.parameters()).device.type
    return torch.autocast(device_type=device_type, dtype=autocast_dtype(True, device_type))


def left_pad(prompt_ids: Sequence[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack 1-D prompts into (B, T) input ids and attention mask, padded on the left."""
    width = max(len(ids) for ids in prompt_ids)
    input_ids = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
    for row, ids in enumerate(prompt_ids):
        input_ids[row, width - len(ids) :] = ids
        attention_mask[row, width - len(ids) :] = 1
    return input_ids, attention_mask


def truncate_after_eos(tokens: torch.Tensor, eos_ids: list[int]) -> torch.Tensor:
    """Keep tokens up to and including the first EOS; drop what follows (padding, or more EOS)."""
    is_eos = torch.isin(tokens, torch.tensor(eos_ids, dtype=tokens.dtype))
    positions = is_eos.nonzero()
    if len(positions) == 0:
        return tokens
    return tokens[: int(positions[0]) + 1]


@torch.no_grad()
def generate_batch(
    model,
    tokenizer,
    prompt_ids: Sequence[torch.Tensor],
    settings: GenerationSettings,
    progress: Progress | None = None,
) -> list[torch.Tensor]:
    """Generate one response per prompt, `settings.batch_size` prompts at a time.

    Returns the new tokens of each prompt, in the input order, up to and including the first EOS.
    Sampling is seeded by `settings.seed` inside a forked RNG, so the caller's global RNG is untouched
    and the same call gives the same tokens. `progress(done, total)` is called after each batch.
    """
    if len(prompt_ids) == 0:
        return []
    eos_ids = eos_token_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
    kwargs = generation_kwargs(settings, eos_ids, pad_id)
    device = next(model.parameters()).device
    # Similar lengths together: less padding per batch. Results go back to the caller's order at the end.
    order = sorted(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]))
    results: list[torch.Tensor | None] = [None] * len(prompt_ids)
    was_training = model.training
    model.eval()
    # fork_rng restores the global RNG afterwards; transformers' generate cannot take a torch.Generator.
    devices = [device] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(settings.seed)
            for start in range(0, len(order), settings.batch_size):
                batch = order[start : start + settings.batch_size]
                input_ids, attention_mask = left_pad([prompt_ids[i] for i in batch], pad_id)
                with autocast_context(model, settings.autocast):
                    output = model.generate(
                        input_ids=input_ids.to(device), attention_mask=attention_mask.to(device), **kwargs
                    )  # (B, T + new)
                new_tokens = output[:, input_ids.shape[1] :].cpu()  # (B, new)
                for row, index in enumerate(batch):
                    results[index] = truncate_after_eos(new_tokens[row], eos_ids)
                if progress is not None:
                    progress(min(start + len(batch), len(order)), len(order))
    finally:
        model.train(was_training)
    return results  # type: ignore[return-value]


def decode_responses(tokenizer, responses: Sequence[torch.Tensor]) -> list[str]:
    """Response texts without special tokens (the kept EOS disappears here)."""
    return [tokenizer.decode(tokens, skip_special_tokens=True) for tokens in responses]
