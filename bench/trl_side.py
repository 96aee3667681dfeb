"""TRL's side of the benches: run by a Python that has TRL installed (not this project's), as one variant
of bench/interleave.py, taking its turns with ours. It imports neither rlhf nor the project's packages, only
the stdlib helpers bench/interleave.py and bench/pairs.py, and is told the model folders on its command line.

    ppo     TRL 0.11.4's PPOTrainer (venv: trl==0.11.4): the IMDB notebook's loop (one generate per query,
            fp32), or its fastest setting (--generation-batch-size B: B queries per generate call; --bf16:
            accelerate's bf16 mixed precision, TRL's own switch, PPOConfig(accelerator_kwargs=...))
    dpo     TRL 1.x DPOTrainer, bf16 autocast, reference log-probs precomputed, gradient checkpointing off
            (TRL 1.x turns it on by default; off is its fastest setting)
    reward  TRL 1.x RewardTrainer on the MiniLM encoder, fp32 or bf16, gradient checkpointing off likewise

Each iteration times the same work as ours (see the bench that starts it): training from the first batch
to the last optimizer step, with the reference pass included for DPO; building the trainer and loading the
model are left out. Peak RSS is this process's own (interleave.main_child).
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TQDM_DISABLE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from interleave import main_child  # noqa: E402
from pairs import synthetic_rows  # noqa: E402


def load_tokenizer(path: str):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    try:
        return AutoTokenizer.from_pretrained(path)
    except ValueError:  # transformers 4.x does not know the "TokenizersBackend" class that 5.x writes
        return PreTrainedTokenizerFast.from_pretrained(path)


def setup_ppo(args: argparse.Namespace):
    import torch
    from trl import AutoModelForCausalLMWithValueHead, PPOConfig, PPOTrainer
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    if args.threads:
        torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer(args.model)
    tokenizer.pad_token = tokenizer.eos_token  # as the notebook does
    model = AutoModelForCausalLMWithValueHead.from_pretrained(args.model)
    config = PPOConfig(batch_size=args.batch_size, mini_batch_size=args.mini_batch_size, ppo_epochs=args.ppo_epochs,
                       learning_rate=args.learning_rate, seed=0,
                       accelerator_kwargs={"mixed_precision": "bf16"} if args.bf16 else {})
    trainer = PPOTrainer(config, model, None, tokenizer)
    vader = SentimentIntensityAnalyzer()
    lines = Path(args.prompts).read_text().splitlines()
    n_prompts = args.batch_size // args.answers_per_prompt
    # The notebook's sampling settings; min_new_tokens makes every response as long as ours.
    generation = {"top_k": 0.0, "top_p": 1.0, "do_sample": True, "pad_token_id": tokenizer.eos_token_id,
                  "max_new_tokens": args.max_new_tokens, "min_new_tokens": args.max_new_tokens}

    def iteration(i: int) -> dict:
        # the same prompts, in the same order, as bench/ppo_step.py's iteration i
        texts = [lines[(i * n_prompts + k) % len(lines)] for k in range(n_prompts) for _ in range(args.answers_per_prompt)]
        queries = [tokenizer(t, return_tensors="pt").input_ids[0] for t in texts]
        t0, c0 = time.perf_counter(), time.process_time()
        if args.generation_batch_size > 1:
            responses = trainer.generate(queries, batch_size=args.generation_batch_size, return_prompt=False, **generation)
        else:  # the notebook: one query at a time
            responses = [trainer.generate(q, **generation).squeeze()[-args.max_new_tokens:] for q in queries]
        t1 = time.perf_counter()
        answers = tokenizer.batch_decode(responses, skip_special_tokens=True)
        scores = [torch.tensor(vader.polarity_scores(q + a)["compound"]) for q, a in zip(texts, answers)]
        t2 = time.perf_counter()
        trainer.step(queries, responses, scores)
        t3 = time.perf_counter()
        return {"generate": t1 - t0, "score": t2 - t1, "step": t3 - t2, "total": t3 - t0,
                "cpu_total": time.process_time() - c0}

    return iteration


def setup_dpo(args: argparse.Namespace):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    if args.threads:
        torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    rows = synthetic_rows(args.pairs, seed=0)
    config = DPOConfig(
        output_dir=tempfile.mkdtemp(prefix="bench-trl-dpo-"), per_device_train_batch_size=args.batch_size,
        precompute_ref_log_probs=True, precompute_ref_batch_size=args.ref_batch_size, max_length=args.max_length,
        num_train_epochs=1, learning_rate=1e-6, bf16=args.bf16, use_cpu=True, save_strategy="no", logging_steps=1000,
        disable_tqdm=True, report_to="none", seed=0, gradient_checkpointing=args.gradient_checkpointing,
    )
    # TRL 1.x runs the reference pass inside DPOTrainer(...): time it there and add it to train()'s time.
    precompute = DPOTrainer._precompute_ref_logps
    spent = {}

    def timed_precompute(self, *a, **k):
        start, cpu_start = time.perf_counter(), time.process_time()
        try:
            return precompute(self, *a, **k)
        finally:
            spent["seconds"], spent["cpu"] = time.perf_counter() - start, time.process_time() - cpu_start

    DPOTrainer._precompute_ref_logps = timed_precompute
    holder = {}

    def epoch(i: int) -> dict:
        holder.clear()
        gc.collect()
        model = AutoModelForCausalLM.from_pretrained(args.model)
        data = Dataset.from_list(rows)
        data._fingerprint = uuid.uuid4().hex  # TRL caches reference log-probs on disk by fingerprint: no cache hits
        trainer = holder["trainer"] = DPOTrainer(model, args=config, train_dataset=data, processing_class=tokenizer)
        start, cpu_start = time.perf_counter(), time.process_time()
        trainer.train()
        return {"seconds": time.perf_counter() - start + spent["seconds"],
                "cpu": time.process_time() - cpu_start + spent["cpu"]}

    return epoch


def setup_reward(args: argparse.Namespace):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from trl import RewardConfig, RewardTrainer

    if args.threads:
        torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    data = Dataset.from_list(synthetic_rows(args.pairs, seed=0))
    config = RewardConfig(
        output_dir=tempfile.mkdtemp(prefix="bench-trl-rm-"), per_device_train_batch_size=args.batch_size,
        max_length=args.max_length, num_train_epochs=1, learning_rate=5e-5, bf16=args.bf16, use_cpu=True,
        save_strategy="no", logging_steps=1000, disable_tqdm=True, report_to="none", seed=0,
        gradient_checkpointing=args.gradient_checkpointing,
        eos_token=tokenizer.eos_token or tokenizer.sep_token,  # MiniLM has no EOS; TRL appends this one to each text
    )
    holder = {}

    def epoch(i: int) -> dict:
        holder.clear()
        gc.collect()
        model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=1)
        trainer = holder["trainer"] = RewardTrainer(model, args=config, train_dataset=data, processing_class=tokenizer)
        start, cpu_start = time.perf_counter(), time.process_time()
        trainer.train()
        return {"seconds": time.perf_counter() - start, "cpu": time.process_time() - cpu_start}

    return epoch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work", choices=["ppo", "dpo", "reward"])
    parser.add_argument("--model", required=True, help="model folder (the bench passes ours)")
    parser.add_argument("--prompts", help="PPO: one prompt per line")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--mini-batch-size", type=int, default=4)
    parser.add_argument("--ppo-epochs", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--generation-batch-size", type=int, default=1, help="PPO: 1 is the notebook's loop")
    parser.add_argument("--answers-per-prompt", type=int, default=1, help="PPO: answers per prompt, as ours samples")
    parser.add_argument("--learning-rate", type=float, default=1.41e-5, help="PPO: the notebook's")
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--ref-batch-size", type=int, default=16)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--bf16", action="store_true", help="bf16 mixed precision (PPO: accelerate's, as TRL 0.11 takes it)")
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="TRL 1.x's default; off (the faster setting) unless given")
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    setup = {"ppo": setup_ppo, "dpo": setup_dpo, "reward": setup_reward}[args.work]
    main_child(lambda: setup(args))


if __name__ == "__main__":
    main()
