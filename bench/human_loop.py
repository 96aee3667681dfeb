"""People in the loop: the default PPO run on the shipped task with rewards from five simulated annotators at a
person's pace, against the same run with the function reward, on the same machine, one after the other.

    python bench/human_loop.py                      # both runs, defaults (~2 x 15 min on a CPU with bf16)
    python bench/human_loop.py --skip-function      # the human run alone
    python bench/human_loop.py --set steps=10       # shorter runs (any train --set applies to both)
    python bench/human_loop.py --seeds 0,1,2 --tie-margins 0.05,0.1 --skip-function   # is the recipe robust?

1. human: a real server (`rlhf-studio serve`) on another fresh database, `rlhf-studio train ppo --set reward=mix
   --wait` (the defaults otherwise: each batch's least certain quarter of answer groups ranked by people, the
   online reward model learning from each ranking and scoring the rest), and `--annotators` simulated annotators
   (bench/simulated_annotators.py: VADER of the answer, ties within 0.1) labelling whatever the run asks through
   the web API, one label per `--pace` seconds each. They never touch the database.
2. function: `rlhf-studio train ppo --set reward=function --wait` on a fresh database with the shipped prompts.

Printed per run: wall time (the whole `train --wait`, evaluation included), the run's before/after evaluation on
the held-out prompts (positive share: VADER compound > 0.5; KL to the base in nats per answer; distinct-2), and
for the human run: answers judged by people (a ranking of 4 counts as 4), labels, the trainer's share of time
waiting for people, and the online reward model's agreement with each new label before training on it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from annotators import Server  # noqa: E402
from simulated_annotators import WebAnnotator, add_users, run_team  # noqa: E402


def fresh_database(path: Path) -> None:
    subprocess.run([sys.executable, "-m", "labeler", "prompts", "import-shipped", "--db", str(path), "--create-db"],
                   check=True, stdout=subprocess.DEVNULL)


def train(db: Path, settings: list[str], log: Path) -> tuple[int, float]:
    """`train ppo --wait`; returns (run id, wall seconds)."""
    command = [sys.executable, "-m", "labeler", "train", "ppo", "--db", str(db), "--wait"]
    for setting in settings:
        command += ["--set", setting]
    start = time.perf_counter()
    with open(log, "w") as out:
        subprocess.run(command, check=True, stdout=out, stderr=subprocess.STDOUT)
    from storage import open_db

    handle = open_db(str(db), migrate=False)
    run_id = handle.execute("SELECT MAX(id) FROM runs").fetchone()[0]
    handle.conn.close()
    return run_id, time.perf_counter() - start


def report(db: Path, run_id: int, wall: float, label: str) -> dict:
    from labeler.services import evaluation, run_metrics, runs
    from storage import open_db

    handle = open_db(str(db), migrate=False)
    run = runs.get_run(handle, run_id)
    before, after = evaluation.run_comparison(handle, run_id)
    names = ["human/answers_judged", "human/labels_used", "human/wait_seconds", "rm_online/agreement",
             "objective/kl", "objective/kl_coef"]
    frame = run_metrics.metrics_frame(handle, run_id, names)
    series = {name: rows.sort_values("step")["value"].tolist() for name, rows in frame.groupby("name")}
    handle.conn.close()
    out = {"label": label, "status": run.status, "steps": run.step, "wall_s": wall,
           "before": before.metrics if before else {}, "after": after.metrics if after else {}, "series": series}
    print(f"\n{label}: run {run_id} {run.status}, {run.step} steps, {wall / 60:.1f} min", flush=True)
    for name, metrics in (("before", out["before"]), ("after", out["after"])):
        if metrics:
            print(f"  {name:<6} positive {metrics['eval/positive_share']:.0%}  KL {metrics.get('eval/kl', 0):.2f}  "
                  f"distinct-2 {metrics['eval/distinct_2']:.3f}  reward {metrics['eval/reward_mean']:.3f}")
    if series.get("objective/kl"):
        kl, beta = series["objective/kl"], series.get("objective/kl_coef", [])
        print(f"  training KL by step: {' '.join(f'{v:.1f}' for v in kl)}")
        if beta:
            print(f"  kl_coef: first {beta[0]:.4f}, last {beta[-1]:.4f}")
    if series.get("human/answers_judged"):
        judged, labels = series["human/answers_judged"][-1], series["human/labels_used"][-1]
        waited = series["human/wait_seconds"][-1]
        agreement = series.get("rm_online/agreement", [])
        print(f"  answers judged by people: {judged:.0f} ({labels:.0f} labels); waiting for people {waited:.0f} s = "
              f"{waited / wall:.0%} of the run")
        if agreement:
            print(f"  online reward model's agreement with new labels, by refit: "
                  f"{' '.join(f'{a:.2f}' for a in agreement)}")
    return out


def human_run(work: Path, args, seed: int, margin: float) -> dict:
    """One run with people in the loop: a fresh database and server, the team ranking at `margin`, PPO with
    `reward=mix` and `seed`."""
    tag = f"seed{seed}-margin{margin:g}"
    db = work / f"human-{tag}.db"
    fresh_database(db)
    users = [f"annotator{i}" for i in range(args.annotators)]
    add_users(str(db), users)
    server = Server(str(db), str(work / f"server-{tag}.log"))
    stop = threading.Event()
    team = [WebAnnotator(server.url, name, pace=args.pace, margin=margin) for name in users]
    threads = run_team(team, ("ranking", "rating"), stop)
    try:
        run_id, wall = train(db, ["reward=mix", f"seed={seed}", *args.set], work / f"human-train-{tag}.log")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        server.close()
    result = report(db, run_id, wall, f"human reward ({args.annotators} annotators, {args.pace} s/label, "
                                      f"seed {seed}, ties within {margin:g})")
    judged = sum(a.answers_judged for a in team)
    print(f"  annotators' own count: {judged} answers judged in {sum(sum(a.labels.values()) for a in team)} labels")
    return {**result, "seed": seed, "margin": margin, "judged_by_team": judged}


def print_sweep(results: list[dict], target: float, budget: int) -> None:
    """One line per (seed, tie margin): held-out positive share, KL, answers judged, and whether the recipe held."""
    print(f"\n{'seed':>4} | {'ties':>5} | {'positive':>8} | {'KL':>5} | {'judged':>6} | target >= {target:.0%} with <= {budget}")
    for r in results:
        after = r["after"]
        share, judged = after.get("eval/positive_share"), r["judged_by_team"]
        met = share is not None and share >= target and judged <= budget
        print(f"{r['seed']:>4} | {r['margin']:>5g} | {share if share is None else f'{share:.0%}':>8} | "
              f"{after.get('eval/kl', float('nan')):5.2f} | {judged:>6} | {'met' if met else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--annotators", type=int, default=5)
    parser.add_argument("--pace", type=float, default=2.0, help="seconds each annotator takes per label")
    parser.add_argument("--set", action="append", default=[], help="a train setting for both runs (key=value)")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds: one human run each (e.g. 0,1,2)")
    parser.add_argument("--tie-margins", default="0.1",
                        help="comma-separated tie margins of the simulated people: answers within this of their "
                             "group's best VADER score tie (e.g. 0.05,0.1); one human run per seed and margin")
    parser.add_argument("--target", type=float, default=0.8, help="held-out positive share each run must reach")
    parser.add_argument("--budget", type=int, default=800, help="most answers people may judge per run")
    parser.add_argument("--skip-function", action="store_true")
    parser.add_argument("--keep", default="", help="folder for the databases and logs")
    args = parser.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="human-loop-"))
    work.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    margins = [float(m) for m in args.tie_margins.split(",") if m.strip()]
    results = [human_run(work, args, seed, margin) for seed in seeds for margin in margins]
    if len(results) > 1:
        print_sweep(results, args.target, args.budget)

    if not args.skip_function:  # last: the human runs' figures come first on a machine shared with others
        db = work / "function.db"
        fresh_database(db)
        run_id, wall = train(db, ["reward=function", *args.set], work / "function-train.log")
        results.append(report(db, run_id, wall, "function reward"))
        print(f"\nhuman / function wall time: {results[0]['wall_s'] / results[-1]['wall_s']:.2f}x")
    (work / "results.json").write_text(json.dumps(results, indent=2))
    print(f"results in {work / 'results.json'}")


if __name__ == "__main__":
    main()
