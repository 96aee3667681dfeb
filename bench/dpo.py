"""DPO training throughput on the default model: our DPOTrainer against a plain fp32 loop, in the same run.

    python bench/dpo.py                    # 64 pairs, batch 4, max length 128, 3 rounds
    python bench/dpo.py --trl-python /tmp/trl1venv/bin/python   # also TRL 1.x's DPOTrainer, bf16 (README)
    python bench/dpo.py --only no-bf16 --trl-python /tmp/trl1venv/bin/python
                                           # ours and TRL's both in fp32, as on a CPU without fast bf16
    python bench/dpo.py --variants no-bf16,no-eager-attention   # also our trainer with these levers off
    python bench/dpo.py --variants gradient-checkpointing        # also ours with gradient checkpointing on
    python bench/dpo.py --ablations        # every lever off in turn (~4 GB per variant: 7 need ~30 GB)

Ours: the reference runs once over the data before training (precompute_ref_log_probs, batched at
--ref-batch-size with no grad, on the untrained policy while the trainer is built, so no reference copy is
kept; that pass is timed and added), every step runs under bf16 autocast, freed memory stays in the process
(rlhf/cpu_memory.py), attention is eager rather than SDPA's CPU flash kernel (rlhf/attention.py), and each
pair's prompt goes through the model once with chosen and rejected after it in one sequence
(share_prompt_forward), so a step is one policy forward + backward over prompt + both answers.
Baseline: what a hand-written loop does, in fp32 with the reference model run on every step, one padded row
per completion, glibc's default allocator and SDPA attention. Both sum log-probs with `completion_logps`
and take the same `dpo_loss`, both see the same pairs in the same batches, and both times include
everything from the first batch to the last optimizer step. Building the trainer or loading the models is
left out. Variants run in their own processes and take turns, one epoch each (bench/interleave.py); the
first epoch of each is a warm-up.
TRL (--trl-python): its DPOTrainer at its fastest setting here, bf16 autocast with the reference log-probs
precomputed at --ref-batch-size and gradient checkpointing off (TRL 1.x's default is on), on the same pairs, batch and
max length, timed the same way (bench/trl_side.py).
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

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from rlhf.data import PreferenceCollator, tokenize_preference_causal  # noqa: E402
from rlhf.dpo import DPOConfig, DPOTrainer, completion_logps  # noqa: E402
from rlhf.loading import load_causal_lm, load_tokenizer, resolve_model_path  # noqa: E402
from rlhf.losses import dpo_loss  # noqa: E402
from interleave import median, paired_ratio, print_against_trl, run_from_command_line  # noqa: E402
from pairs import synthetic_rows  # noqa: E402

def synthetic_pairs(n: int, seed: int) -> Dataset:
    """Movie-review-like pairs (bench/pairs.py), the same rows TRL's side builds."""
    return Dataset.from_list(synthetic_rows(n, seed))


# Each lever of our trainer; a variant of ours is a setting of all of them. "naive" is the plain loop.
OPTIMISED = {"bf16": True, "precompute_ref_log_probs": True, "keep_freed_memory": True, "share_prompt_forward": True,
             "share_input_casts": True, "attn_implementation": "auto"}
VARIANTS = {"optimised": OPTIMISED, "naive": None,
            **{f"no-{lever.replace('_', '-')}": {**OPTIMISED, lever: False} for lever in OPTIMISED if lever != "attn_implementation"},
            "no-eager-attention": {**OPTIMISED, "attn_implementation": "model"},
            # not a lever off but one more on: recompute activations in the backward pass (less memory, more work)
            "gradient-checkpointing": {**OPTIMISED, "gradient_checkpointing": True}}


def setup_ours(levers: dict, model_path: str, data: Dataset, args: argparse.Namespace):
    out_dir = tempfile.mkdtemp(prefix="bench-dpo-")
    config = DPOConfig(
        output_dir=out_dir, per_device_train_batch_size=args.batch_size, per_device_eval_batch_size=args.ref_batch_size,
        max_length=args.max_length, max_prompt_length=args.max_length // 2, num_train_epochs=1, learning_rate=1e-6,
        save_strategy="no", logging_steps=1000, disable_tqdm=True, seed=0, **levers,
    )
    holder, reference = {}, {"seconds": 0.0, "cpu": 0.0}

    class Timed(DPOTrainer):
        # With no reference model given, the reference pass runs while the trainer is built: it is timed
        # here and added to train()'s time, as bench/trl_side.py does for TRL.
        def add_reference_logps(self, dataset):
            start, cpu_start = time.perf_counter(), time.process_time()
            try:
                return super().add_reference_logps(dataset)
            finally:
                reference["seconds"] += time.perf_counter() - start
                reference["cpu"] += time.process_time() - cpu_start

    def epoch(i: int) -> dict:
        holder.clear()  # free the last epoch's trainer before building the next: a Trainer sits in
        gc.collect()    # reference cycles, and its memory would otherwise stay taken while the next one loads
        reference.update(seconds=0.0, cpu=0.0)
        trainer = holder["trainer"] = Timed(model_path, args=config, train_dataset=data)
        start, cpu_start = time.perf_counter(), time.process_time()
        trainer.train()
        return {"seconds": time.perf_counter() - start + reference["seconds"],
                "cpu": time.process_time() - cpu_start + reference["cpu"]}

    return epoch


