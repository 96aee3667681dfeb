"""selective_log_softmax: the taken tokens' log-probs without a fp32 copy of the whole vocabulary's log-softmax.
Same values and gradients as log_softmax(logits.float()).gather (today's way), and less kept for backward."""
import math

import pytest
import torch

import rlhf.core
from rlhf.core import entropy_from_logits, selective_log_softmax


def old_way(logits, labels, temperature=1.0):
    return torch.log_softmax(logits.float() / temperature, dim=-1).gather(-1, labels[..., None]).squeeze(-1)


@pytest.fixture(params=[1 << 24, 7 * 11])  # one chunk; chunks of 7 rows of 11 tokens (the last one short)
def chunk_elements(request, monkeypatch):
    monkeypatch.setattr(rlhf.core, "LOGSOFTMAX_CHUNK_ELEMENTS", request.param)
    return request.param


def test_two_tokens_by_hand():
    logits = torch.tensor([[[0.0, math.log(3.0)], [0.0, 0.0]]])  # p = [1/4, 3/4] and [1/2, 1/2]
    # log(3/4) = -0.287682; log(1/2) = -0.693147; at temperature 2: p ~ [1, sqrt 3] -> log(sqrt3 / (1 + sqrt3)) = -0.454
    assert selective_log_softmax(logits, torch.tensor([[1, 0]]))[0].tolist() == pytest.approx([-0.287682, -0.693147], abs=1e-6)
    assert selective_log_softmax(logits, torch.tensor([[1, 0]]), 2.0)[0, 0].item() == pytest.approx(
        math.log(math.sqrt(3) / (1 + math.sqrt(3))), abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_equals_a_float64_reference_and_the_old_gradients(dtype, temperature, chunk_elements):
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 9, 11, generator=g) * 4).to(dtype).requires_grad_(True)  # (B, T, V)
    labels = torch.randint(0, 11, (3, 9), generator=g)
    reference = torch.log_softmax(logits.detach().double() / temperature, -1).gather(-1, labels[..., None]).squeeze(-1)
    new = selective_log_softmax(logits, labels, temperature)
    assert new.dtype == torch.float32
    torch.testing.assert_close(new.double(), reference, atol=1e-5, rtol=0)
    weights = torch.randn(3, 9, generator=g)
    (grad_new,) = torch.autograd.grad((new * weights).sum(), logits)
    (grad_old,) = torch.autograd.grad((old_way(logits, labels, temperature) * weights).sum(), logits)
    assert grad_new.dtype == dtype
    torch.testing.assert_close(grad_new.float(), grad_old.float(), atol=1e-5 if dtype == torch.float32 else 1e-2, rtol=0)


def test_entropy_in_chunks_equals_the_whole_pass(chunk_elements):
    logits = torch.randn(4, 5, 11, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    p = torch.softmax(logits.double() / 0.5, -1)
    expected = -(p * torch.log(p)).sum(-1)
    torch.testing.assert_close(entropy_from_logits(logits, 0.5).double(), expected, atol=1e-5, rtol=0)


def saved_bytes(function) -> int:
    """Bytes autograd keeps for backward while `function` runs (the memory a training step holds)."""
    total = 0

    def pack(tensor):
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        function()
    return total


def test_keeps_no_fp32_copy_of_the_vocabulary_for_backward():
    logits = torch.randn(64, 4096).to(torch.bfloat16).requires_grad_(True)  # bf16, as under autocast
    labels = torch.randint(0, 4096, (64,))
    old = saved_bytes(lambda: old_way(logits, labels))  # the fp32 log-softmax output: 64 x 4096 x 4 bytes
    new = saved_bytes(lambda: selective_log_softmax(logits, labels))  # the bf16 logits + (64,) logsumexp
    assert old >= 64 * 4096 * 4
    assert new <= 64 * 4096 * 2 + 64 * 16 and new <= 0.5 * old


def test_any_leading_shape_and_a_non_contiguous_slice_without_a_copy(chunk_elements):
    g = torch.Generator().manual_seed(2)
    full = torch.randn(2, 3, 6, 11, generator=g)
    labels = torch.randint(0, 11, (2, 3, 5), generator=g)
    sliced = full[:, :, :-1]  # as trainers pass logits[:, :-1]: not contiguous
    torch.testing.assert_close(selective_log_softmax(sliced, labels), old_way(sliced, labels), atol=1e-5, rtol=0)
    torch.testing.assert_close(selective_log_softmax(full[0, 0], labels[0, 0, :6].new_tensor([1, 2, 3, 4, 5, 6])),
                               old_way(full[0, 0], labels[0, 0, :6].new_tensor([1, 2, 3, 4, 5, 6])), atol=1e-5, rtol=0)
    logits = full[0].clone().requires_grad_(True)
    kept = saved_bytes(lambda: selective_log_softmax(logits[:, :-1], labels[0]))
    assert kept <= logits.numel() * 4 + 3 * 5 * 16  # the logits' own storage (a view), not a flattened copy
