"""How well a project's reward models order held-out answers as the task's own judge does: the check behind the
reward model's default passes (labeler/services/settings/training_stages/rm.py), on a folder bench/own_task.py kept.

    python bench/reward_vs_judge.py --keep out/ --task formal rm-run1 rm-e3

The answers are every distinct answer the project's stored evaluations hold (held-out prompts, never labelled
or trained on: the base's and each tuned model's), grouped by prompt. Every two answers to the same prompt whose
judge scores differ by more than --margin (the simulated people's tie margin) make a pair; a reward model is
right on a pair when it orders it as the judge does. Printed per reward model: pairs, that accuracy, and the
Spearman correlation of its scores with the judge's over all the answers. A reward model's own eval split (a
tenth of about 300 training pairs) is too small to tell such models apart; a few hundred held-out pairs can.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.tasks import TASKS  # noqa: E402


def heldout_answers(db) -> list[dict]:
    """Each distinct (prompt, answer) of the stored evaluations, first seen first."""
    from labeler.services.evals import evaluation

    seen, rows = set(), []
    for stored in evaluation.list_evaluations(db, limit=10_000):
        for sample in stored.samples:
            key = (json.dumps(sample["prompt"]), sample["answer"])
            if key not in seen:
                seen.add(key)
                rows.append(sample)
    return rows


def ordered_pairs(prompts: list, judge_scores: list[float], margin: float) -> list[tuple[int, int]]:
    """(better, worse) index pairs: answers to the same prompt whose judge scores differ by more than `margin`."""
    by_prompt: dict[str, list[int]] = {}
    for index, prompt in enumerate(prompts):
        by_prompt.setdefault(json.dumps(prompt), []).append(index)
    pairs = []
    for indices in by_prompt.values():
        for a, b in itertools.combinations(indices, 2):
            if abs(judge_scores[a] - judge_scores[b]) > margin:
                pairs.append((a, b) if judge_scores[a] > judge_scores[b] else (b, a))
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", required=True, help="the folder bench/own_task.py --keep wrote")
    parser.add_argument("--task", required=True, choices=sorted(TASKS))
    parser.add_argument("--margin", type=float, default=0.05, help="judge scores within this are a tie (no pair)")
    parser.add_argument("models", nargs="+", help="reward models of the project, by registry name")
    args = parser.parse_args()

    from scipy.stats import spearmanr

    from labeler.services.evals.reward_inspect import load_scorer
    from storage.db import open_db

    db = open_db(Path(args.keep) / args.task / "studio.db")
    rows = heldout_answers(db)
    if not rows:
        raise SystemExit(f"{args.keep}: the project holds no stored evaluation (run a policy first)")
    prompts, answers = [row["prompt"] for row in rows], [row["answer"] for row in rows]
    judge_scores = [float(s) for s in TASKS[args.task].judge()(prompts, answers)]
    pairs = ordered_pairs(prompts, judge_scores, args.margin)
    print(f"{len(answers)} held-out answers, {len(pairs)} pairs the judge orders (margin {args.margin})")
    print("| reward model | pairs ordered as the judge does | Spearman with the judge |\n|---|---|---|")
    for name in args.models:
        scores = load_scorer(db, name)(prompts, answers)
        right = sum(scores[better] > scores[worse] for better, worse in pairs)
        print(f"| {name} | {right / len(pairs):.3f} ({right}/{len(pairs)}) | "
              f"{spearmanr(scores, judge_scores).correlation:.3f} |", flush=True)


if __name__ == "__main__":
    main()
