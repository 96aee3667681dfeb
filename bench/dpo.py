"""DPO training throughput on the default model: our DPOTrainer against a plain fp32 loop, same run.

    python bench/dpo.py                    # 32 pairs, batch 4, max length 128
    python bench/dpo.py --pairs 64 --threads 2

Ours: the reference runs once over the data before training (precompute_ref_log_probs, batched at
--ref-batch-size with no grad) and every step runs under bf16 autocast, so a step is one policy
forward + backward. Baseline: what a hand-written loop does, in fp32 with the reference model run on
every step. Both sum log-probs with the same `completion_logps` and take the same `dpo_loss`, both see
the same pairs in the same batches, and both times include everything from the first batch to the last
optimizer step (ours includes the reference pass). Model loading is timed separately and left out.
"""
from __future__ import annotations

import argparse
import os
import random
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from rlhf.data import PreferenceCollator, tokenize_preference_causal  # noqa: E402
from rlhf.dpo import DPOConfig, DPOTrainer, completion_logps  # noqa: E402
from rlhf.loading import load_causal_lm, load_tokenizer, resolve_model_path  # noqa: E402
from rlhf.losses import dpo_loss  # noqa: E402

WORDS = (
    "the film story plot actor actress scene camera music score ending script director drama comedy "
    "character dialogue moment audience screen performance visual sound writing pace tension humour "
    "beautiful boring brilliant clumsy moving flat sharp slow tender loud quiet bright dark warm cold"
).split()


def synthetic_pairs(n: int, seed: int) -> Dataset:
    """Movie-review-like pairs: ~50-word prompts, ~30-word answers (about 128 tokens together)."""
    rng = random.Random(seed)
    sentence = lambda k: " ".join(rng.choice(WORDS) for _ in range(k))  # noqa: E731
    return Dataset.from_list(
        [{"prompt": "Review: " + sentence(50), "chosen": " " + sentence(30), "rejected": " " + sentence(30)} for _ in range(n)]
    )


def run_ours(model_path: str, data: Dataset, args: argparse.Namespace, out_dir: str) -> tuple[float, float, float]:
    start = time.perf_counter()
    config = DPOConfig(
        output_dir=out_dir, per_device_train_batch_size=args.batch_size, per_device_eval_batch_size=args.ref_batch_size,
        max_length=args.max_length, max_prompt_length=args.max_length // 2, num_train_epochs=1, learning_rate=1e-6,
        bf16=True, precompute_ref_log_probs=True, save_strategy="no", logging_steps=1000, disable_tqdm=True, seed=0,
    )
    trainer = DPOTrainer(model_path, args=config, train_dataset=data)
    load_s = time.perf_counter() - start
    start, cpu_start = time.perf_counter(), time.process_time()
    trainer.train()  # the reference pass happens inside, in get_train_dataloader
    return time.perf_counter() - start, time.process_time() - cpu_start, load_s


def run_baseline(model_path: str, data: Dataset, args: argparse.Namespace) -> tuple[float, float, float]:
    start = time.perf_counter()
    tokenizer = load_tokenizer(model_path, padding_side="right")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # where the Trainer would put it
    policy, reference = load_causal_lm(model_path).to(device).train(), load_causal_lm(model_path).to(device).eval()
    rows = data.map(
        tokenize_preference_causal,
        fn_kwargs={"tokenizer": tokenizer, "max_length": args.max_length, "max_prompt_length": args.max_length // 2},
        remove_columns=data.column_names,
    )
    loader = DataLoader(rows, batch_size=args.batch_size, collate_fn=PreferenceCollator(tokenizer.pad_token_id))
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6)
    load_s = time.perf_counter() - start
    start, cpu_start = time.perf_counter(), time.process_time()
    for batch in loader:
        batch = {k: v.to(device) for k, v in batch.items()}
        with torch.no_grad():
            ref_chosen, ref_rejected = completion_logps(reference, batch).chunk(2)
        chosen, rejected = completion_logps(policy, batch).chunk(2)
        loss = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta=0.1)[0].mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, time.process_time() - cpu_start, load_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", help="Policy: 'default' (SmolLM2-135M) or a folder.")
    parser.add_argument("--pairs", type=int, default=32, help="Preference pairs trained on (one epoch).")
    parser.add_argument("--batch-size", type=int, default=4, help="Pairs per optimizer step.")
    parser.add_argument("--ref-batch-size", type=int, default=16, help="Pairs per no-grad reference batch (ours).")
    parser.add_argument("--max-length", type=int, default=128, help="Tokens per prompt + completion.")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice).")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model_path = resolve_model_path(args.model)
    data = synthetic_pairs(args.pairs, seed=0)
    torch.manual_seed(0)

    baseline_s, baseline_cpu, baseline_load = run_baseline(model_path, data, args)
    with tempfile.TemporaryDirectory() as out_dir:
        ours_s, ours_cpu, ours_load = run_ours(model_path, data, args, out_dir)
    print(f"device: {'cuda' if torch.cuda.is_available() else 'cpu'}, threads: {torch.get_num_threads()}, "
          f"pairs: {args.pairs}, batch: {args.batch_size}, max_length: {args.max_length}")
    # CPU seconds as well as wall seconds: on a shared machine the wall clock also measures the neighbours.
    print(f"baseline (fp32, reference every step): {baseline_s:7.1f} s wall {baseline_cpu:7.1f} s cpu  "
          f"{args.pairs / baseline_s:6.2f} pairs/s  (load {baseline_load:.1f} s)")
    print(f"DPOTrainer (cached reference, bf16):   {ours_s:7.1f} s wall {ours_cpu:7.1f} s cpu  "
          f"{args.pairs / ours_s:6.2f} pairs/s  (load {ours_load:.1f} s)")
    print(f"speed-up: {baseline_s / ours_s:.2f}x pairs/s (wall), {baseline_cpu / ours_cpu:.2f}x cpu time")


if __name__ == "__main__":
    main()
