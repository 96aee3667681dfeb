"""Pure tensor helpers shared by the trainers: masked statistics, log-probs, entropy, padding rules.

Conventions: masks are 1 for real tokens and 0 for padding (or tokens after EOS);
every statistic here ignores masked positions exactly, so a padded batch gives the same numbers
as its items taken one at a time.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
import torch.nn.functional as F


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    return (values * mask).sum() if dim is None else (values * mask).sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean over positions where mask is 1 (all of them, or along `dim`)."""
    mask = mask.to(values.dtype)
    if dim is None:
        return (values * mask).sum() / mask.sum().clamp(min=1)
    return (values * mask).sum(dim=dim) / mask.sum(dim=dim).clamp(min=1)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance over masked positions; `unbiased` applies Bessel's correction n / (n - 1)."""
    mask = mask.to(values.dtype)
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        n = mask.sum()
        if n < 2:
            raise ValueError(f"masked_var: need at least 2 unmasked values for an unbiased variance, got {int(n)}")
        variance = variance * n / (n - 1)
    return variance


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """(x - mean) / std over masked positions; shift_mean=False keeps the mean (as TRL does for rewards).

    Masked positions come back as 0 so they can never leak into a later sum.
    """
    # A single unmasked value has no spread: it whitens to 0 (rather than NaN) and carries no signal.
    mean = masked_mean(values, mask)
    var = masked_var(values, mask) if mask.sum() >= 2 else torch.zeros((), dtype=values.dtype)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened * mask.to(values.dtype)


def clip_by_value(x: torch.Tensor, low: torch.Tensor | float, high: torch.Tensor | float) -> torch.Tensor:
    return torch.max(torch.min(x, torch.as_tensor(high, dtype=x.dtype)), torch.as_tensor(low, dtype=x.dtype))


# Rows (positions) per chunk of the vocabulary-wide passes: a chunk's fp32 copy is at most ~64 MB (110 rows of
# Qwen's 151,936 tokens, 340 of SmolLM2's 49,152), whatever the batch.
LOGSOFTMAX_CHUNK_ELEMENTS = 1 << 24


