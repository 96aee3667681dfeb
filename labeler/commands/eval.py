"""`rlhf-studio eval`: sample answers from one or more models on held-out prompts, score them, print the metrics
side by side and store them (table `evaluations`; labeler/services/evals/evaluation.py does the work)."""
from __future__ import annotations

import argparse

from labeler.commands import database
from labeler.commands.generate import passive_omp_threads
from labeler.services.evals import evaluation
from labeler.services.training import hub
from labeler.services.evals.evaluation import HELDOUT, EvalSettings


def register(subparsers, common: argparse.ArgumentParser) -> None:
    defaults = EvalSettings()
    parser = subparsers.add_parser(
        "eval", parents=[common], help="evaluate models on held-out prompts: score, win rate vs base, KL, length, distinct-2",
        description=(
            "Sample answers from each model and from its base on the same prompts (the project's held-out split "
            "'test' by default), score them with the project's measure, and print per model: mean score, win "
            "rate against its base (ties half, 95% interval), share of answers above the threshold, "
            "mean KL to the model's base (nats per answer; its registered base_model, 'default' otherwise; a folder "
            "in a run's output, such as a checkpoint, takes the run's base; a base model is its own), mean answer length in tokens and distinct-2, then a few answers side by side. "
            "Every result is stored in the database."
        ),
    )
    parser.add_argument("--model", action="append", required=True, metavar="NAME",
                        help="a registered model, 'default' or a model folder, e.g. a run's checkpoint (repeat to compare several)")
    parser.add_argument("--prompts", default=HELDOUT, metavar="heldout|FILE",
                        help="'heldout': the project's prompts in split 'test' (default); or a prompt file "
                             "(CSV, JSONL, .txt, Parquet, ... as `prompts import` reads)")
    parser.add_argument("--reward", "--measure", dest="reward", default=defaults.reward,
                        metavar="vader|rm:NAME|module:function",
                        help="the measure (default: the project's, `projects set --measure`; else people's blind "
                             "comparisons once someone has labelled the project, which judge only a finished run's "
                             "pairs; else its newest reward model); 'vader': VADER compound of the answer alone; 'vader-with-prompt'; 'rm:NAME': a "
                             "registered reward model; module:function taking (prompts, answers) and returning "
                             "floats (the same spec as `train ppo --set reward=...`)")
    parser.add_argument("--samples", type=int, default=defaults.samples,
                        help=f"answers per prompt (default: {defaults.samples})")
    parser.add_argument("--max-new-tokens", type=int, default=defaults.max_new_tokens,
                        help="tokens per answer (default: the project's answer length)")
    parser.add_argument("--threshold", type=float, default=defaults.threshold,
                        help=f"an answer is positive when its reward is above this (default: {defaults.threshold})")
    parser.add_argument("--seed", type=int, default=defaults.seed, help=f"sampling seed (default: {defaults.seed})")
    parser.add_argument("--bf16", action="store_true", help="generate under bf16 autocast (KL stays float32)")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size,
                        help=f"answers generated together (default: {defaults.batch_size})")
    parser.add_argument("--examples", type=int, default=3, help="prompts shown with each model's answer (default: 3)")
    parser.set_defaults(func=run_eval)


def run_eval(args: argparse.Namespace) -> int:
    passive_omp_threads()

    settings = EvalSettings(prompts=args.prompts, reward=args.reward, samples=args.samples,
                            max_new_tokens=args.max_new_tokens, threshold=args.threshold, seed=args.seed,
                            bf16=args.bf16, batch_size=args.batch_size)
    with database(args.db) as db:
        results = evaluation.evaluate_models(db, args.model, settings, project=args.project,
                                             log=lambda line: print(line, flush=True), with_bases=True)
        hub.write_model_cards(db, [result.model for result in results])  # their evaluation tables gain a row
    print()
    print(evaluation.format_report(results, examples=args.examples))
    with database(args.db) as db:
        for line in evaluation.verdict_lines(db, results):
            print(line)
    return 0
