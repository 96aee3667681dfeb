"""The demo's reward model: held-out pairwise accuracy per training variant and seed, on one fixed set of labels.

    python bench/reward_accuracy.py          # builds the labels (~1 min), then 3 seeds x every variant
    python bench/reward_accuracy.py --db labels.db --variants demo,lp-ft --seeds 0,1,2,3

The labels are the demo's steps 1-3 (labeler/services/training/demo.py): the shipped movie openings, 8 answers of the
default policy per training prompt, ranked in one label by the simulated annotator (VADER of the answer, answers
within 0.1 of their group's best tied). Every variant trains MiniLM as the demo does (360 steps at 1e-4, batch 16,
10% warm-up) on the same training pairs and is scored on the same held-out pairs (the demo's split by prompt), so
the figures differ only by the variant and the seed. One run's accuracy moves by about +-0.02 with the seed alone:
compare means over seeds. Printed per variant: each seed's accuracy, the mean, and the mean's difference to the
demo's setting measured in the same run; for the demo setting, accuracy by the pair's VADER difference.

Variants:
- demo: what `rlhf-studio demo` trains ([CLS] pooler over prompt + answer as a text pair, dropout off);
- answer-alone: the answer without its prompt (VADER reads the answer alone);
- zero-head: the score head starts at zero, so the first steps move the head alone;
- lp-ft: a linear probe first (the head alone, 100 steps at 1e-3), then everything (360 more steps), as in
  Kumar et al. 2022, "Fine-Tuning can Distort Pretrained Features".
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VARIANTS = ("demo", "answer-alone", "zero-head", "lp-ft")
PROBE_STEPS, PROBE_RATE = 100, 1e-3
BUCKETS = ((0.0, 0.1), (0.1, 0.2), (0.2, 0.3), (0.3, 0.5), (0.5, 0.8), (0.8, 9.0))


def build_labels(db_path: str) -> None:
    """The demo's steps 1-3 into a fresh database (project 'demo')."""
    from labeler.services.training import demo
    from storage import open_db

    settings, db = demo.DemoSettings(), open_db(db_path)
    _, train = demo.generate_training_answers(db, settings)
    demo.simulate_annotator(db, demo.DEMO_PROJECT, settings.noise, settings.seed, train)


def load_split(db_path: str):
    """(train rows, held-out rows) exactly as the demo's reward-model run splits them."""
    from labeler.services.training.runners import common
    from labeler.services.training.demo import DEMO_PROJECT, RM_TEST_SIZE, DemoSettings
    from labeler.services.labels.export import ExportOptions, preference_rows
    from storage import open_db

    seed = DemoSettings().seed
    rows = preference_rows(open_db(db_path), DEMO_PROJECT, ExportOptions(seed=seed))
    return common.split_rows(rows, RM_TEST_SIZE, seed)


def train_and_score(variant: str, seed: int, train, test, encoder: str):
    """(held-out accuracy, per-pair correctness) of one reward model."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from labeler.services.training.demo import RM_BATCH_SIZE, DemoSettings
    from rlhf.loading import load_tokenizer
    from rlhf.reward import RewardConfig, RewardTrainer

    demo = DemoSettings()
    rm_steps, learning_rate, warmup = demo.rm_steps, demo.rm_learning_rate, max(1, demo.rm_steps // 10)
    if variant == "answer-alone":
        train, test = (data.map(lambda row: {"prompt": ""}) for data in (train, test))
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(encoder, num_labels=1)
    steps = rm_steps + (PROBE_STEPS if variant == "lp-ft" else 0)
    optimizers = (None, None)
    if variant == "zero-head":
        torch.nn.init.zeros_(model.classifier.weight)
        torch.nn.init.zeros_(model.classifier.bias)
    if variant == "lp-ft":
        head = list(model.classifier.parameters())
        body = [p for name, p in model.named_parameters() if not name.startswith("classifier")]
        optimizer = torch.optim.AdamW([{"params": body}, {"params": head}], lr=learning_rate, weight_decay=0.0)

        def fine_tune(step: int) -> float:  # zero while probing, then the demo's warm-up and linear decay
            step -= PROBE_STEPS
            return 0.0 if step < 0 else min(1.0, (step + 1) / warmup) * max(0.0, (rm_steps - step) / rm_steps)

        def probe(step: int) -> float:
            return PROBE_RATE / learning_rate if step < PROBE_STEPS else fine_tune(step)

        optimizers = (optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, [fine_tune, probe]))
    args = RewardConfig(output_dir="/tmp/reward_accuracy_bench", max_steps=steps,
                        per_device_train_batch_size=RM_BATCH_SIZE, learning_rate=learning_rate, warmup_steps=warmup,
                        bf16=demo.bf16, seed=seed, data_seed=seed,
                        report_to="none", save_strategy="no", logging_steps=10_000, disable_tqdm=True,
                        save_score_stats=False)
    trainer = RewardTrainer(model, args=args, train_dataset=train, eval_dataset=test,
                            processing_class=load_tokenizer(encoder, padding_side="right"), optimizers=optimizers)
    trainer.train()
    predictions = trainer.predict(trainer.eval_dataset).predictions  # (pairs, 2): chosen, rejected
    correct = [bool(chosen > rejected) for chosen, rejected in predictions]
    return sum(correct) / len(correct), correct


def by_vader_difference(test, correct: list[bool]) -> str:
    from rlhf.rewards import vader_answer

    prompts = list(test["prompt"])
    chosen, rejected = vader_answer(prompts, list(test["chosen"])), vader_answer(prompts, list(test["rejected"]))
    parts = []
    for low, high in BUCKETS:
        hits = [ok for ok, c, r in zip(correct, chosen, rejected) if low <= c - r < high]
        if hits:
            parts.append(f"{low}-{high if high < 9 else 'up'}: {sum(hits) / len(hits):.2f} ({len(hits)})")
    return ", ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="", help="a database with the demo's labels (built there when missing)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, from {', '.join(VARIANTS)}")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (head initialisation, data order)")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {', '.join(unknown)} (choose from {', '.join(VARIANTS)})")
    if "demo" not in variants:
        variants.insert(0, "demo")  # the baseline every difference is measured against
    seeds = [int(s) for s in args.seeds.split(",") if s]
    db_path = args.db or "/tmp/reward_accuracy_bench.db"
    if not Path(db_path).exists():
        started = time.monotonic()
        build_labels(db_path)
        print(f"labels built in {db_path} ({time.monotonic() - started:.0f} s)", flush=True)
    from labeler.services.serving.models import resolve
    from storage import open_db

    encoder = resolve(open_db(db_path), "default-encoder")
    train, test = load_split(db_path)
    print(f"# {len(train)} training pairs, {len(test)} held-out pairs (split by prompt); seeds {seeds}", flush=True)
    means = {}
    for variant in variants:  # accuracy does not depend on speed, so the runs need no interleaving
        accuracies = []
        for seed in seeds:
            started = time.monotonic()
            accuracy, correct = train_and_score(variant, seed, train, test, encoder)
            accuracies.append(accuracy)
            print(f"{variant:<13} seed {seed}: {accuracy:.3f} ({time.monotonic() - started:.0f} s)", flush=True)
            if variant == "demo" and seed == seeds[0]:
                print(f"  by VADER difference of the pair: {by_vader_difference(test, correct)}", flush=True)
        means[variant] = statistics.fmean(accuracies)
    print("\n| variant | mean accuracy | vs demo |\n| --- | --- | --- |")
    for variant, mean in means.items():
        print(f"| {variant} | {mean:.3f} | {mean - means['demo']:+.3f} |")


if __name__ == "__main__":
    main()
