"""Measured peak memory of PPO steps against rlhf/memory_estimate.py's estimate for the same shapes, printed as
measured / estimate.

Each measurement runs in its own process (its own peak: /proc/self/status VmHWM; ru_maxrss would carry a large
parent's peak over). The figure is the rise of that peak over the process's RSS with torch, transformers and the
library imported and no model built yet, so it holds the weights, the trainer's state and the steps' peak. Memory
only: valid on a machine other work is running on (no timing here).

Models, each built from a config (no download; the 135M default model is read from its cached folder):
    tiny      a 4-layer Llama, 256 wide, SmolLM2's 49,152-token vocabulary, fp32 (tests/rlhf/test_memory_estimate.py)
    135m      the default policy (rlhf.loading.default_model_path(), SmolLM2-135M), loaded as the app loads it
    qwen1.5b  a randomly initialised model of Qwen2.5-1.5B's shape (28 layers, 1536 wide, 151,936 tokens), its
              weights in bf16 (as LoRA's frozen base is loaded), with --lora

    python bench/memory_at_scale.py --model qwen1.5b --lora --bf16 --rows 4 --answer 16 --steps 2 --generate
    python bench/memory_at_scale.py --model 135m --bf16 --rows 4 --answer 64
    python bench/memory_at_scale.py --model tiny --bf16 --rows 8 --json out.json

Measured on a shared 2-core AMD EPYC (AVX2, no native bf16; memory only):
    qwen1.5b --lora --bf16 --rows 2 --query 16 --answer 8 --steps 1 --generate: 3.32 GiB measured, 3.35 GiB estimated
        (weights 2.94, gradients 0.07, Adam 0.14, autocast copies 0.03, activations and logits 0.16): x0.99
    135m --rows 4 --mini-batch 2 --query 32 --answer 64 --steps 1 (fp32, full fine-tuning): 3.01 / 2.79 GiB, x1.08
    tiny --query 32 --answer 224 --steps 1 --bf16 --rows 8: 0.88 / 0.88 GiB, x1.00; --rows 4 (fp32): 0.80 / 0.85, x0.94;
        --bf16 --rows 8 --checkpointing: 0.83 / 0.81 GiB, x1.01
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("tiny", "135m", "qwen1.5b")
LORA_R = 16


def _rss() -> int:
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak() -> int:
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:")) * 1024


def _build(name: str, bf16: bool, lora: bool):
    """(the value-head model, its transformers config, the base model's parameter count)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from rlhf.value_head import AutoModelForCausalLMWithValueHead

    # LoRA's frozen base in the compute dtype, full fine-tuning in fp32 (rlhf/precision.py model_load_kwargs)
    dtype = torch.bfloat16 if lora and bf16 else torch.float32
    torch.manual_seed(0)
    if name == "tiny":
        config = LlamaConfig(vocab_size=49152, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                             tie_word_embeddings=True, eos_token_id=0, pad_token_id=0)
        backbone = LlamaForCausalLM._from_config(config, dtype=dtype)
    elif name == "qwen1.5b":
        config = Qwen2Config(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                             num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768,
                             rope_theta=1e6, tie_word_embeddings=True, eos_token_id=0, pad_token_id=0)
        backbone = Qwen2ForCausalLM._from_config(config, dtype=dtype)  # made in bf16: no fp32 model first
    else:
        from rlhf.loading import default_model_path, load_causal_lm

        backbone = load_causal_lm(default_model_path(), dtype=dtype)
        config = backbone.config
    parameters = sum(p.numel() for p in backbone.parameters())
    peft_config = None
    if lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=LORA_R, lora_alpha=2 * LORA_R, lora_dropout=0.0, task_type="CAUSAL_LM",
                                 target_modules="all-linear")  # as labeler/services/training/runners/common.py
    return AutoModelForCausalLMWithValueHead.from_pretrained(backbone, peft_config=peft_config), config, parameters