def setup_naive(model_path: str, data: Dataset, args: argparse.Namespace):
    tokenizer = load_tokenizer(model_path, padding_side="right")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # where the Trainer would put it
    reference = load_causal_lm(model_path).to(device).eval()
    rows = data.map(
        tokenize_preference_causal,
        fn_kwargs={"tokenizer": tokenizer, "max_length": args.max_length, "max_prompt_length": args.max_length // 2},
        remove_columns=data.column_names,
    )
    loader = DataLoader(rows, batch_size=args.batch_size, collate_fn=PreferenceCollator(tokenizer.pad_token_id))

    def epoch(i: int) -> dict:
        gc.collect()  # as for ours: the last epoch's policy and optimizer are gone before the next load
        policy = load_causal_lm(model_path).to(device).train()
        optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6)
        start, cpu_start = time.perf_counter(), time.process_time()
        for batch in loader:
            batch = {k: v.to(device) for k, v in batch.items()}
            with torch.no_grad():
                ref_chosen, ref_rejected = completion_logps(reference, batch, share_prompt=False).chunk(2)
            chosen, rejected = completion_logps(policy, batch, share_prompt=False).chunk(2)
            loss = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta=0.1)[0].mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return {"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu_start}

    return epoch


def setup(variant: str, args: argparse.Namespace):
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model_path = resolve_model_path(args.model)
    data = synthetic_pairs(args.pairs, seed=0)
    if variant == "naive":
        return setup_naive(model_path, data, args)
    return setup_ours(VARIANTS[variant], model_path, data, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default", help="Policy: 'default' (SmolLM2-135M) or a folder.")
    parser.add_argument("--pairs", type=int, default=64, help="Preference pairs trained on (one epoch per round).")
    parser.add_argument("--batch-size", type=int, default=4, help="Pairs per optimizer step.")
    parser.add_argument("--ref-batch-size", type=int, default=16, help="Pairs per no-grad reference batch (ours).")
    parser.add_argument("--max-length", type=int, default=128, help="Tokens per prompt + completion.")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's choice).")
    headline = lambda args: (f"DPO on the default model: {args.pairs} pairs per epoch, batch {args.batch_size}, "  # noqa: E731
                             f"max length {args.max_length}; {args.rounds} rounds after a warm-up")
    def trl(args):
        common = ["dpo", "--model", resolve_model_path(args.model), "--pairs", str(args.pairs), "--batch-size",
                  str(args.batch_size), "--ref-batch-size", str(args.ref_batch_size), "--max-length", str(args.max_length),
                  "--threads", str(args.threads)]
        # TRL in fp32 only beside our fp32 variant: what both do on a CPU without fast bf16.
        fp32 = {"trl-fp32": common} if "no-bf16" in (args.variants + "," + args.only).split(",") else {}
        return {"trl-bf16": [*common, "--bf16"], **fp32}

    run = run_from_command_line(parser, VARIANTS, setup, __file__, 4.5, headline, trl)
    if run is None:  # this process was a child serving one variant
        return
    args, variants, results, peaks = run
    # The first variant is the reference column: naive unless --only chose others.
    base_name = "naive" if "naive" in results else variants[0]
    base = results[base_name]
    # CPU seconds as well as wall seconds: on a shared machine the wall clock also measures the neighbours.
    print(f"\n{'median of rounds':28}{'pairs/s':>9}{'cpu s':>8}{'peak RSS MB':>13}{'x ' + base_name + ' (paired)':>22}")
    for name in variants:
        r = results[name]
        print(f"{name:28}{args.pairs / median(r, 'seconds'):9.2f}{median(r, 'cpu'):8.1f}{peaks[name]:13.0f}"
              f"{paired_ratio(base, r, 'seconds'):22.2f}")
    if "naive" in results and "optimised" in results:
        naive, opt = results["naive"], results["optimised"]
        print(f"\nspeed-up of our DPOTrainer over the fp32 loop, median of per-round ratios: "
              f"x{paired_ratio(naive, opt, 'seconds'):.2f} pairs/s (target >= 2), x{paired_ratio(naive, opt, 'cpu'):.2f} cpu time")
    if "trl-bf16" in results and "optimised" in results:
        print_against_trl(results, peaks, "optimised", "trl-bf16", "DPOTrainer (bf16, precomputed reference)", 2)
    if "trl-fp32" in results and "no-bf16" in results:  # both fp32: what a CPU without fast bf16 runs
        print_against_trl(results, peaks, "no-bf16", "trl-fp32", "DPOTrainer, both fp32 (bf16 off)", 2)


if __name__ == "__main__":
    main()
