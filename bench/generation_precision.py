"""Inference in bf16 or fp32 on this CPU (issue 44 item 1): which does labeler.services.serving.inference pick, and is
it the faster one? 64 answers x 128 tokens with the default model, each dtype in turn, interleaved, the ratio printed.

    python bench/generation_precision.py                        # 64 answers x 128 tokens, 3 rounds
    python bench/generation_precision.py --answers 2 --tokens 4 --rounds 1     # a check that it runs

Both copies of the model are loaded first (rlhf.loading.default_model_path(): SmolLM2-135M-Instruct), the same way
the app loads them (inference.load_policy's steps with the dtype given). Then the rounds alternate fp32, bf16, bf16,
fp32 (ABBA) so a shared machine's drift hits both alike. Each timing is generate_batch over the same prompts, one
answer at a time as the Chat and the Arena write them (`--batch` for Data > Generate's batches), sampling with
min_length = max_new_tokens so every answer really has --tokens tokens. Printed: per round the seconds of each, then
the median bf16/fp32 time ratio (below 1: bf16 faster), the CPU's bf16 flags and what inference_dtype picks here.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # waiting OpenMP threads sleep (a shared CPU)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from labeler.services.serving.inference import inference_dtype  # noqa: E402
from rlhf.configs import GenerationSettings  # noqa: E402
from rlhf.generation import build_prompt_ids, generate_batch  # noqa: E402
from rlhf.hardware import BF16_CPU_FLAGS, cpu_flags  # noqa: E402
from rlhf.loading import default_model_path, load_causal_lm, load_tokenizer  # noqa: E402

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
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def load(path: str, dtype: torch.dtype):
    model = load_causal_lm(path, dtype=dtype).eval().requires_grad_(False)
    return model, load_tokenizer(path, padding_side="left")


def time_answers(model, tokenizer, answers: int, tokens: int, batch: int, seed: int) -> float:
    prompts = [build_prompt_ids(tokenizer, [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}])
               for i in range(answers)]
    settings = GenerationSettings(max_new_tokens=tokens, min_length=tokens, batch_size=batch, seed=seed)
    start = time.perf_counter()
    with torch.no_grad():
        out = generate_batch(model, tokenizer, prompts, settings)
    seconds = time.perf_counter() - start
    assert all(len(row) == tokens for row in out), [len(row) for row in out]
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=64, help="answers per timing (default: 64)")
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per answer (default: 128)")
    parser.add_argument("--batch", type=int, default=1, help="answers generated together (default: 1, as Chat)")
    parser.add_argument("--rounds", type=int, default=3, help="ABBA rounds (default: 3)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--model", default=None, help="model folder (default: the default model)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    path = args.model or str(default_model_path())
    flags = cpu_flags()
    print(f"model {path}; {args.answers} answers x {args.tokens} tokens, batch {args.batch}; "
          f"torch threads {torch.get_num_threads()}; CPU bf16 flags: {sorted(flags & BF16_CPU_FLAGS) or 'none'}; "
          f"the app picks {inference_dtype('cpu', flags)} on this CPU")
    models = {name: load(path, dtype) for name, dtype in DTYPES.items()}
    for name, (model, tokenizer) in models.items():  # warm-up: lazy initialisation is not speed
        time_answers(model, tokenizer, 1, min(4, args.tokens), 1, seed=0)
    seconds: dict[str, list[float]] = {name: [] for name in DTYPES}
    for round_ in range(args.rounds):
        order = ["fp32", "bf16", "bf16", "fp32"]
        taken: dict[str, list[float]] = {name: [] for name in DTYPES}
        for name in order:
            taken[name].append(time_answers(*models[name], args.answers, args.tokens, args.batch, seed=round_))
        for name in DTYPES:
            seconds[name].append(statistics.mean(taken[name]))
        print(f"round {round_ + 1}: fp32 {seconds['fp32'][-1]:.2f} s, bf16 {seconds['bf16'][-1]:.2f} s, "
              f"bf16/fp32 {seconds['bf16'][-1] / seconds['fp32'][-1]:.2f}")
    ratios = [b / f for b, f in zip(seconds["bf16"], seconds["fp32"])]
    ratio = statistics.median(ratios)
    faster = "bf16" if ratio < 1 else "fp32"
    tokens_per_s = {name: args.answers * args.tokens / statistics.median(s) for name, s in seconds.items()}
    print(f"median bf16/fp32 time ratio {ratio:.2f} (fp32 {tokens_per_s['fp32']:.1f} tokens/s, bf16 "
          f"{tokens_per_s['bf16']:.1f} tokens/s): {faster} is faster here; the app picks "
          f"{inference_dtype('cpu', flags)}")


if __name__ == "__main__":
    main()
