"""kl_penalty(kind='full'): the exact KL over the vocabulary, a chunk of positions at a time (full_kl_from_logits),
with the values and gradients of the plain formula over the whole (B, R, V) tensors and no (B, R, V) tensor made."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import rlhf.core
from rlhf.configs import PPOConfig
from rlhf.core import full_kl_from_logits
from rlhf.losses import kl_penalty
from rlhf.ppo import PPOTrainer
from tests.rlhf.test_ppo import SMALL_TOKENIZER, rollouts, small_vocab_model


def plain_full_kl(logits, ref_logits):
    """What kl_penalty(kind='full') computed before: both log-softmaxes over the whole (B, R, V)."""
    logp = F.log_softmax(logits.float(), dim=-1)
    ref_logp = F.log_softmax(ref_logits.float(), dim=-1)
    return (logp.exp() * (logp - ref_logp)).sum(-1)


def full(logits, ref_logits):
    zeros = torch.zeros(logits.shape[:-1])
    return kl_penalty(zeros, zeros, "full", logits, ref_logits)


@pytest.fixture(params=[1 << 24, 7 * 11, 3])  # one chunk; 7 rows of 11 tokens (the last chunk short); 1 row of 3
def chunk_elements(request, monkeypatch):
    monkeypatch.setattr(rlhf.core, "LOGSOFTMAX_CHUNK_ELEMENTS", request.param)
    return request.param


def test_three_token_vocabularies_by_hand(chunk_elements):
    log = lambda *xs: [math.log(x) for x in xs]  # noqa: E731
    # Row 1: p = [1/4, 1/2, 1/4], q uniform: 1/4 ln(3/4) + 1/2 ln(3/2) + 1/4 ln(3/4) = 1/2 ln(9/8) = 0.0588915
    # Row 2: p = [1/2, 1/4, 1/4], q = [1/4, 1/4, 1/2]: 1/2 ln 2 + 0 + 1/4 ln(1/2) = 1/4 ln 2 = 0.1732868
    # Row 3: p = q: 0. Logits + 5 change nothing (softmax is shift-invariant).
    logits = torch.tensor([[log(1, 2, 1), log(2, 1, 1), log(1, 1, 1)]]) + 5.0  # (1, 3, 3)
    ref_logits = torch.tensor([[log(1, 1, 1), log(1, 1, 2), log(1, 1, 1)]])
    assert full(logits, ref_logits)[0].tolist() == pytest.approx([0.0588915, 0.1732868, 0.0], abs=1e-6)
    # Both rows in two sequences of one position each: the same per-position values.
    assert full(logits[0, :2, None], ref_logits[0, :2, None])[:, 0].tolist() == pytest.approx(
        [0.0588915, 0.1732868], abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_random_logits_equal_the_plain_formula_and_its_gradients(dtype, chunk_elements):
    g = torch.Generator().manual_seed(0)
    base = (torch.randn(3, 10, 11, generator=g) * 3).to(dtype)
    ref_base = (torch.randn(3, 10, 11, generator=g) * 3).to(dtype)
    logits = base.clone().requires_grad_(True)
    ref_logits = ref_base.clone().requires_grad_(True)
    # The trainer passes logits[:, :-1]: a non-contiguous view.
    new = full(logits[:, :-1], ref_logits[:, :-1])
    old = plain_full_kl(logits[:, :-1], ref_logits[:, :-1])
    assert new.shape == (3, 9) and new.dtype == torch.float32
    torch.testing.assert_close(new, old, atol=1e-6, rtol=0)
    # Not differentiated in rlhf (PPO's rollout pass runs under no_grad), but if it is, the gradients are the same.
    weights = torch.randn(3, 9, generator=g)
    grads_new = torch.autograd.grad((new * weights).sum(), (logits, ref_logits))
    grads_old = torch.autograd.grad((old * weights).sum(), (logits, ref_logits))
    for a, b in zip(grads_new, grads_old):
        assert a.dtype == dtype
        torch.testing.assert_close(a.float(), b.float(), atol=1e-6 if dtype == torch.float32 else 1e-2, rtol=0)


def test_any_leading_shape_and_a_shape_mismatch_named(chunk_elements):
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(2, 3, 4, 11, generator=g), torch.randn(2, 3, 4, 11, generator=g)
    torch.testing.assert_close(full_kl_from_logits(a, b), plain_full_kl(a, b), atol=1e-6, rtol=0)
    torch.testing.assert_close(full_kl_from_logits(a[0, 0], b[0, 0]), plain_full_kl(a[0, 0], b[0, 0]), atol=1e-6, rtol=0)
    torch.testing.assert_close(full_kl_from_logits(a[0, 0, 0], b[0, 0, 0]), plain_full_kl(a[0, 0, 0], b[0, 0, 0]),
                               atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match=r"logits \(2, 3, 4, 11\) and ref_logits \(2, 3, 4, 10\)"):
        full_kl_from_logits(a, b[..., :10])


class LargestTensor(TorchDispatchMode):
    """The largest tensor (in bytes) any op allocates while active (views allocate nothing): what a chunked pass
    keeps below B x R x V."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view:
            return out
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel() * t.element_size())
        return out


def test_no_tensor_of_the_whole_vocabulary_per_position(monkeypatch):
    monkeypatch.setattr(rlhf.core, "LOGSOFTMAX_CHUNK_ELEMENTS", 8 * 1000)  # 8 rows of a 1,000-token vocabulary
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(4, 33, 1000, generator=g).to(torch.bfloat16)  # bf16, as under autocast
    ref_logits = torch.randn(4, 33, 1000, generator=g).to(torch.bfloat16)
    with torch.no_grad():  # as PPO calls it
        with LargestTensor() as old:
            plain_full_kl(logits[:, :-1], ref_logits[:, :-1])
        with LargestTensor() as new:
            full(logits[:, :-1], ref_logits[:, :-1])
    assert old.largest == 4 * 32 * 1000 * 4  # fp32 (B, R, V) log-softmaxes and products
    assert new.largest == 8 * 1000 * 4  # fp32, one chunk of 8 positions


def test_ppo_with_the_full_kl_is_the_same_in_chunks(monkeypatch):
    results = []
    for elements in (1 << 24, 16):  # all positions at once; one position (of a 16-token vocabulary) per chunk
        monkeypatch.setattr(rlhf.core, "LOGSOFTMAX_CHUNK_ELEMENTS", elements)
        config = PPOConfig(batch_size=4, mini_batch_size=2, learning_rate=1e-2, kl_penalty="full", bf16=False)
        trainer = PPOTrainer(config, small_vocab_model(), small_vocab_model(seed=1), SMALL_TOKENIZER)
        results.append(trainer.step(*rollouts(4)))
    assert results[0]["objective/kl"] > 0.01  # the reference differs from the policy: a real KL
    for key in ["objective/kl", "ppo/mean_non_score_reward", "ppo/loss/total"]:
        assert results[1][key] == pytest.approx(results[0][key], rel=1e-6, abs=1e-7)
