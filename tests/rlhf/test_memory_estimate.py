"""The memory estimate against a measured peak: one PPO step of a small Llama on CPU, in a fresh process (its own
peak RSS), compared with estimate_training_memory for the same shapes. Tolerance: within 30% (the estimate leaves
out allocator slack and the runtime's own buffers)."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlhf.memory_estimate import GIB, ModelShape, TrainShape, estimate_training_memory, model_shape

STEP = textwrap.dedent("""
    import json, sys, types, torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from rlhf.configs import PPOConfig
    from rlhf.ppo import PPOTrainer
    from rlhf.value_head import AutoModelForCausalLMWithValueHead
    bf16, checkpointing, rows = sys.argv[1] == "bf16", sys.argv[2] == "ck", int(sys.argv[3])
    before = int(open("/proc/self/statm").read().split()[1]) * 4096  # RSS with torch loaded, no model yet
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=49152, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, eos_token_id=0, pad_token_id=0)
    model = AutoModelForCausalLMWithValueHead(LlamaForCausalLM(config))
    trainer = PPOTrainer(PPOConfig(batch_size=rows, mini_batch_size=rows, ppo_epochs=1, bf16=bf16, rollout_forward_batch_size=rows,
                                   gradient_checkpointing=checkpointing, keep_freed_memory=False),
                         model, None, types.SimpleNamespace(pad_token_id=0, eos_token_id=0))
    queries = [torch.randint(1, 49152, (32,)) for _ in range(rows)]
    responses = [torch.randint(1, 49152, (224,)) for _ in range(rows)]
    trainer.step(queries, responses, [torch.tensor(float(i % 2)) for i in range(rows)])
    # VmHWM: this process's own peak (ru_maxrss carries over the parent's across fork and exec: a test suite's
    # large parent made every child's peak look 1.6 GiB)
    peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")) * 1024
    print(json.dumps({"parameters": sum(p.numel() for p in model.parameters()), "rise": peak - before}))
""")


@pytest.mark.parametrize("precision, checkpointing, rows", [("bf16", "no", 8), ("fp32", "no", 4), ("bf16", "ck", 8)])
def test_estimate_is_within_30_percent_of_a_measured_ppo_step(precision, checkpointing, rows):
    # A fresh process with none of the ACCELERATE_* variables earlier tests in this process may have left (an
    # Accelerator sets ACCELERATE_MIXED_PRECISION, which would change the step's precision in the child).
    env = {key: value for key, value in os.environ.items() if not key.startswith("ACCELERATE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", STEP, precision, checkpointing, str(rows)], capture_output=True,
                          text=True, env=env, timeout=600, check=True)
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    shape = ModelShape(parameters=measured["parameters"] - 257, vocab_size=49152, hidden_size=256,
                       intermediate_size=688, layers=4, heads=4, kv_heads=2)  # (257: the value head's)
    run = TrainShape(rows=rows, tokens=256, logit_tokens=224, compute_bytes=2 if precision == "bf16" else 4,
                     reference=True, gradient_checkpointing=checkpointing == "ck", no_grad_rows=rows)
    estimate = estimate_training_memory(shape, run).total
    assert 0.7 <= measured["rise"] / estimate <= 1.3, (measured["rise"] / GIB, estimate / GIB)


def test_parts_by_hand():
    # 1000 parameters, h 8, i 16, 2 layers, vocab 10; 2 rows of 4 tokens, 3 through the LM head, bf16, full
    shape = ModelShape(parameters=1000, vocab_size=10, hidden_size=8, intermediate_size=16, layers=2, heads=2, kv_heads=1)
    e = estimate_training_memory(shape, TrainShape(rows=2, tokens=4, logit_tokens=3, reference=True))
    assert (e.weights, e.gradients, e.optimizer, e.reference) == (4000, 4000, 8000, 4000)  # fp32 x3 + Adam's 8 bytes
    # blocks: 8 tokens x (30*8 + 8*16 = 368 bytes) x 2 layers = 5888; logits: 3 copies x 2 x 3 x 10 x 2 bytes = 360
    assert e.activations == 5888 + 360
    # LoRA r=2: base in bf16 (2 bytes), adapters r x (in + out) per linear: (16 + 2*(8+4) + 16 + 2*(8+16) + 24) x 2 x 2
    lora = estimate_training_memory(shape, TrainShape(rows=2, tokens=4, logit_tokens=3, lora_r=2, load_bytes=2, reference=True))
    adapters = 2 * (16 + 24 + 16 + 48 + 24) * 2
    assert lora.weights == 2000 + 4 * adapters and lora.gradients == 4 * adapters and lora.reference == 0
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
