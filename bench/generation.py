"""Generation throughput of the default model: batch 1 vs batch 16, fp32 vs bf16 autocast, same run.

    python bench/generation.py                  # 48 new tokens, batches 1 and 16
    python bench/generation.py --threads 2 --repeats 3

Every configuration goes through rlhf.generation.generate_batch (left padding, transformers' generate)
on the same prompts, with sampling on and min_length = max_new_tokens so every row really generates
48 tokens and rows of a batch finish together: tokens/s = rows * 48 / seconds. The baseline is batch 1
in fp32; each line prints its ratio to it. Each configuration runs once untimed first (warm-up), then
`--repeats` timed runs; the best is reported (the machine is shared, the minimum is the least noisy).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Waiting OpenMP threads sleep instead of spinning: on a shared CPU spinning made generation several times slower.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

from rlhf.configs import GenerationSettings  # noqa: E402
from rlhf.generation import build_prompt_ids, generate_batch  # noqa: E402
from rlhf.loading import load_causal_lm, load_tokenizer  # noqa: E402

PROMPTS = [
    "Write a short review of a film you liked.",
    "What makes a good thriller?",
    "Describe the opening scene of a western.",
    "Why do people love musicals?",
    "Recommend a movie for a rainy Sunday.",
    "Summarise the plot of a heist film in two sentences.",
    "What is the difference between a sequel and a remake?",
    "Name three things a great soundtrack does.",
]


def measure(model, tokenizer, prompt_ids, settings: GenerationSettings, repeats: int) -> float:
    generate_batch(model, tokenizer, prompt_ids, settings)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        out = generate_batch(model, tokenizer, prompt_ids, settings)
        best = min(best, time.perf_counter() - start)
        assert all(len(t) == settings.max_new_tokens for t in out), "every row should generate max_new_tokens"
    return len(prompt_ids) * settings.max_new_tokens / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", help="model name or folder (default: the embedded SmolLM2-135M)")
    parser.add_argument("--max-new-tokens", type=int, default=48, help="tokens generated per row (default: 48)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16], help="batch sizes (default: 1 16)")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per configuration (default: 2)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    tokenizer = load_tokenizer(args.model, padding_side="left")
    model = load_causal_lm(args.model).eval()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    base = GenerationSettings(max_new_tokens=args.max_new_tokens, min_length=args.max_new_tokens, seed=0)
    print(f"model={args.model} device={device} threads={torch.get_num_threads()} new_tokens={args.max_new_tokens}")
    baseline = None
    for autocast in (False, True):
        for batch in args.batches:
            prompts = [PROMPTS[i % len(PROMPTS)] for i in range(batch)]
            ids = [build_prompt_ids(tokenizer, p) for p in prompts]
            settings = dataclasses.replace(base, batch_size=batch, autocast=autocast)
            rate = measure(model, tokenizer, ids, settings, args.repeats)
            baseline = baseline or rate  # the first configuration: batch 1 (or the smallest), fp32
            label = f"batch {batch:>3} {'bf16 autocast' if autocast else 'fp32         '}"
            print(f"{label}: {rate:8.1f} tokens/s  ({rate / baseline:5.2f}x batch-{args.batches[0]} fp32)", flush=True)


if __name__ == "__main__":
    main()
