"""Peak memory of one training step at a large vocabulary: the taken tokens' log-probs by rlhf.core's
selective_log_softmax (new) against log_softmax(logits.float()).gather (the old way), measured in the same run.

The model is a 1-layer Qwen2 shape with Qwen2.5's 151,936-token vocabulary and a 64-wide hidden state, so the
step's memory is the logits' and little else: 16 x 512 tokens x 151,936 = 1.25e9 logits, 2.5 GB in bf16 and 5 GB
per fp32 copy. Each variant runs in its own process (its own peak RSS); the figure is the step's rise of peak RSS
over the process's RSS before the step. Memory figures are valid on a loaded machine (no timing here).

    python bench/vocab_memory.py                       # 16 x 512 tokens: the old way needs ~18 GB
    python bench/vocab_memory.py --batch 4             # the same ratio with a quarter of the memory
    python bench/vocab_memory.py --kl --batch 4 --length 256   # kl_penalty="full": chunked against whole-tensor

--kl measures PPO's rollout pass with kl_penalty="full" instead: the extra memory of the exact KL over the
vocabulary beside both models' bf16 logits (B, R, V), under no_grad as PPO runs it: rlhf.core's full_kl_from_logits
(new, a chunk of positions at a time) against two whole fp32 log-softmaxes and their product (old). The logits are
random (the KL's memory does not depend on where they came from), made in bf16 before the measured part.

Measured on a 2-core AVX-512 BF16 CPU (under load; memory only): 16 x 512, bf16: old 14,285 MiB, new 4,994 MiB,
x0.35; 8 x 512: x0.37; 2 x 512: x0.45; 16 x 512 fp32 (--no-bf16): 14,279 -> 9,634 MiB, x0.67 (the logits and
their gradient are fp32 then, and both must exist in backward).
--kl, same machine, bf16 logits (nice -n 10, memory only): 2 x 128 tokens: old 750 MiB, new 379 MiB, x0.51;
4 x 256: old 2,976 MiB, new 535 MiB, x0.18. The new rise stays at a few chunks whatever the batch (new alone:
2 x 256: 327 MiB, 8 x 256: 514 MiB; the old one grows with B x R: 5 fp32 (B, R, V) tensors at its peak).
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

QWEN_VOCAB = 151_936
VARIANTS = ("old", "new")


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB


def kl_child(variant: str, args) -> dict:
    import torch

    from rlhf.core import full_kl_from_logits

    torch.manual_seed(0)
    shape = (args.batch, args.length, args.vocab)
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    logits, ref_logits = torch.randn(shape, dtype=dtype), torch.randn(shape, dtype=dtype)
    before = peak_mib()
    with torch.no_grad():
        if variant == "old":
            logp = torch.log_softmax(logits.float(), dim=-1)
            ref_logp = torch.log_softmax(ref_logits.float(), dim=-1)
            kl = (logp.exp() * (logp - ref_logp)).sum(-1)
            del logp, ref_logp
        else:
            kl = full_kl_from_logits(logits, ref_logits)
    return {"variant": variant, "before_mib": before, "peak_mib": peak_mib(), "loss": float(kl.mean())}


def child(variant: str, args) -> dict:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rlhf.core import selective_log_softmax

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=args.vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=args.length + 1,
                         tie_word_embeddings=True)
    model = Qwen2ForCausalLM(config)
    model.config._attn_implementation = "sdpa"
    ids = torch.randint(0, args.vocab, (args.batch, args.length + 1))
    mask = torch.ones(args.batch, args.length)
    before = peak_mib()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
        logits = model(input_ids=ids[:, :-1]).logits  # (B, T, V)
    labels = ids[:, 1:]
    if variant == "old":
        logps = torch.log_softmax(logits.float(), dim=-1).gather(-1, labels[..., None]).squeeze(-1)  # (B, T)
    else:
        logps = selective_log_softmax(logits, labels)  # (B, T)
    del logits
    loss = -(logps * mask).sum() / mask.sum()
    loss.backward()
    return {"variant": variant, "before_mib": before, "peak_mib": peak_mib(), "loss": float(loss)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16, help="sequences per step")
    parser.add_argument("--length", type=int, default=512, help="tokens per sequence")
    parser.add_argument("--vocab", type=int, default=QWEN_VOCAB, help="vocabulary size (Qwen2.5's by default)")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=True,
                        help="bf16 autocast (the logits are then bf16), as training runs where bf16 is fast")
    parser.add_argument("--kl", action="store_true",
                        help='measure kl_penalty="full" (the rollout pass) instead of a training step\'s log-probs')
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps((kl_child if args.kl else child)(args.child, args)), flush=True)
        return
    what = 'full KL over the vocabulary (no_grad)' if args.kl else 'one training step'
    print(f"{what}: {args.batch} x {args.length} tokens, vocabulary {args.vocab:,}, "
          f"{'bf16' if args.bf16 else 'fp32'}; logits {args.batch * args.length * args.vocab / 1e9:.2f}e9 per model")
    results = {}
    for variant in VARIANTS:
        command = [sys.executable, str(Path(__file__).resolve()), "--child", variant, "--batch", str(args.batch),
                   "--length", str(args.length), "--vocab", str(args.vocab), "--bf16" if args.bf16 else "--no-bf16",
                   *(["--kl"] if args.kl else [])]
        out = subprocess.run(command, capture_output=True, text=True, check=True)
        results[variant] = json.loads(out.stdout.strip().splitlines()[-1])
        r = results[variant]
        print(f"{variant:>4}: {'KL' if args.kl else 'step'}'s peak rise {r['peak_mib'] - r['before_mib']:8.0f} MiB "
              f"(peak RSS {r['peak_mib']:.0f} MiB), {'mean KL' if args.kl else 'loss'} {r['loss']:.5f}")
    rise = {v: results[v]["peak_mib"] - results[v]["before_mib"] for v in VARIANTS}
    print(f"new / old peak rise: x{rise['new'] / rise['old']:.2f}{'' if args.kl else ' (target <= 0.5)'}; "
          f"same {'mean KL' if args.kl else 'loss'}: {abs(results['new']['loss'] - results['old']['loss']) < 1e-5}")


if __name__ == "__main__":
    main()
