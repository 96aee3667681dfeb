"""Run benchmark variants in their own processes, one iteration at a time, taking turns.

Why: on a shared machine the speed of memory and cores drifts by 2x within minutes. Timing variant A for a
minute and then variant B compares two different machines. Here every variant lives in its own process (so
peak RSS is its own), all are loaded first, and then they take turns, one iteration each, in ABBA order, so
drift hits all of them alike. The figure to read is the median of the per-round ratios.

A benchmark script provides `setup(variant, args) -> iteration(i) -> dict of floats` and calls `main_child`
when started with `--child VARIANT`; the parent calls `run_variants`.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

READY, RESULT, PEAK = "READY", "RESULT ", "PEAK "


def main_child(setup: Callable[[], Callable[[int], dict]]) -> None:
    """Child side: build the variant, then run one iteration per 'run I' line on stdin."""
    iteration = setup()
    print(READY, flush=True)
    for line in sys.stdin:
        command = line.split()
        if command[0] == "run":
            print(RESULT + json.dumps(iteration(int(command[1]))), flush=True)
        elif command[0] == "quit":
            break
    print(PEAK + json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), flush=True)  # KiB -> MiB


def run_from_command_line(parser: argparse.ArgumentParser, variants: dict, setup, script: str,
                          gigabytes_each: float, headline, trl_variants=None, adjust=None) -> tuple | None:
    """A benchmark's main(): in a child, serve its variant (returns None); in the parent, run the chosen
    variants and return (args, variant names, {variant: results}, {variant: peak RSS MiB}).

    Adds --rounds, --ablations, --variants, --trl-python and the hidden --child to the script's own parser;
    setup(variant, args) builds one iteration; headline(args) is printed before the rounds start.
    trl_variants(args) -> {name: arguments of bench/trl_side.py}: with --trl-python, each of these runs as
    one more variant, in that Python (a venv with TRL installed), taking its turns with ours.
    adjust(args), when given, fills in arguments that depend on others (a recipe's sizes), in parent and child.
    --only A,B,... runs just those variants (no optimised and naive), A first: the script's ratios are to A.
    """
    ablations = [v for v in variants if v.startswith("no-")]
    parser.add_argument("--rounds", type=int, default=3, help="timed iterations per variant after one warm-up")
    parser.add_argument("--ablations", action="store_true",
                        help=f"also run the optimised path with each lever off (one process, ~{gigabytes_each:g} GB, per variant)")
    parser.add_argument("--variants", default="", help="comma-separated variants to run besides optimised and naive "
                        f"({', '.join(ablations)}); each holds its own model in memory")
    if trl_variants is not None:
        parser.add_argument("--trl-python", default="", help="a Python with TRL installed (see README): also run "
                            "TRL's trainer on the same data, in the same rounds, and print our ratio to it")
    parser.add_argument("--only", default="", help="comma-separated variants to run instead of optimised and "
                        "naive, the first being the baseline of the ratios")
    parser.add_argument("--child", choices=sorted(variants), help=argparse.SUPPRESS)
    args, _ = parser.parse_known_args()
    if adjust is not None:
        adjust(args)
    if args.child:
        main_child(lambda: setup(args.child, args))
        return None
    extra = ablations if args.ablations else [v for v in args.variants.split(",") if v]
    unknown = [v for v in extra if v not in variants]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {sorted(variants)}")
    chosen = ["optimised", "naive"] + [v for v in extra if v not in ("optimised", "naive")]
    if args.only:
        chosen = list(dict.fromkeys(v for v in args.only.split(",") if v))
        unknown = [v for v in chosen if v not in variants]
        if unknown or not chosen:
            parser.error(f"--only: unknown variants {unknown}; choose from {sorted(variants)}")
    print(headline(args), flush=True)
    child_args = [a for a in sys.argv[1:] if a != "--ablations"]  # a child runs only its own variant
    commands = {name: [sys.executable, script, "--child", name, *child_args] for name in chosen}
    if trl_variants is not None and args.trl_python:
        trl_side = str(Path(__file__).resolve().parent / "trl_side.py")
        for name, trl_args in trl_variants(args).items():
            commands[name] = [args.trl_python, trl_side, *trl_args]
            chosen.append(name)
    results, peaks = run_variants(commands, args.rounds)
    return args, chosen, results, peaks


def _read_until(child: subprocess.Popen, prefix: str, name: str) -> str:
    for line in child.stdout:
        if line.startswith(prefix):
            return line[len(prefix):].strip()
    raise SystemExit(f"variant {name} exited without '{prefix.strip()}' (return code {child.wait()}); its stderr is above")


def run_variants(commands: dict[str, list[str]], rounds: int) -> tuple[dict, dict]:
    """Start one child per {variant: command line}; ({variant: [result per round]}, {variant: peak RSS MiB}).
    Iteration 0 warms up and is dropped."""
    variants = list(commands)
    children = {}
    for name in variants:
        children[name] = subprocess.Popen(commands[name], text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        _read_until(children[name], READY, name)  # load one at a time: loading is not what we time
    results = {name: [] for name in variants}
    for round_number in range(rounds + 1):
        order = variants if round_number % 2 == 0 else list(reversed(variants))
        for name in order:
            children[name].stdin.write(f"run {round_number}\n")
            children[name].stdin.flush()
            result = json.loads(_read_until(children[name], RESULT, name))
            if round_number > 0:
                results[name].append(result)
                figures = ", ".join(f"{k} {v:.2f}" for k, v in result.items())
                print(f"  round {round_number} {name}: {figures}", flush=True)
    peaks = {}
    for name, child in children.items():
        child.stdin.write("quit\n")
        child.stdin.flush()
        peaks[name] = float(_read_until(child, PEAK, name))
        child.wait()
    return results, peaks


def median(results: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in results)


def paired_ratio(baseline: list[dict], candidate: list[dict], key: str) -> float:
    """Median over rounds of baseline/candidate: how many times faster the candidate is, round by round."""
    return statistics.median(b[key] / c[key] for b, c in zip(baseline, candidate))


def print_against_trl(results: dict, peaks: dict, ours: str, trl: str, what: str, target: float) -> None:
    """One line: our variant `ours` against the TRL variant `trl` of the same run (pairs/s and CPU time as medians
    of per-round ratios, peak RSS); `what` names the trainer and the setting compared."""
    mine, theirs = results[ours], results[trl]
    print(f"ours vs TRL's {what}, median of per-round ratios: x{paired_ratio(theirs, mine, 'seconds'):.2f} pairs/s "
          f"(target >= {target}), x{paired_ratio(theirs, mine, 'cpu'):.2f} cpu time; peak RSS {peaks[ours]:.0f} MB "
          f"vs {peaks[trl]:.0f} MB: x{peaks[ours] / peaks[trl]:.2f} (target <= 1)")