def child(args) -> dict:
    import torch
    import types

    from rlhf.attention import training_attention
    from rlhf.configs import PPOConfig
    from rlhf.memory_estimate import TrainShape, estimate_training_memory, shape_of_config
    from rlhf.ppo import PPOTrainer

    if args.lora:
        import peft  # noqa: F401  (imported before the baseline, as torch is)
    before = _rss()
    model, config, parameters = _build(args.model, args.bf16, args.lora)
    ppo = PPOConfig(batch_size=args.rows, mini_batch_size=args.mini_batch or args.rows, ppo_epochs=1, bf16=args.bf16,
                    rollout_forward_batch_size=args.mini_batch or args.rows, learning_rate=1e-5,
                    gradient_checkpointing=args.checkpointing, keep_freed_memory=args.keep_freed_memory)
    vocab = config.vocab_size
    trainer = PPOTrainer(ppo, model, None, types.SimpleNamespace(pad_token_id=0, eos_token_id=0))
    g = torch.Generator().manual_seed(0)
    for step in range(args.steps):
        queries = [torch.randint(1, vocab, (args.query,), generator=g) for _ in range(args.rows)]
        if args.generate:
            responses = trainer.generate(queries, return_prompt=False, batch_size=args.rows,
                                         max_new_tokens=args.answer, min_new_tokens=args.answer)
            responses = [torch.cat([r, torch.randint(1, vocab, (args.answer - len(r),), generator=g)])
                         for r in responses]  # an EOS (id 0) sampled early: the same length anyway
        else:
            responses = [torch.randint(1, vocab, (args.answer,), generator=g) for _ in range(args.rows)]
        trainer.step(queries, responses, [torch.tensor(float(i % 2)) for i in range(args.rows)])
    rise = _peak() - before

    attention = training_attention(ppo.attn_implementation, "cpu")
    run = TrainShape(rows=ppo.mini_batch_size, tokens=args.query + args.answer, logit_tokens=args.answer,
                     lora_r=LORA_R if args.lora else 0, load_bytes=2 if args.lora and args.bf16 else 4,
                     compute_bytes=2 if args.bf16 else 4, reference=not args.lora,
                     reference_bytes=2 if args.bf16 else None, gradient_checkpointing=args.checkpointing,
                     eager_attention=attention in ("eager", "lean_eager"), no_grad_rows=ppo.rollout_forward_batch_size,
                     generation_rows=args.rows if args.generate else 0)
    estimate = estimate_training_memory(shape_of_config(config, parameters), run)
    return {"model": args.model, "parameters": parameters, "bf16": args.bf16, "lora": args.lora,
            "checkpointing": args.checkpointing, "rows": args.rows, "tokens": args.query + args.answer,
            "measured": rise, "estimate": estimate.total, "ratio": rise / estimate.total, "parts": estimate.summary()}


def measure(argv: list[str]) -> dict:
    """Run one measurement in a fresh process (none of the ACCELERATE_* variables a parent may have set: an
    Accelerator sets ACCELERATE_MIXED_PRECISION, which would change the child's precision)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ACCELERATE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", *argv], capture_output=True,
                          text=True, env=env, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"measuring failed: {(done.stderr.strip().splitlines() or ['no output'])[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=MODELS, default="qwen1.5b")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (the reference copy in bf16)")
    parser.add_argument("--lora", action="store_true", help=f"LoRA r={LORA_R} on every linear, the base in bf16 with --bf16")
    parser.add_argument("--checkpointing", action="store_true", help="gradient checkpointing")
    parser.add_argument("--keep-freed-memory", action="store_true", help="the CPU allocator setting runs use")
    parser.add_argument("--rows", type=int, default=4, help="PPO batch_size")
    parser.add_argument("--mini-batch", type=int, default=0, help="mini_batch_size (default: --rows)")
    parser.add_argument("--query", type=int, default=32, help="prompt tokens")
    parser.add_argument("--answer", type=int, default=16, help="answer tokens")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--generate", action="store_true", help="generate the answers (else random tokens)")
    parser.add_argument("--json", help="write the result here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if args.child:
        print(json.dumps(child(args)), flush=True)
        return
    result = measure([a for a in argv if not a.startswith("--json")] if not args.json else
                     [a for i, a in enumerate(argv) if a != "--json" and (i == 0 or argv[i - 1] != "--json")])
    gib = 1024**3
    print(f"{result['model']}: {result['parameters'] / 1e9:.3f}B parameters, bf16={result['bf16']} lora={result['lora']}"
          f" checkpointing={result['checkpointing']}, {result['rows']} rows x {result['tokens']} tokens")
    print(f"measured peak rise {result['measured'] / gib:.2f} GiB, estimate {result['estimate'] / gib:.2f} GiB "
          f"({result['parts']}): measured/estimate = {result['ratio']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
