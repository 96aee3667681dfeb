"""TRL 0.11's trl.core helpers in rlhf.core: hand-computed values of TRL 0.11.4's definitions."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

from rlhf.core import convert_to_scalar, respond_to_batch, set_seed, stack_dicts, stats_to_np, top_k_top_p_filtering, whiten

INF = float("inf")


def test_whiten_hand_values():
    # mean 2.5; unbiased var (2.25 + 0.25 + 0.25 + 2.25) / 3 = 5/3; 1 / sqrt(5/3) = 0.774597
    # (-1.5, -0.5, 0.5, 1.5) * 0.774597 = (-1.161895, -0.387298, 0.387298, 1.161895)
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert whiten(x).tolist() == pytest.approx([-1.161895, -0.387298, 0.387298, 1.161895], abs=1e-6)
    # shift_mean=False adds the mean 2.5 back
    assert whiten(x, shift_mean=False).tolist() == pytest.approx([1.338105, 2.112702, 2.887298, 3.661895], abs=1e-6)


def test_stack_dicts_pads_with_minus_one():
    stacked = stack_dicts([{"a": torch.tensor([1.0, 2.0]), "b": torch.tensor(5.0)}, {"a": torch.tensor([3.0]), "b": torch.tensor(6.0)}])
    assert stacked["a"].tolist() == [[1.0, 2.0], [3.0, -1.0]]
    assert stacked["b"].tolist() == [[5.0], [6.0]]


def test_stats_to_np_and_convert_to_scalar():
    out = stats_to_np({"a": torch.tensor(2.0, dtype=torch.bfloat16), "b": 3, "c": np.float32(1.5), "d": torch.tensor([1, 2])})
    assert isinstance(out["a"], np.ndarray) and out["a"].dtype == np.float32 and out["a"] == 2.0  # bf16 -> fp32 array
    assert out["b"] == 3.0 and isinstance(out["b"], float)  # numpy scalars and numbers -> float
    assert out["c"] == 1.5 and isinstance(out["c"], float)
    assert out["d"].tolist() == [1, 2]
    scalars = convert_to_scalar({"a": torch.tensor([5.0]), "b": np.array(2.0), "c": torch.tensor([1.0, 2.0]), "d": "x"})
    assert scalars["a"] == 5.0 and isinstance(scalars["a"], float)
    assert scalars["b"] == 2.0 and isinstance(scalars["b"], float)
    assert torch.equal(scalars["c"], torch.tensor([1.0, 2.0])) and scalars["d"] == "x"  # longer ones unchanged


def test_set_seed_repeats_python_numpy_and_torch():
    import rlhf

    assert rlhf.set_seed is set_seed  # TRL 0.11's `from trl import set_seed`
    set_seed(7)
    first = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    set_seed(7)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == first


def test_top_k_top_p_filtering_hand_values():
    logits = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    # top-k 2: below the 2nd largest (3) goes
    assert top_k_top_p_filtering(logits, top_k=2).tolist() == [[-INF, -INF, 3.0, 4.0]]
    # softmax = (0.032059, 0.087144, 0.236883, 0.643914); ascending cumulative (0.032059, 0.119203, 0.356086, 1)
    # top_p 0.7 drops cumulative <= 0.3: tokens 1, 2
    assert top_k_top_p_filtering(logits, top_p=0.7).tolist() == [[-INF, -INF, 3.0, 4.0]]
    # top_p 0.5 drops cumulative <= 0.5: tokens 1-3; min_tokens_to_keep 2 keeps 3 back
    assert top_k_top_p_filtering(logits, top_p=0.5).tolist() == [[-INF, -INF, -INF, 4.0]]
    assert top_k_top_p_filtering(logits, top_p=0.5, min_tokens_to_keep=2).tolist() == [[-INF, -INF, 3.0, 4.0]]
    # top_p 0.9 drops cumulative <= 0.1: token 1 only; defaults change nothing
    assert top_k_top_p_filtering(logits, top_p=0.9).tolist() == [[-INF, 2.0, 3.0, 4.0]]
    assert torch.equal(top_k_top_p_filtering(logits), logits)


def test_top_k_top_p_filtering_equals_transformers_warpers():
    # TRL 0.11 applied transformers' warpers, top-k first, then top-p.
    logits = torch.randn(5, 50, generator=torch.Generator().manual_seed(0))
    for top_k, top_p in [(5, 1.0), (0, 0.8), (10, 0.6), (3, 0.2)]:
        expected = logits
        if top_k:
            expected = TopKLogitsWarper(top_k)(None, expected)
        expected = TopPLogitsWarper(top_p)(None, expected)
        assert torch.equal(top_k_top_p_filtering(logits, top_k=top_k, top_p=top_p), expected)


def test_respond_to_batch_samples_txt_len_tokens(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    queries = torch.tensor([[1, 2, 3], [4, 5, 6]])
    with torch.no_grad():
        out = respond_to_batch(model, queries, txt_len=4, generator=torch.Generator().manual_seed(0))
        again = respond_to_batch(model, queries, txt_len=4, generator=torch.Generator().manual_seed(0))
        greedy = respond_to_batch(model, queries, txt_len=4, top_k=1)  # top-1 sampling is greedy decoding
        reference = model.generate(queries, attention_mask=torch.ones_like(queries), max_new_tokens=4, do_sample=False,
                                   min_new_tokens=4)[:, 3:]
    assert out.shape == (2, 4) and torch.equal(out, again)
    assert torch.equal(greedy, reference)
