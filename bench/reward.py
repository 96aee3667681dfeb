"""Reward-model training throughput on the bundled MiniLM encoder: our RewardTrainer, optionally against TRL's.

    python bench/reward.py                  # 128 pairs, batch 8, max length 128, 3 rounds
    python bench/reward.py --trl-python /tmp/trl1venv/bin/python   # also TRL 1.x's RewardTrainer, fp32 and bf16
    python bench/reward.py --ablations      # our trainer with each lever off in turn (~1 GB per variant)

Ours: RewardTrainer with bf16 autocast, freed memory kept in the process (rlhf/cpu_memory.py), lean eager
attention on CPU (rlhf/attention.py), dropout off (as TRL's default) and one bf16 cast of each attention
block's input for its three projections (rlhf/autocast_inputs.py). "naive" is the same trainer with all five
off (fp32, glibc's default allocator, the model's SDPA, MiniLM's dropout of 0.1, a cast per projection);
"transformers-eager" is ours with transformers' own eager attention. TRL (--trl-python): RewardTrainer on the
same pairs, batch and max length, in fp32 (its default) and in bf16, both with gradient checkpointing off
(TRL 1.x's default is on; off is faster); our ratio is taken to the faster of the two, and each ablation's
ratio to it is printed too (what a lever is worth against TRL, in speed and in peak RSS). Every variant times
trainer.train() over one epoch, building the trainer and loading the model left out; they run in their own processes and
take turns, one epoch each (bench/interleave.py), the first a warm-up.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from interleave import median, paired_ratio, print_against_trl, run_from_command_line  # noqa: E402
from pairs import synthetic_rows  # noqa: E402

OPTIMISED = {"bf16": True, "keep_freed_memory": True, "disable_dropout": True, "share_input_casts": True,
             "attn_implementation": "auto"}
VARIANTS = {"optimised": OPTIMISED,
            "naive": {"bf16": False, "keep_freed_memory": False, "disable_dropout": False, "share_input_casts": False,
                      "attn_implementation": "model"},
            **{f"no-{lever.replace('_', '-')}": {**OPTIMISED, lever: False} for lever in OPTIMISED if lever != "attn_implementation"},
            "no-eager-attention": {**OPTIMISED, "attn_implementation": "model"},
            "transformers-eager": {**OPTIMISED, "attn_implementation": "eager"}}


def setup(variant: str, args: argparse.Namespace):
    import torch
    from datasets import Dataset

    from rlhf.loading import resolve_model_path
    from rlhf.reward import RewardConfig, RewardTrainer

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model_path = resolve_model_path(args.model)
    data = Dataset.from_list(synthetic_rows(args.pairs, seed=0))
    config = RewardConfig(
        output_dir=tempfile.mkdtemp(prefix="bench-rm-"), per_device_train_batch_size=args.batch_size,
        max_length=args.max_length, num_train_epochs=1, learning_rate=5e-5, save_strategy="no", logging_steps=1000,
        disable_tqdm=True, report_to="none", seed=0, **VARIANTS[variant],
    )
    holder = {}

    def epoch(i: int) -> dict:
        holder.clear()  # the last epoch's trainer goes before the next loads (it sits in reference cycles)
        gc.collect()
        trainer = holder["trainer"] = RewardTrainer(model_path, args=config, train_dataset=data)
        start, cpu_start = time.perf_counter(), time.process_time()
        trainer.train()
        return {"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu_start}

    return epoch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default-encoder", help="Backbone: 'default-encoder' (MiniLM) or a folder.")
    parser.add_argument("--pairs", type=int, default=128, help="Preference pairs trained on (one epoch per round).")
    parser.add_argument("--batch-size", type=int, default=8, help="Pairs per optimizer step.")
    parser.add_argument("--max-length", type=int, default=128, help="Tokens per (prompt, response).")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's choice).")
    headline = lambda args: (f"Reward model on {args.model}: {args.pairs} pairs per epoch, batch {args.batch_size}, "  # noqa: E731
                             f"max length {args.max_length}; {args.rounds} rounds after a warm-up")

    def trl(args):
        from rlhf.loading import resolve_model_path

        common = ["reward", "--model", resolve_model_path(args.model), "--pairs", str(args.pairs), "--batch-size",
                  str(args.batch_size), "--max-length", str(args.max_length), "--threads", str(args.threads)]
        return {"trl-fp32": common, "trl-bf16": [*common, "--bf16"]}

    run = run_from_command_line(parser, VARIANTS, setup, __file__, 1.0, headline, trl)
    if run is None:  # this process was a child serving one variant
        return
    args, variants, results, peaks = run
    naive = results["naive"]
    print(f"\n{'median of rounds':20}{'pairs/s':>9}{'cpu s':>8}{'peak RSS MB':>13}{'x naive (paired)':>18}")
    for name in variants:
        r = results[name]
        print(f"{name:20}{args.pairs / median(r, 'seconds'):9.2f}{median(r, 'cpu'):8.1f}{peaks[name]:13.0f}"
              f"{paired_ratio(naive, r, 'seconds'):18.2f}")
    trl_names = [name for name in ("trl-fp32", "trl-bf16") if name in results]
    if trl_names:
        fastest = min(trl_names, key=lambda name: median(results[name], "seconds"))
        trl = results[fastest]
        print()
        print_against_trl(results, peaks, "optimised", fastest, f"RewardTrainer at its fastest here ({fastest})", 1.5)
        if "no-bf16" in results and "trl-fp32" in results:  # both fp32: what a CPU without fast bf16 runs
            print_against_trl(results, peaks, "no-bf16", "trl-fp32", "RewardTrainer, both fp32 (bf16 off)", 1.5)
        for name in variants:  # every other variant of ours (ablations) against the same TRL rounds
            if name not in ("optimised", *trl_names):
                print(f"  {name:20} x{paired_ratio(trl, results[name], 'seconds'):.2f} pairs/s, "
                      f"x{paired_ratio(trl, results[name], 'cpu'):.2f} cpu time, peak RSS x{peaks[name] / peaks[fastest]:.2f}")


if __name__ == "__main__":
    main()
