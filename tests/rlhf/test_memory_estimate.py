"""The memory estimate against measured peaks: PPO steps in a fresh process (its own peak RSS), by
bench/memory_at_scale.py, compared with estimate_training_memory for the same shapes. Tolerance: within 15%."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlhf.memory_estimate import (GIB, NF4_BYTES, ModelShape, TrainShape, estimate_training_memory, model_shape)

ROOT = Path(__file__).resolve().parents[2]


def measured_ratio(*argv: str) -> dict:
    # none of the ACCELERATE_* variables an earlier test's Accelerator left (they would change the child's precision)
    env = {key: value for key, value in os.environ.items() if not key.startswith("ACCELERATE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "memory_at_scale.py"), "--child", *argv],
                          capture_output=True, text=True, env=env, timeout=3000)  # a loaded machine: slow
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("argv", [("--bf16", "--rows", "8"), ("--rows", "4"), ("--bf16", "--rows", "8", "--checkpointing")])
def test_estimate_is_within_15_percent_of_a_measured_ppo_step(argv):
    """A small Llama (15M parameters, SmolLM2's vocabulary) full fine-tuned: weights, gradients, Adam, the reference
    (bf16 in a bf16 run), autocast's copies and 256-token rows' activations and logits."""
    result = measured_ratio("--model", "tiny", "--query", "32", "--answer", "224", "--steps", "1", *argv)
    assert 0.85 <= result["ratio"] <= 1.15, (result["measured"] / GIB, result["estimate"] / GIB, result["parts"])


def test_estimate_is_within_15_percent_for_the_default_135m_model():
    """The shipped SmolLM2-135M as the app trains it by default on this CPU (full fine-tuning, fp32 weights; bf16
    is off on a CPU without native bf16), 4 answers of 64 tokens in two mini-batches, so the second runs beside
    Adam's states as every later one does: weights, their gradients, Adam and the fp32 reference dominate."""
    result = measured_ratio("--model", "135m", "--rows", "4", "--mini-batch", "2", "--query", "32", "--answer", "64",
                            "--steps", "1")
    assert 0.85 <= result["ratio"] <= 1.15, (result["measured"] / GIB, result["estimate"] / GIB, result["parts"])


def test_parts_by_hand():
    # 1000 parameters, h 8, i 16, 2 layers, vocab 10; 2 rows of 4 tokens, 3 through the LM head, bf16, full
    shape = ModelShape(parameters=1000, vocab_size=10, hidden_size=8, intermediate_size=16, layers=2, heads=2, kv_heads=1)
    e = estimate_training_memory(shape, TrainShape(rows=2, tokens=4, logit_tokens=3, reference=True))
    assert (e.weights, e.gradients, e.optimizer, e.reference) == (4000, 4000, 8000, 4000)  # fp32 x3 + Adam's 8 bytes
    assert e.autocast_copies == 2000  # bf16 autocast keeps a 2-byte copy of each of the 1000 trained fp32 weights
    # the reference's matmul weights in bf16 (PPO/GRPO's copy in a bf16 run): 2 bytes a weight, but the tied
    # embeddings (10 x 8 = 80) and the 5 norms (5 x 8 = 40) keep 4: 880 x 2 + 120 x 4 = 2240
    assert estimate_training_memory(shape, TrainShape(rows=2, tokens=4, logit_tokens=3, reference=True,
                                                      reference_bytes=2)).reference == 2240
    # fp32 compute: no autocast copies
    assert estimate_training_memory(shape, TrainShape(rows=2, tokens=4, logit_tokens=3, compute_bytes=4)).autocast_copies == 0
    # blocks: 8 tokens x (30*8 + 8*16 = 368 bytes) x 2 layers = 5888; logits: 3 copies x 2 x 3 x 10 x 2 bytes = 360
    assert e.activations == 5888 + 360
    # LoRA r=2: base in bf16 (2 bytes), adapters r x (in + out) per linear: (16 + 2*(8+4) + 16 + 2*(8+16) + 24) x 2 x 2
    lora = estimate_training_memory(shape, TrainShape(rows=2, tokens=4, logit_tokens=3, lora_r=2, load_bytes=2, reference=True))
    adapters = 2 * (16 + 24 + 16 + 48 + 24) * 2
    assert lora.weights == 2000 + 4 * adapters and lora.gradients == 4 * adapters and lora.reference == 0
    assert lora.autocast_copies == 2 * adapters  # only the fp32 adapters are cast; the base is bf16 already
    # checkpointing: each layer keeps 4 h bytes per token, plus one layer's activations: 8 x (4*8*2 + 368)
    ckpt = estimate_training_memory(shape, TrainShape(rows=2, tokens=4, logit_tokens=3, gradient_checkpointing=True))
    assert ckpt.activations == 8 * (64 + 368) + 360


def test_model_shape_from_config_alone(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    shape = model_shape(str(tiny_model_dir))
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert shape.parameters == sum(p.numel() for p in model.parameters())
    assert (shape.hidden_size, shape.intermediate_size, shape.layers, shape.heads, shape.kv_heads) == (32, 64, 2, 4, 2)
    assert shape.vocab_size == model.config.vocab_size


def test_qlora_counts_its_fp32_embeddings_head_and_norms():
    """Llama-3-8B: 8.03B parameters, 128,256 x 4096 untied embeddings and head, 32 layers. NF4 for the linears,
    fp32 for the 2 x 525.3M embedding/head weights and the 65 norms (peft's prepare_model_for_kbit_training)."""
    shape = ModelShape(parameters=8_030_261_248, vocab_size=128_256, hidden_size=4096, intermediate_size=14_336,
                       layers=32, heads=32, kv_heads=8, tied_embeddings=False)
    kept = 2 * 128_256 * 4096 + 65 * 4096  # 1,050,939,392 + 266,240
    assert shape.unquantized_parameters == kept
    run = TrainShape(rows=1, tokens=8, logit_tokens=4, lora_r=16, load_bytes=2, quantized_4bit=True)
    e = estimate_training_memory(shape, run)
    adapters = shape.lora_parameters(16)
    # 6.98B NF4 weights x 0.516 bytes = 3.60 GB, + 1.05B x 4 bytes = 4.20 GB: 7.8 GB (7.3 GiB) where 8B x 0.5 said 4
    assert e.weights == pytest.approx((8_030_261_248 - kept) * NF4_BYTES + kept * 4 + adapters * 4)
    assert 7.0 < (e.weights - adapters * 4) / GIB < 7.5
    # autocast: the adapters and the fp32 LM head (128,256 x 4096) get bf16 copies
    assert e.autocast_copies == (adapters + 128_256 * 4096) * 2
