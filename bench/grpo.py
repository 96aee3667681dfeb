"""One GRPO (or RLOO, or KTO) step on the default model: our trainer against TRL 1.16's, same settings, same run.

    python bench/grpo.py --trl-python /work/trlvenv/bin/python          # GRPO, ours and TRL's, 3 rounds
    python bench/grpo.py --trainer rloo --trl-python /work/trlvenv/bin/python
    python bench/grpo.py --trainer kto --trl-python /work/trlvenv/bin/python
    python bench/grpo.py --no-bf16                                       # both in fp32

KTO: one epoch over 32 unpaired rows (bench/pairs.py's synthetic pairs, unpaired: ~128 tokens each) in batches of
8, the reference a frozen copy run every step (TRL's default), bf16 where native.

A step: 16 prompts (the shipped movie-review openings) x 4 answers x 16 tokens (every answer exactly 16: EOS is
suppressed until then, on both sides, so both do the same work), a length reward, then 2 iterations over the 64
answers in mini-batches of 16 (8 optimizer steps), bf16 autocast where the CPU has native bf16, TRL's default
beta 0 and loss. TRL runs at its fastest setting here: gradient checkpointing off (its default is on). Each
variant is its own process (bench/interleave.py: they take turns, one step each; the first is a warm-up) and
builds a fresh trainer per step (not timed), so every step starts from the same weights. TRL's process imports
only TRL and what it depends on (a clean venv: `python3 -m venv /work/trlvenv && /work/trlvenv/bin/pip install
'trl==1.16.*' torch==2.13.0 transformers==5.24.0`); ours imports only this project.
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
os.environ.setdefault("TQDM_DISABLE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from interleave import main_child, median, paired_ratio, run_variants  # noqa: E402

PROMPTS = Path(__file__).resolve().parent.parent / "labeler" / "data" / "movie_prompts.txt"


def reward_len(completions, **kwargs):
    return [-abs(40 - len(completion)) for completion in completions]


def settings(args: argparse.Namespace) -> dict:
    """The config both trainers get (TRL 1.16's field names)."""
    return dict(per_device_train_batch_size=16, steps_per_generation=4, num_iterations=2, num_generations=4,
                max_completion_length=16, max_steps=8, learning_rate=1e-6, bf16=args.bf16, logging_steps=1000,
                save_strategy="no", report_to="none", seed=0,
                generation_kwargs={"min_new_tokens": 16}, disable_tqdm=True)


def setup(variant: str, args: argparse.Namespace):
    import torch
    from datasets import Dataset

    if args.threads:
        torch.set_num_threads(args.threads)
    # TRL's venv imports nothing from this project, ours nothing from TRL.
    if variant == "trl":
        import trl

        config_cls = getattr(trl, f"{args.trainer.upper()}Config")
        trainer_cls = getattr(trl, f"{args.trainer.upper()}Trainer")
    else:
        import rlhf

        config_cls = getattr(rlhf, f"{args.trainer.upper()}Config")
        trainer_cls = getattr(rlhf, f"{args.trainer.upper()}Trainer")
    out_dir = tempfile.mkdtemp(prefix=f"bench-{args.trainer}-{variant}-")
    if args.trainer == "kto":
        from pairs import synthetic_rows

        rows = [{"prompt": r["prompt"], "completion": r[k], "label": k == "chosen"}
                for r in synthetic_rows(16, seed=0) for k in ("chosen", "rejected")]
        data = Dataset.from_list(rows)
        values = dict(per_device_train_batch_size=8, num_train_epochs=1, max_length=256, learning_rate=1e-6,
                      bf16=args.bf16, logging_steps=1000, save_strategy="no", report_to="none", seed=0,
                      disable_tqdm=True)
        kwargs = {}
    else:
        data = Dataset.from_dict({"prompt": PROMPTS.read_text().splitlines()[:16]})
        values = settings(args)
        kwargs = {"reward_funcs": reward_len}
    values["activation_checkpointing"] = False  # transformers 5.x's name; TRL turns it on by default
    if variant == "trl":
        values["use_cpu"] = not torch.cuda.is_available()  # bf16 autocast on CPU needs it (ours sets it itself)
    config = config_cls(output_dir=out_dir, **values)
    holder = {}

    def step(i: int) -> dict:
        holder.clear()
        gc.collect()
        trainer = holder["trainer"] = trainer_cls(model=args.model, args=config, train_dataset=data, **kwargs)
        start, cpu_start = time.perf_counter(), time.process_time()
        trainer.train()
        return {"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu_start}

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainer", choices=["grpo", "rloo", "kto"], default="grpo")
    parser.add_argument("--model", default="", help="model folder (default: the default model's converted folder)")
    parser.add_argument("--no-bf16", dest="bf16", action="store_false", help="fp32 on both sides")
    parser.add_argument("--threads", type=int, default=0, help="torch threads per process (0: torch's default)")
    parser.add_argument("--rounds", type=int, default=3, help="timed steps per variant after one warm-up")
    parser.add_argument("--trl-python", default="", help="a Python with TRL 1.16 installed (see the docstring)")
    parser.add_argument("--child", choices=["ours", "trl"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not args.model:
        from rlhf.loading import default_model_path

        args.model = str(default_model_path())
        sys.argv += ["--model", args.model]
    if args.child:
        main_child(lambda: setup(args.child, args))
        return
    work = "32 unpaired rows, batches of 8, one epoch" if args.trainer == "kto" else \
        "16 prompts x 4 answers x 16 tokens, 2 iterations of mini-batches of 16"
    print(f"{args.trainer.upper()} step: {work}, {'bf16' if args.bf16 else 'fp32'}, {args.rounds} rounds", flush=True)
    child_args = [a for a in sys.argv[1:]]
    script = str(Path(__file__).resolve())
    commands = {"ours": [sys.executable, script, "--child", "ours", *child_args]}
    if args.trl_python:
        commands["trl"] = [args.trl_python, script, "--child", "trl", *child_args]
    results, peaks = run_variants(commands, args.rounds)
    for name in commands:
        print(f"{name}: median {median(results[name], 'seconds'):.2f} s per step, peak RSS {peaks[name]:.0f} MB")
    if "trl" in commands:
        print(f"ours vs TRL 1.16: {paired_ratio(results['trl'], results['ours'], 'seconds'):.2f}x faster "
              f"(median of per-round ratios), memory {peaks['ours'] / peaks['trl']:.2f}x")


if __name__ == "__main__":
    main()
