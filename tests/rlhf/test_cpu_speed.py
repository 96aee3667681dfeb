"""The CPU speed levers: allocator settings (rlhf/cpu_memory.py) and the training attention kernel
(rlhf/attention.py)."""
import platform
import resource

import pytest
import torch

from rlhf.attention import lean_eager_attention, training_attention, use_attention
from rlhf.cpu_memory import keep_freed_memory

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")


def _faults_touching_fresh_block(megabytes: int) -> int:
    """Minor page faults while allocating and writing a block the size of one just freed."""
    block = torch.ones(megabytes * 2**18)  # fp32: 4 bytes each
    del block
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = torch.ones(megabytes * 2**18)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@glibc_only
def test_freed_memory_is_reused_without_page_faults():
    assert keep_freed_memory() is True
    assert keep_freed_memory() is True  # idempotent
    # 64 MiB is 16,384 pages: glibc's default maps it afresh and faults on every page, every time. With the
    # setting the heap settles within a few rounds (measured: 1-4) and then serves the block again as it is.
    faults = [_faults_touching_fresh_block(64) for _ in range(8)]
    assert max(faults[-3:]) < 500, faults


def test_training_attention_choice():
    assert training_attention("auto", "cpu") == "lean_eager"
    assert training_attention("auto", "cuda") is None  # SDPA is the better kernel on GPUs: keep the model's
    assert training_attention("sdpa", "cpu") == "sdpa"
    assert training_attention("model", "cpu") is None
    with pytest.raises(ValueError, match="attn_implementation='flash'"):
        training_attention("flash", "cpu")


def test_eager_attention_gives_the_same_logprobs_as_sdpa(tiny_model_dir):
    from rlhf.loading import load_causal_lm

    model = load_causal_lm(tiny_model_dir, attn_implementation="sdpa").eval()
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        sdpa = model(input_ids=ids, attention_mask=mask).logits.log_softmax(-1)
        use_attention(model, "auto", "cpu")
        assert model.config._attn_implementation == "lean_eager"
        eager = model(input_ids=ids, attention_mask=mask).logits.log_softmax(-1)
    real = mask.bool()  # padded positions' outputs are never used
    torch.testing.assert_close(eager[real], sdpa[real], atol=1e-5, rtol=1e-5)


def _tiny_models():
    from transformers import BertConfig, BertForSequenceClassification, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    bert = BertForSequenceClassification(BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, num_labels=1,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    llama = LlamaForCausalLM(LlamaConfig(  # grouped-query attention: 4 query heads share 2 key/value heads
        vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64))
    return {"bert": bert, "llama": llama}


@pytest.mark.parametrize("name", ["bert", "llama"])
def test_lean_eager_gives_eagers_outputs_and_gradients_in_fp32(name):
    model = _tiny_models()[name]
    ids = torch.tensor([[3, 4, 5, 6, 7, 8], [9, 10, 11, 12, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    results = {}
    for implementation in ("eager", "lean_eager"):
        model.set_attn_implementation(implementation)
        model.zero_grad()
        logits = model(input_ids=ids, attention_mask=mask).logits
        (logits * torch.linspace(-1, 1, logits.numel()).view_as(logits)).sum().backward()
        results[implementation] = (logits.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None])
    (eager, eager_grads), (lean, lean_grads) = results["eager"], results["lean_eager"]
    real = mask.bool() if name == "llama" else slice(None)  # a causal LM's padded positions are never read
    torch.testing.assert_close(lean[real], eager[real], atol=1e-6, rtol=1e-5)
    assert len(lean_grads) == len(eager_grads) > 0
    for a, b in zip(lean_grads, eager_grads):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def test_lean_eager_keeps_bf16_attention_weights_under_autocast():
    # Transformers' eager adds the fp32 mask to bf16 scores: the weights it keeps for the backward pass are
    # fp32 (twice the memory) and are cast again for the matmul. Lean eager keeps them in bf16, and the
    # output stays within bf16 rounding of eager's.
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 5, 8) for _ in range(3))
    mask = torch.zeros(2, 1, 5, 5)
    mask[1, :, :, 3:] = torch.finfo(torch.float32).min  # the second row's last two keys are padding
    module = torch.nn.Module().eval()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q16, k16, v16 = (torch.nn.functional.linear(t, torch.eye(8)) for t in (q, k, v))  # bf16, as a layer gives
        output, weights = lean_eager_attention(module, q16, k16, v16, mask, scaling=8 ** -0.5)
    assert weights.dtype == torch.bfloat16 and output.dtype == torch.bfloat16
    assert output.shape == (2, 5, 4, 8)  # (batch, queries, heads, head size), as transformers' kernels return
    assert weights[1, :, :, 3:].max().item() == 0.0  # padding gets no weight
    expected = torch.softmax(q @ k.transpose(2, 3) * 8 ** -0.5 + mask, dim=-1) @ v
    torch.testing.assert_close(output.float(), expected.transpose(1, 2), atol=0.05, rtol=0.02)
    # A boolean mask (True: attend), as SDPA's callers pass, masks the same keys.
    boolean, _ = lean_eager_attention(module, q, k, v, mask == 0, scaling=8 ** -0.5)
    torch.testing.assert_close(boolean, expected.transpose(1, 2), atol=1e-6, rtol=1e-5)
