"""One PPO iteration on the default model: our optimised path against a naive baseline, same run.

    python bench/ppo_step.py                      # batch 16, up to 16 new tokens, 4 epochs of mini-batch 4
    python bench/ppo_step.py --batch-size 8 --iterations 2

An iteration is generation + scoring (VADER compound of query + response) + trainer.step().
Optimised: batched left-padded generation (the whole batch at once), bf16 autocast for generation and
every forward pass, only the response positions through the LM head, the reference's log-probs taken once.
Naive baseline: one query at a time through generate, everything in fp32 (what a first loop looks like).
Each path runs in its own subprocess so peak RSS (resource.getrusage) is measured per path; the first
iteration of each is a warm-up and is not timed. On a shared machine wall times swing with other people's
jobs: the CPU-seconds ratio is the steadier figure.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PROMPTS = Path(__file__).resolve().parents[1] / "labeler" / "data" / "movie_prompts.txt"


def run_path(mode: str, args: argparse.Namespace) -> dict:
    import torch
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    from rlhf.configs import PPOConfig
    from rlhf.loading import load_tokenizer, resolve_model_path
    from rlhf.ppo import PPOTrainer
    from rlhf.value_head import AutoModelForCausalLMWithValueHead

    if args.threads:
        torch.set_num_threads(args.threads)
    optimised = mode == "optimised"
    path = resolve_model_path("default")
    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLMWithValueHead.from_pretrained(path)
    config = PPOConfig(batch_size=args.batch_size, mini_batch_size=args.mini_batch_size, ppo_epochs=args.ppo_epochs,
                       learning_rate=1.41e-5, bf16=optimised, seed=0)
    trainer = PPOTrainer(config, model, None, tokenizer)
    vader = SentimentIntensityAnalyzer()
    lines = PROMPTS.read_text().splitlines()
    times = {"generate": 0.0, "score": 0.0, "step": 0.0, "cpu_total": 0.0}
    for iteration in range(args.iterations + 1):  # iteration 0 warms up (allocator, kernels) and is not timed
        texts = [lines[(iteration * args.batch_size + i) % len(lines)] for i in range(args.batch_size)]
        queries = [tokenizer(t, return_tensors="pt").input_ids[0] for t in texts]
        t0, c0 = time.perf_counter(), time.process_time()
        gen = dict(return_prompt=False, max_new_tokens=args.max_new_tokens)
        responses = trainer.generate(queries, batch_size=args.batch_size if optimised else 1, **gen)
        t1 = time.perf_counter()
        answers = tokenizer.batch_decode(responses, skip_special_tokens=True)
        scores = [torch.tensor(vader.polarity_scores(q + a)["compound"]) for q, a in zip(texts, answers)]
        t2 = time.perf_counter()
        trainer.step(queries, responses, scores)
        t3 = time.perf_counter()
        if iteration > 0:
            times["generate"] += (t1 - t0) / args.iterations
            times["score"] += (t2 - t1) / args.iterations
            times["step"] += (t3 - t2) / args.iterations
            # CPU seconds of all threads: less sensitive than wall time to other people's jobs on a shared box.
            times["cpu_total"] += (time.process_time() - c0) / args.iterations
    times["total"] = times["generate"] + times["score"] + times["step"]
    times["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--mini-batch-size", type=int, default=4)
    parser.add_argument("--ppo-epochs", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=1, help="timed iterations after one warm-up")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--mode", choices=["optimised", "naive"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:  # child process: run one path, print its figures as JSON
        print("RESULT " + json.dumps(run_path(args.mode, args)), flush=True)
        return

    results = {}
    for mode in ("optimised", "naive"):
        child = subprocess.run([sys.executable, __file__, "--mode", mode, *sys.argv[1:]], capture_output=True, text=True)
        lines = [line for line in child.stdout.splitlines() if line.startswith("RESULT ")]
        if child.returncode != 0 or not lines:
            sys.exit(f"{mode} run failed:\n{child.stderr[-3000:]}")
        results[mode] = json.loads(lines[-1][len("RESULT "):])
        print(f"{mode}: {json.dumps({k: round(v, 3) for k, v in results[mode].items()})}", flush=True)
    print(f"PPO iteration on the default model: batch {args.batch_size}, <= {args.max_new_tokens} new tokens, "
          f"{args.ppo_epochs} epochs of mini-batch {args.mini_batch_size} (mean of {args.iterations} after a warm-up)")
    print(f"{'':12}{'generate s':>12}{'score s':>10}{'step s':>10}{'total s':>10}{'total CPU s':>13}{'peak RSS MB':>13}")
    for mode, r in results.items():
        print(f"{mode:12}{r['generate']:12.2f}{r['score']:10.3f}{r['step']:10.2f}{r['total']:10.2f}{r['cpu_total']:13.2f}"
              f"{r['peak_rss_mb']:13.0f}")
    opt, naive = results["optimised"], results["naive"]
    print(f"speed-up: generate x{naive['generate'] / opt['generate']:.2f}, step x{naive['step'] / opt['step']:.2f}, "
          f"total x{naive['total'] / opt['total']:.2f}, total CPU x{naive['cpu_total'] / opt['cpu_total']:.2f} (target >= 3); "
          f"peak RSS ratio {opt['peak_rss_mb'] / naive['peak_rss_mb']:.2f} (target <= 1)")


if __name__ == "__main__":
    main()
