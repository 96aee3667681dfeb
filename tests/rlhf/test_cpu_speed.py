"""The CPU speed levers: allocator settings (rlhf/cpu_memory.py) and the training attention kernel (rlhf/attention.py)."""
import platform
import resource

import pytest
import torch

from rlhf.attention import training_attention, use_attention
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
    assert training_attention("auto", "cpu") == "eager"
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
        assert model.config._attn_implementation == "eager"
        eager = model(input_ids=ids, attention_mask=mask).logits.log_softmax(-1)
    real = mask.bool()  # padded positions' outputs are never used
    torch.testing.assert_close(eager[real], sdpa[real], atol=1e-5, rtol=1e-5)
