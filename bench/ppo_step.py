"""One PPO iteration on the default model: the optimised path against a naive baseline, in the same run.

    python bench/ppo_step.py                       # batch 16, 16 new tokens, 4 epochs of mini-batch 4, 3 rounds
    python bench/ppo_step.py --ablations           # also the optimised path with each lever off in turn (~3.5 GB each)
    python bench/ppo_step.py --variants no-bf16    # only this one besides optimised and naive
    python bench/ppo_step.py --batch-size 8 --rounds 5
    python bench/ppo_step.py --trl-python /tmp/trlvenv/bin/python   # also TRL 0.11.4's notebook loop (README)

An iteration is generation + scoring (VADER compound of query + response) + trainer.step(). Every response
is 16 tokens long (min_new_tokens), so all variants do the same work.
Optimised: the whole batch generated at once (left padding), bf16 autocast for generation and every forward
pass, freed memory kept in the process (rlhf/cpu_memory.py), only the response positions through the LM head,
mini-batches without the left padding they share.
Naive baseline: one query at a time through generate, everything in fp32, glibc's default allocator: what
the classic TRL notebook loop does.
Variants run in their own processes and take turns (bench/interleave.py), so drift in the machine's speed
hits them alike; each process's peak RSS is its own. The first iteration of each is a warm-up.
TRL (--trl-python, a venv with trl==0.11.4): its PPOTrainer in the IMDB notebook's loop (one generate per
query, fp32) on the same model, prompts, reward and settings (bench/trl_side.py).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from interleave import median, paired_ratio, run_from_command_line  # noqa: E402

PROMPTS = Path(__file__).resolve().parents[1] / "labeler" / "data" / "movie_prompts.txt"

# Each lever of the optimised path; a variant is a setting of all of them.
OPTIMISED = {"batched_generation": True, "bf16": True, "keep_freed_memory": True}
VARIANTS = {
    "optimised": OPTIMISED,
    "naive": {lever: False for lever in OPTIMISED},
    **{f"no-{lever.replace('_', '-')}": {**OPTIMISED, lever: False} for lever in OPTIMISED},
}


def setup(variant: str, args: argparse.Namespace):
    import torch
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    from rlhf.configs import PPOConfig
    from rlhf.loading import load_tokenizer, resolve_model_path
    from rlhf.ppo import PPOTrainer
    from rlhf.value_head import AutoModelForCausalLMWithValueHead

    levers = VARIANTS[variant]
    if args.threads:
        torch.set_num_threads(args.threads)
    path = resolve_model_path("default")
    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLMWithValueHead.from_pretrained(path)
    config = PPOConfig(batch_size=args.batch_size, mini_batch_size=args.mini_batch_size, ppo_epochs=args.ppo_epochs,
                       learning_rate=1.41e-5, bf16=levers["bf16"], keep_freed_memory=levers["keep_freed_memory"], seed=0)
    trainer = PPOTrainer(config, model, None, tokenizer)
    vader = SentimentIntensityAnalyzer()
    lines = PROMPTS.read_text().splitlines()
    generation = dict(return_prompt=False, max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens,
                      allow_kl_unsafe=True,  # min_new_tokens: equal work for every variant; the KL bias is no matter here
                      batch_size=args.batch_size if levers["batched_generation"] else 1)

    def iteration(i: int) -> dict:
        texts = [lines[(i * args.batch_size + k) % len(lines)] for k in range(args.batch_size)]
        queries = [tokenizer(t, return_tensors="pt").input_ids[0] for t in texts]
        t0, c0 = time.perf_counter(), time.process_time()
        responses = trainer.generate(queries, **generation)
        t1 = time.perf_counter()
        answers = tokenizer.batch_decode(responses, skip_special_tokens=True)
        scores = [torch.tensor(vader.polarity_scores(q + a)["compound"]) for q, a in zip(texts, answers)]
        t2 = time.perf_counter()
        trainer.step(queries, responses, scores)
        t3 = time.perf_counter()
        # CPU seconds of all threads: less sensitive than wall time to other people's jobs on a shared box.
        return {"generate": t1 - t0, "score": t2 - t1, "step": t3 - t2, "total": t3 - t0,
                "cpu_total": time.process_time() - c0}

    return iteration


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--mini-batch-size", type=int, default=4)
    parser.add_argument("--ppo-epochs", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    headline = lambda args: (f"PPO iteration on the default model: batch {args.batch_size}, {args.max_new_tokens} new "  # noqa: E731
                             f"tokens, {args.ppo_epochs} epochs of mini-batch {args.mini_batch_size}; {args.rounds} rounds after a warm-up")
    def trl(args):
        from rlhf.loading import resolve_model_path

        return {"trl-0.11": ["ppo", "--model", resolve_model_path("default"), "--prompts", str(PROMPTS),
                             "--batch-size", str(args.batch_size), "--mini-batch-size", str(args.mini_batch_size),
                             "--ppo-epochs", str(args.ppo_epochs), "--max-new-tokens", str(args.max_new_tokens),
                             "--threads", str(args.threads)]}

    run = run_from_command_line(parser, VARIANTS, setup, __file__, 3.5, headline, trl)
    if run is None:  # this process was a child serving one variant
        return
    args, variants, results, peaks = run
    naive = results["naive"]
    print(f"\n{'median of rounds':20}{'generate s':>12}{'step s':>10}{'total s':>10}{'total CPU s':>13}"
          f"{'peak RSS MB':>13}{'x naive (paired)':>18}")
    for name in variants:
        r = results[name]
        print(f"{name:20}{median(r, 'generate'):12.2f}{median(r, 'step'):10.2f}{median(r, 'total'):10.2f}"
              f"{median(r, 'cpu_total'):13.2f}{peaks[name]:13.0f}{paired_ratio(naive, r, 'total'):18.2f}")
    opt = results["optimised"]
    print(f"\nspeed-up of optimised over naive, median of per-round ratios: generate x{paired_ratio(naive, opt, 'generate'):.2f}, "
          f"step x{paired_ratio(naive, opt, 'step'):.2f}, total x{paired_ratio(naive, opt, 'total'):.2f} (target >= 3), "
          f"total CPU x{paired_ratio(naive, opt, 'cpu_total'):.2f}; "
          f"peak RSS ratio {peaks['optimised'] / peaks['naive']:.2f} (target <= 1)")
    if "trl-0.11" in results:
        trl = results["trl-0.11"]
        print(f"ours vs TRL 0.11's notebook loop, median of per-round ratios: total x{paired_ratio(trl, opt, 'total'):.2f} "
              f"(target >= 3), step x{paired_ratio(trl, opt, 'step'):.2f}, total CPU x{paired_ratio(trl, opt, 'cpu_total'):.2f}; "
              f"peak RSS {peaks['optimised']:.0f} MB vs {peaks['trl-0.11']:.0f} MB: x{peaks['optimised'] / peaks['trl-0.11']:.2f} (target <= 1)")


if __name__ == "__main__":
    main()