def _chunk_rows(vocab_size: int) -> int:
    return max(1, LOGSOFTMAX_CHUNK_ELEMENTS // max(vocab_size, 1))


def _row_chunks(logits: torch.Tensor):
    """(b, slice) over a (B, T, V) tensor, a few rows of one sequence at a time. Never reshaped: logits[:, :-1]
    (what every trainer passes) is not contiguous, and flattening it would copy the whole logits."""
    rows = _chunk_rows(logits.shape[-1])
    for b in range(logits.shape[0]):
        for start in range(0, logits.shape[1], rows):
            yield b, slice(start, start + rows)


class _SelectiveLogSoftmax(torch.autograd.Function):
    """log softmax(logits / temperature)[label] per position of (B, T, V) logits, computed a few rows at a time
    in fp32, keeping nothing vocabulary-wide but the logits themselves (the LM head's output, which exists anyway).

    Forward: picked - logsumexp per chunk. Backward: d/dz = (onehot - softmax(z / t)) / t, recomputed per chunk
    from the saved logits and logsumexp. log_softmax(logits.float()) + gather instead kept a fp32 (B, T, V) copy
    for its backward and made two more in it: 5 GB each at 16 x 512 tokens of a 151,936-token vocabulary."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> torch.Tensor:
        out = torch.empty(labels.shape, dtype=torch.float32, device=logits.device)  # (B, T)
        lse = torch.empty_like(out)
        for b, rows in _row_chunks(logits):
            z = logits[b, rows].float()  # (n, V), fp32 one chunk at a time
            if temperature != 1.0:
                z = z / temperature
            lse[b, rows] = torch.logsumexp(z, dim=-1)
            out[b, rows] = z.gather(-1, labels[b, rows, None]).squeeze(-1)
        ctx.save_for_backward(logits, labels, lse)
        ctx.temperature = temperature
        return out - lse

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        logits, labels, lse = ctx.saved_tensors
        t = ctx.temperature
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        for b, rows in _row_chunks(logits):
            g = grad_out[b, rows, None].float()  # (n, 1)
            z = logits[b, rows].float()
            if t != 1.0:
                z = z / t
            chunk = torch.exp(z - lse[b, rows, None]).mul_(-g)  # -g * softmax
            chunk.scatter_add_(-1, labels[b, rows, None], g)  # + g at the label
            if t != 1.0:
                chunk.div_(t)
            grad[b, rows] = chunk
        return grad, None, None


def selective_log_softmax(logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / temperature) at `labels`: logits (..., V), labels (...) -> fp32 (...).

    In fp32 whatever the logits' dtype (under bf16 autocast they are bf16): the PPO ratio exp(new - old) amplifies
    rounding error, and bf16 has 8 bits of mantissa. Chunked over positions, so no fp32 (..., V) tensor is kept
    (TRL's selective_log_softmax does the same for fp32 logits; here bf16 logits are upcast per chunk too).
    """
    if labels.dim() == 1:  # (T,): one sequence
        return _SelectiveLogSoftmax.apply(logits[None], labels[None], float(temperature))[0]
    shape = labels.shape
    if labels.dim() > 2:
        logits, labels = logits.flatten(0, -3), labels.flatten(0, -2)  # (..., T, V) -> (B', T, V)
    return _SelectiveLogSoftmax.apply(logits, labels, float(temperature)).reshape(shape)


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log p(label) per position: logits (B, T, V), labels (B, T) -> (B, T), fp32 (selective_log_softmax)."""
    return selective_log_softmax(logits, labels)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy of softmax(logits / temperature) per position: (..., V) -> fp32 (...). H = logsumexp(z) - sum p z,
    in fp32 a chunk of positions at a time (no fp32 copy of the whole logits)."""
    flat = logits.reshape(-1, logits.shape[-1])
    rows = _chunk_rows(flat.shape[-1])
    parts = []
    for start in range(0, flat.shape[0], rows):
        z = flat[start : start + rows].float()
        if temperature != 1.0:
            z = z / temperature
        parts.append(torch.logsumexp(z, dim=-1) - (F.softmax(z, dim=-1) * z).sum(dim=-1))
    if not parts:
        return flat.new_zeros(logits.shape[:-1], dtype=torch.float32)
    return torch.cat(parts).reshape(logits.shape[:-1])


def full_kl_from_logits(logits: torch.Tensor, ref_logits: torch.Tensor) -> torch.Tensor:
    """Exact KL(softmax(logits) || softmax(ref_logits)) over the vocabulary per position: (..., V) twice -> fp32 (...).

    sum_v p (log p - log q) in fp32, a chunk of rows of one sequence at a time (_row_chunks): the extra memory is a
    few fp32 (rows, V) chunks, not the fp32 (B, T, V) log-softmaxes of both models and the three temporaries of the
    product (5 GB each at 16 x 512 tokens of Qwen's vocabulary). Each row's value is the same formula as before.
    Under autograd each chunk is recomputed in backward (torch.utils.checkpoint), so backward keeps no fp32 chunk
    either; PPO calls it under no_grad (rollout statistics), where this does not arise."""
    if logits.shape != ref_logits.shape:
        raise ValueError(f"full_kl_from_logits: logits {tuple(logits.shape)} and ref_logits "
                         f"{tuple(ref_logits.shape)} must have the same shape (..., V)")
    shape = logits.shape[:-1]
    if logits.dim() == 1:
        logits, ref_logits = logits[None, None], ref_logits[None, None]
    elif logits.dim() == 2:
        logits, ref_logits = logits[None], ref_logits[None]
    elif logits.dim() > 3:
        logits, ref_logits = logits.flatten(0, -3), ref_logits.flatten(0, -3)
    differentiable = torch.is_grad_enabled() and (logits.requires_grad or ref_logits.requires_grad)
    out = logits.new_empty(logits.shape[:-1], dtype=torch.float32)  # (B, T)
    for b, rows in _row_chunks(logits):
        z, z_ref = logits[b, rows], ref_logits[b, rows]
        if differentiable:
            from torch.utils.checkpoint import checkpoint

            out[b, rows] = checkpoint(_kl_rows, z, z_ref, use_reentrant=False)
        else:
            out[b, rows] = _kl_rows(z, z_ref)
    return out.reshape(shape)


def _kl_rows(logits: torch.Tensor, ref_logits: torch.Tensor) -> torch.Tensor:
    """KL per row of (n, V) logits, in fp32: the formula kl_penalty(kind='full') always used."""
    logp = F.log_softmax(logits.float(), dim=-1)
    ref_logp = F.log_softmax(ref_logits.float(), dim=-1)
    return (logp.exp() * (logp - ref_logp)).sum(-1)


def response_mask_after_eos(
    responses: torch.Tensor, eos_token_id: int | Sequence[int] | None, pad_token_id: int | None
) -> torch.Tensor:
    """Mask (B, R) of response tokens that count: everything up to and including the first EOS.

    Tokens after the first EOS (what batched generation fills in) are 0. When pad == eos the first
    EOS still counts, as it is the token the policy chose to stop with. Several EOS ids may be given
    (chat models often stop on any of a few).
    """
    mask = torch.ones_like(responses, dtype=torch.long)
    if isinstance(eos_token_id, int):
        eos_token_id = [eos_token_id]
    if eos_token_id:
        is_eos = torch.isin(responses, torch.tensor(list(eos_token_id), device=responses.device)).long()
        # Positions strictly after the first EOS have a cumulative EOS count > 0 before them.
        eos_before = torch.cumsum(is_eos, dim=1) - is_eos
        mask = mask * (eos_before == 0).long()
    elif pad_token_id is not None:
        mask = (responses != pad_token_id).long()
    return mask


def unfinished(responses: Sequence[torch.Tensor], eos_token_id: int | Sequence[int] | None) -> list[bool]:
    """Per response: True when it holds no EOS, so it filled the answer length and was cut there (mid-sentence,
    most likely). One that ends with EOS exactly at the limit finished. All False without EOS ids (nothing tells a
    finished answer from a cut one)."""
    if isinstance(eos_token_id, int):
        eos_token_id = [eos_token_id]
    if not eos_token_id:
        return [False] * len(responses)
    eos = torch.tensor(list(eos_token_id))
    return [not bool(torch.isin(response.detach().cpu().long(), eos).any()) for response in responses]


def unfinished_share(responses: Sequence[torch.Tensor], eos_token_id: int | Sequence[int] | None) -> float:
    """Share of responses cut at the answer length (`unfinished`): people ranked and the policy learns on answers
    that never ended. 0.0 without EOS ids or without responses."""
    cut = unfinished(responses, eos_token_id)
    return sum(cut) / len(cut) if cut else 0.0


def trim_response(
    response: torch.Tensor, eos_token_id: int | Sequence[int] | None, pad_token_id: int | None
) -> torch.Tensor:
    """A 1-D response cut after its first EOS (kept), or at its first pad when there is no EOS id."""
    mask = response_mask_after_eos(response.unsqueeze(0), eos_token_id, pad_token_id)[0]
    return response[: int(mask.sum())]


def pad_sequences(sequences: Sequence[torch.Tensor], pad_value: int, side: str = "right") -> torch.Tensor:
    """Stack 1-D tensors of different lengths into (B, T) with `pad_value` on `side`."""
    if side not in ("left", "right"):
        raise ValueError(f"side={side!r}: must be 'left' or 'right'")
    length = max((len(s) for s in sequences), default=0)
    out = torch.full((len(sequences), length), pad_value, dtype=sequences[0].dtype if sequences else torch.long)
    for i, s in enumerate(sequences):
        if len(s) == 0:
            continue
        if side == "right":
            out[i, : len(s)] = s
        else:
            out[i, length - len(s) :] = s
    return out


def flatten_dict(nested: Mapping, sep: str = "/", prefix: str = "") -> dict:
    """{"ppo": {"loss": {"value": x}}} -> {"ppo/loss/value": x}."""
    flat = {}
    for key, value in nested.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            flat.update(flatten_dict(value, sep, name))
        else:
            flat[name] = value
    return flat


def stack_stats(stats_list: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """A list of per-mini-batch stat dicts -> one dict of stacked tensors (keys of the first dict)."""
    if not stats_list:
        return {}
    return {k: torch.stack([torch.as_tensor(s[k]).detach().float() for s in stats_list]) for k in stats_list[0]}


def stats_to_floats(stats: Mapping) -> dict[str, float]:
    """Tensors/numbers -> plain floats (means of non-scalar tensors) for logging and JSON."""
    out = {}
    for key, value in stats.items():
        if isinstance(value, torch.Tensor):
            value = value.detach().float()
            out[key] = float(value.mean()) if value.numel() else float("nan")
        elif isinstance(value, (int, float)):
            out[key] = float(value)
    return out


class RunningMoments:
    """Running mean/std of scores over all batches seen (Chan et al. parallel variance update),
    used by use_score_scaling / use_score_norm. Plain floats so it round-trips through state_dict."""

    def __init__(self) -> None:
        self.mean, self.var, self.count = 0.0, 1.0, 1e-24

    @property
    def std(self) -> float:
        return self.var**0.5

    def update(self, xs: torch.Tensor, reduce_sum: Callable[[torch.Tensor], torch.Tensor] | None = None
               ) -> tuple[float, float]:
        """Fold a batch in; returns the batch's (mean, unbiased std).

        With several processes, `reduce_sum` sums a tensor over them (e.g. `lambda t: accelerator.reduce(t,
        "sum")`): the batch is then every rank's batch together, and all ranks hold the same moments (TRL's
        get_global_statistics). It is called twice, on every rank: (sum, count), then the squared deviations
        from the global mean (two passes: no cancellation in sum(x^2) - n mean^2).
        """
        reduce_sum = reduce_sum or (lambda t: t)
        xs = xs.detach().double().flatten()
        total, n = reduce_sum(torch.stack([xs.sum(), xs.new_tensor(float(xs.numel()))])).tolist()
        batch_mean = total / n
        batch_var = float(reduce_sum(((xs - batch_mean) ** 2).sum())) / n
        delta = batch_mean - self.mean
        total = self.count + n
        m2 = self.var * self.count + batch_var * n + delta**2 * self.count * n / total
        self.mean += delta * n / total
        self.var = m2 / total
        self.count = total
        return batch_mean, (batch_var * n / max(n - 1, 1)) ** 0.5

    def state_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        self.mean, self.var, self.count = float(state["mean"]), float(state["var"]), float(state["count"])


# ---- TRL 0.11's trl.core helpers, same behaviour (its users' scripts import them from trl.core) ---------------
STATS_PADDING = -1  # TRL's WANDB_PADDING: fills the shorter rows of stack_dicts


def whiten(values: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """(x - mean) / sqrt(var + 1e-8) over all elements, var unbiased (TRL 0.11); shift_mean=False adds the mean
    back. masked_whiten is the version for padded (B, R) tensors."""
    mean, var = torch.mean(values), torch.var(values)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    return whitened if shift_mean else whitened + mean


def stack_dicts(stats_dicts: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """A list of stat dicts -> one dict of (N, L) tensors: each value flattened, shorter rows padded with -1
    (TRL 0.11; the keys of the first dict)."""
    return {
        key: torch.nn.utils.rnn.pad_sequence([torch.flatten(d[key]) for d in stats_dicts], batch_first=True,
                                             padding_value=STATS_PADDING)
        for key in stats_dicts[0]
    }


def stats_to_np(stats_dict: Mapping) -> dict:
    """Tensors -> numpy arrays on the CPU (bf16 as fp32), numpy scalars -> float, anything else unchanged (TRL 0.11)."""
    import numpy as np  # torch's own dependency; imported here so core stays a torch-only import

    out = {}
    for key, value in stats_dict.items():
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu()
            value = (value.float() if value.dtype == torch.bfloat16 else value).numpy()
        out[key] = float(value) if np.isscalar(value) else value
    return out


def convert_to_scalar(stats: Mapping) -> dict:
    """One-element tensors and arrays (shape () or (1,)) -> Python numbers, for TensorBoard; the rest unchanged
    (TRL 0.11)."""
    out = {}
    for key, value in stats.items():
        shape = getattr(value, "shape", None)
        if hasattr(value, "item") and shape is not None and (len(shape) == 0 or tuple(shape) == (1,)):
            value = value.item()
        out[key] = value
    return out


def set_seed(seed: int) -> None:
    """Seed Python's, numpy's and torch's global generators (all devices), as TRL 0.11's set_seed. The trainers
    here take their seed from their config and use their own generators; this is for scripts."""
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds every CUDA device too
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        torch.xpu.manual_seed_all(seed)


def top_k_top_p_filtering(
    logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0, filter_value: float = -float("inf"), min_tokens_to_keep: int = 1
) -> torch.Tensor:
    """Logits (B, V) with every token outside the top k and outside the nucleus set to `filter_value` (TRL 0.11,
    which applied transformers' TopK- then TopPLogitsWarper; Holtzman et al. 2019 for top-p).

    top-k (k > 0): drop logits below the k-th largest (ties with it stay). top-p: sort ascending, drop the
    tokens whose cumulative probability is <= 1 - top_p, always keeping the `min_tokens_to_keep` most likely.
    """
    if top_k > 0:
        k = min(max(top_k, min_tokens_to_keep), logits.size(-1))
        kth = torch.topk(logits, k)[0][..., -1, None]  # (B, 1)
        logits = logits.masked_fill(logits < kth, filter_value)
    if 0 <= top_p <= 1.0:
        sorted_logits, sorted_indices = torch.sort(logits, descending=False)  # (B, V)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove_sorted = cumulative <= (1 - top_p)
        remove_sorted[..., -min_tokens_to_keep:] = False
        remove = remove_sorted.scatter(-1, sorted_indices, remove_sorted)
        logits = logits.masked_fill(remove, filter_value)
    return logits


def respond_to_batch(
    model: torch.nn.Module, queries: torch.Tensor, txt_len: int = 20, top_k: int = 0, top_p: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Sample `txt_len` tokens after each query row (B, T) with no KV cache, one full forward per token, and
    return the new tokens (B, txt_len) (TRL 0.11's helper; `generator` is ours: None uses torch's global RNG
    as TRL does). rlhf.generation / PPOTrainer.generate are the fast way."""
    input_ids = queries
    for _ in range(txt_len):
        next_logits = model(input_ids)[0][:, -1, :]  # (B, V)
        next_logits = top_k_top_p_filtering(next_logits, top_k=top_k, top_p=top_p)
        probs = F.softmax(next_logits, dim=-1)
        next_token = torch.multinomial(probs, num_samples=1, generator=generator)  # (B, 1)
        input_ids = torch.cat([input_ids, next_token], dim=-1)
    return input_ids[:, -txt_len:]


# ---- TRL 0.11 import paths: `from trl.core import LengthSampler` becomes `from rlhf.core import LengthSampler`.
from rlhf.samplers import LengthSampler  # noqa: E402  (after the helpers: samplers never imports core)
