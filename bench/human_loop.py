"""People in the loop: the default PPO run on the shipped task with rewards from five simulated annotators at a
person's pace, against the same run with the function reward, on the same machine, one after the other.

    python bench/human_loop.py                      # both runs, defaults (~2 x 15 min on a CPU with bf16)
    python bench/human_loop.py --skip-function      # the human run alone
    python bench/human_loop.py --set steps=10       # shorter runs (any train --set applies to both)
    python bench/human_loop.py --seeds 0,1,2 --tie-margins 0.05,0.1 --skip-function   # is the recipe robust?
    python bench/human_loop.py --methods ppo,online-dpo --seeds 0,1,2 --skip-function
                                                    # issue 46 item 3: online DPO judge=mix against PPO reward=mix
    python bench/human_loop.py --task concise --methods ppo,online-dpo --seeds 0,1,2
                                                    # the same on an example task of bench/own_task.py

1. human: a real server (`rlhf-studio serve`) on another fresh database, `rlhf-studio train ppo --set reward=mix
   --wait` (the defaults otherwise: each batch's least certain quarter of answer groups ranked by people, the
   online reward model learning from each ranking and scoring the rest), and `--annotators` simulated annotators
   (bench/simulated_annotators.py: VADER of the answer, ties within 0.1) labelling whatever the run asks through
   the web API, one label per `--pace` seconds each. They never touch the database.
   With `--methods ppo,online-dpo` each seed and margin also gets `rlhf-studio train online-dpo --set judge=mix
   --wait` the same way (a fresh database, server and team; each step's 8 prompts answered twice, people rank the
   `human_share` of pairs the online reward model is least sure of in the Rank tab, the model judges the rest), and
   a last table compares the two (issue 46 item 3: online DPO reaches PPO's held-out result with at most half the
   judgements people made, or a better one with as many, at KL <= 10 and distinct-2 >= 0.45).
   With `--task concise` (or formal: bench/tasks/, comma-separated for several) the database holds a project of
   the task's own prompts instead, set up as bench/own_task.py sets one up (its HELDOUT_SHARE held out), with the
   app's default chat answer length and the task's judge as the project's measure; the simulated people rank by
   that judge (ties within own_task's TIE_MARGIN unless --tie-margins says otherwise). The runs are the same.
2. function: `rlhf-studio train ppo --set reward=function --wait` on a fresh database with the shipped prompts
   (the shipped task only).

Printed per run: wall time (the whole `train --wait`, evaluation included), the run's before/after evaluation on
the held-out prompts (positive share: VADER compound > 0.5; KL to the base in nats per answer; distinct-2), its
held-out result (the shipped task: the positive share; an example task: the win rate of the tuned answers against
the base's by the task's judge, ties half, with its 95% Wilson interval over prompts, as own_task.py measures), and
for the human run: answers judged by people (a ranking of 4 counts as 4), labels, the trainer's share of time
waiting for people, and the online reward model's agreement with each new label before training on it; for an
online DPO run: the pairs people judged, the pairs the model judged and their agreement (run_judgements). A
judgement is one label a person submitted (a ranking of 4 answers or a pair alike: one per `--pace` seconds), as
the annotators themselves counted them. The comparison table compares like with like: one table and one verdict
per task, by that task's held-out result.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from annotators import PROJECT, Server  # noqa: E402
from own_task import (HELDOUT_SHARE, JUDGE_RANGE, TARGETS, TIE_MARGIN, Studio, app_evaluation,  # noqa: E402
                      create_project, import_prompts, judge_win_rate, paired_answers, set_measure)
from simulated_annotators import TIE_MARGIN as VADER_TIE_MARGIN, WebAnnotator, add_users, run_team  # noqa: E402

from bench.tasks import TASKS  # noqa: E402

# The movie-review openings `prompts import-shipped` brings, judged by VADER; the other tasks are bench/tasks/'s.
SHIPPED = "shipped"
TASK_NAMES = (SHIPPED, *sorted(TASKS))


def fresh_database(path: Path) -> None:
    subprocess.run([sys.executable, "-m", "labeler", "prompts", "import-shipped", "--db", str(path), "--create-db"],
                   check=True, stdout=subprocess.DEVNULL)


def task_database(task: str, path: Path, work: Path) -> Studio:
    """A fresh database with a project of an example task's own prompts, as bench/own_task.py sets one up (steps 1
    and 2: held out at its HELDOUT_SHARE by the app's rule, chosen by a hash of each prompt: 30 of a task's 100),
    at the app's default chat answer length:
    given, so no fit of the length runs at import (minutes of the base model answering, and a length that could
    differ between a task's runs). The project's measure is the task's judge: the app's evaluation then scores by
    it, and queues no blind pairs for people (it does when the measure is a reward model the run trained on), which
    would count as their judgements."""
    from labeler.services.data.projects import DEFAULT_ANSWER_TOKENS

    studio = Studio(path, task, work)
    create_project(studio, DEFAULT_ANSWER_TOKENS["chat"], HELDOUT_SHARE)
    import_prompts(studio, TASKS[task], HELDOUT_SHARE, limit=None)
    set_measure(studio, TASKS[task].judge_spec, reward_model="")
    return studio


def parse_tasks(text: str) -> list[str]:
    """--task's comma-separated names, each the shipped task or one of bench/tasks/; SystemExit naming the flag."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if name not in TASK_NAMES:
            raise SystemExit(f"--task: {name!r} is not one of {', '.join(TASK_NAMES)}")
    if not names:
        raise SystemExit(f"--task: name at least one of {', '.join(TASK_NAMES)}")
    return names


def task_margins(task: str, text: str | None) -> list[float]:
    """People's tie margins for a task's runs: --tie-margins when given, else the task's own: VADER's 0.1 on the
    shipped task (simulated_annotators.TIE_MARGIN), own_task.TIE_MARGIN on an example task (its judge's scores lie
    in [0, 1])."""
    if text is None:
        return [VADER_TIE_MARGIN if task == SHIPPED else TIE_MARGIN]
    return [float(m) for m in text.split(",") if m.strip()]


def task_target(task: str, target: float | None) -> float:
    """The held-out result each PPO run of the sweep must reach: --target, else 80% positive on the shipped task
    and own_task's win rate target (item 5 of issue 33) on an example task."""
    if target is not None:
        return target
    return 0.8 if task == SHIPPED else TARGETS["win_rate"]


def held_out_result(task: str, before, after, judge=None) -> dict | None:
    """A run's held-out result as item 3 compares it, from the app's evaluations of the base (`before`) and the
    tuned model (`after`): on the shipped task the tuned answers' positive share (VADER compound > 0.5), on an
    example task the tuned answers' win rate against the base's answers to the same prompts by the task's `judge`
    (own_task.judge_win_rate: ties count half, its 95% Wilson interval over prompts). None without an evaluation."""
    if after is None:
        return None
    if task == SHIPPED:
        share = after.metrics.get("eval/positive_share")
        return None if share is None else {"measure": "positive share", "value": share, "low": None, "high": None}
    if before is None:
        return None
    prompts, base_answers, tuned_answers = paired_answers(before.samples, after.samples)
    win = judge_win_rate([float(s) for s in judge(prompts, tuned_answers)],
                         [float(s) for s in judge(prompts, base_answers)], int(after.settings["samples"]))
    return {"measure": "win rate", "value": win.rate, "low": win.low, "high": win.high, "wins": win.wins,
            "ties": win.ties, "losses": win.losses, "prompts": win.prompts}


def describe_held_out(held: dict | None) -> str:
    """'86%' or '72% (55%-85%)': a held-out result with its interval when it has one; '-' for none."""
    if held is None or held.get("value") is None:
        return "-"
    if held.get("low") is None:
        return f"{held['value']:.0%}"
    return f"{held['value']:.0%} ({held['low']:.0%}-{held['high']:.0%})"


# The methods a human run may train with, and the setting that puts people in its loop.
METHODS = {"ppo": "reward=mix", "online-dpo": "judge=mix"}


def human_settings(method: str, seed: int, shared: list[str], own: list[str] | None = None) -> list[str]:
    """The `--set` settings of a human run of `method`: people and the online reward model together, the seed, then
    the settings for every run (`shared`) and the method's own (`own`), later ones winning as `train --set` reads
    them."""
    if method not in METHODS:
        raise SystemExit(f"--methods: {method!r} is not one of {', '.join(METHODS)}")
    return [METHODS[method], f"seed={seed}", *shared, *(own or [])]


def train(db: Path, settings: list[str], log: Path, stage: str = "ppo",
          studio: Studio | None = None) -> tuple[int, float]:
    """`train STAGE --wait` (on an example task: through its `studio`, with its project and the repository on
    PYTHONPATH, so the run's evaluation can import the task's judge); returns (run id, wall seconds)."""
    # the run's folder beside its database (under --keep), not ./runs of whoever started the bench
    runs_dir = str(db.parent / f"runs-{db.stem}")
    start = time.perf_counter()
    if studio is not None:
        args = ["train", stage, "--wait", "--runs-dir", runs_dir]
        for setting in settings:
            args += ["--set", setting]
        studio.run(*args, log=str(log.relative_to(studio.work)))
    else:
        command = [sys.executable, "-m", "labeler", "train", stage, "--db", str(db), "--wait", "--runs-dir", runs_dir]
        for setting in settings:
            command += ["--set", setting]
        with open(log, "w") as out:
            subprocess.run(command, check=True, stdout=out, stderr=subprocess.STDOUT)
    from storage import open_db

    handle = open_db(str(db), migrate=False)
    run_id = handle.execute("SELECT MAX(id) FROM runs").fetchone()[0]
    handle.conn.close()
    return run_id, time.perf_counter() - start


def report(db: Path, run_id: int, wall: float, label: str, task: str = SHIPPED, studio: Studio | None = None) -> dict:
    from labeler.services.evals import evaluation
    from labeler.services.execution import run_judgements, run_metrics, runs
    from labeler.services.serving import models
    from storage import open_db

    handle = open_db(str(db), migrate=False)
    run = runs.get_run(handle, run_id)
    if studio is None:
        before, after = evaluation.run_comparison(handle, run_id)
    else:  # the run's own evaluation, else (eval_samples=0) `eval --model` of its model beside its base
        model = models.model_of_run(handle, run_id)
        before, after = app_evaluation(studio, run_id, model["name"]) if model else (None, None)
    held = held_out_result(task, before, after, None if task == SHIPPED else TASKS[task].judge())
    names = ["human/answers_judged", "human/labels_used", "human/wait_seconds", "rm_online/agreement",
             "objective/kl", "objective/kl_coef"]
    frame = run_metrics.metrics_frame(handle, run_id, names)
    series = {name: rows.sort_values("step")["value"].tolist() for name, rows in frame.groupby("name")}
    judges = run_judgements.judge_summary(handle, run_id)  # an online DPO run's: who judged its pairs
    handle.conn.close()
    out = {"label": label, "task": task, "stage": run.stage, "status": run.status, "steps": run.step, "wall_s": wall,
           "before": before.metrics if before else {}, "after": after.metrics if after else {}, "held_out": held,
           "series": series, "judges": dataclasses.asdict(judges) if judges else None}
    print(f"\n{label}: run {run_id} {run.status}, {run.step} steps, {wall / 60:.1f} min", flush=True)
    for name, metrics in (("before", out["before"]), ("after", out["after"])):
        if metrics:
            # VADER's positive share on the shipped task; an example task's evaluation computes one from its judge's
            # scores too (> 0.5), but its held-out result is the win rate, printed below
            share = metrics.get("eval/positive_share") if task == SHIPPED else None
            print(f"  {name:<6} {'' if share is None else f'positive {share:.0%}  '}"
                  f"KL {metrics.get('eval/kl', 0):.2f}  distinct-2 {metrics['eval/distinct_2']:.3f}  "
                  f"reward {metrics.get('eval/reward_mean', float('nan')):.3f}")
    if held is not None and task != SHIPPED:
        print(f"  judge's win rate against the base: {describe_held_out(held)} over {held['prompts']} prompts "
              f"(wins/ties/losses {held['wins']}/{held['ties']}/{held['losses']})")
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
    if judges is not None:
        print("  " + "\n  ".join(run_judgements.summary_lines(judges)))
    return out


def human_run(work: Path, args, seed: int, margin: float, method: str = "ppo", task: str = SHIPPED) -> dict:
    """One run with people in the loop: a fresh database of `task` and its server, the team ranking at `margin`
    (by VADER on the shipped task, by the task's judge on an example task), PPO with `reward=mix` (or online DPO
    with `judge=mix`: `method`) and `seed`."""
    tag = f"{method}-seed{seed}-margin{margin:g}" if task == SHIPPED else f"{task}-{method}-seed{seed}-margin{margin:g}"
    db = work / f"human-{tag}.db"
    if task == SHIPPED:
        fresh_database(db)
        studio, project, judge, score_range = None, PROJECT, None, (-1.0, 1.0)
    else:
        studio = task_database(task, db, work)
        project, judge, score_range = task, TASKS[task].judge(), JUDGE_RANGE
    users = [f"annotator{i}" for i in range(args.annotators)]
    add_users(str(db), users)
    server = Server(str(db), str(work / f"server-{tag}.log"), project=project)
    stop = threading.Event()
    team = [WebAnnotator(server.url, name, pace=args.pace, margin=margin, judge=judge, score_range=score_range)
            for name in users]
    threads = run_team(team, ("ranking", "rating"), stop)
    try:
        own = args.online_dpo_set if method == "online-dpo" else args.ppo_set
        run_id, wall = train(db, human_settings(method, seed, args.set, own), work / f"human-train-{tag}.log",
                             stage=method, studio=studio)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        server.close()
    what = "human reward" if method == "ppo" else "online DPO, people and the reward model judging"
    on = "" if task == SHIPPED else f"{task}: "
    result = report(db, run_id, wall, f"{on}{what} ({args.annotators} annotators, {args.pace} s/label, "
                                      f"seed {seed}, ties within {margin:g})", task, studio)
    judged, labels = sum(a.answers_judged for a in team), sum(sum(a.labels.values()) for a in team)
    print(f"  annotators' own count: {judged} answers judged in {labels} labels")
    return {**result, "method": method, "seed": seed, "margin": margin, "judged_by_team": judged,
            "labels_by_team": labels}


def held_out_value(result: dict) -> float:
    """A run's held-out result (held_out_result's value), NaN when it has none."""
    held = result.get("held_out")
    return float("nan") if held is None or held.get("value") is None else float(held["value"])


def print_sweep(results: list[dict], target: float, budget: int) -> None:
    """One line per (seed, tie margin): the held-out result, KL, answers judged, and whether the recipe held."""
    measure = next((r["held_out"]["measure"] for r in results if r.get("held_out")), "held-out")
    print(f"\n{'seed':>4} | {'ties':>5} | {measure:>16} | {'KL':>5} | {'judged':>6} | "
          f"target >= {target:.0%} with <= {budget}")
    for r in results:
        value, judged = held_out_value(r), r["judged_by_team"]
        met = value >= target and judged <= budget  # NaN (no evaluation) is not met
        print(f"{r['seed']:>4} | {r['margin']:>5g} | {describe_held_out(r.get('held_out')):>16} | "
              f"{r['after'].get('eval/kl', float('nan')):5.2f} | {judged:>6} | {'met' if met else 'NOT met'}")


@dataclass(frozen=True)
class Criteria:
    """Issue 46 item 3's bar for online DPO against PPO: the same held-out result (within `same_within`) with at
    most half the judgements people made, or a better one (by more than `same_within`) with at most as many; every
    online DPO run at KL <= `max_kl` and distinct-2 >= `min_distinct`. The held-out result is the task's: the
    positive share on the shipped task, the judge's win rate against the base on an example task; `same_within`
    is in its points on either (on an example task's 120 held-out answers, 30 of its 100 prompts x 4, about 4)."""
    same_within: float = 0.03  # about 3 of the shipped task's 108 held-out answers (27 prompts x 4)
    max_kl: float = 10.0
    min_distinct: float = 0.45


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def method_summary(results: list[dict]) -> dict:
    """Mean held-out result, KL, distinct-2 and people's labels of one method's runs on one task (one per seed
    and margin), the worst KL and distinct-2 among them, and what the held-out result is (`measure`)."""
    after = [r["after"] for r in results]
    kls = [a.get("eval/kl", float("nan")) for a in after]
    distinct = [a.get("eval/distinct_2", float("nan")) for a in after]
    measure = next((r["held_out"]["measure"] for r in results if r.get("held_out")), "held-out result")
    return {"runs": len(results), "measure": measure, "held_out": _mean([held_out_value(r) for r in results]),
            "kl": _mean(kls), "distinct_2": _mean(distinct), "labels": _mean([r["labels_by_team"] for r in results]),
            "answers": _mean([r["judged_by_team"] for r in results]), "worst_kl": max(kls, default=float("nan")),
            "worst_distinct_2": min(distinct, default=float("nan"))}


def item3_verdict(dpo: dict, ppo: dict, criteria: Criteria = Criteria()) -> tuple[bool, str]:
    """(met, why) for online DPO's method_summary against PPO's on one task, by `criteria`."""
    if not dpo["worst_kl"] <= criteria.max_kl:  # a NaN (no evaluation) fails too
        return False, f"an online DPO run ended at KL {dpo['worst_kl']:.2f} > {criteria.max_kl:g}"
    if not dpo["worst_distinct_2"] >= criteria.min_distinct:
        return False, f"an online DPO run ended at distinct-2 {dpo['worst_distinct_2']:.3f} < {criteria.min_distinct:g}"
    gap, ratio = dpo["held_out"] - ppo["held_out"], dpo["labels"] / ppo["labels"] if ppo["labels"] else float("inf")
    said = f"{dpo['measure']} {dpo['held_out']:.0%} vs {ppo['held_out']:.0%} with {ratio:.2f}x people's labels"
    if gap >= -criteria.same_within and ratio <= 0.5:  # a NaN result compares False: not met
        return True, f"the same result with at most half the labels: {said}"
    if gap > criteria.same_within and ratio <= 1.0:
        return True, f"a better result with at most as many labels: {said}"
    return False, said


def print_comparison(results: list[dict], criteria: Criteria = Criteria()) -> dict[str, tuple[bool, str]]:
    """Per task, like with like: one line per run of each method (its held-out result: the positive share on the
    shipped task, the judge's win rate with its 95% interval on an example task), the methods' means, and item 3's
    verdict; {task: (met, why)} for each task with runs of both methods (a result without a task is the shipped
    task's, as before tasks were told apart)."""
    verdicts = {}
    for task in dict.fromkeys(r.get("task", SHIPPED) for r in results):
        on_task = [r for r in results if r.get("task", SHIPPED) == task]
        by_method = {method: [r for r in on_task if r.get("method") == method] for method in METHODS}
        if not all(by_method.values()):
            continue
        summaries = {method: method_summary(runs) for method, runs in by_method.items()}
        measure = summaries["ppo"]["measure"]
        print(f"\n{task}: the held-out result is the {measure}"
              + ("" if task == SHIPPED else " against the base by the task's judge (95% interval over prompts)"))
        print(f"{'method':>10} | {'seed':>4} | {'ties':>5} | {measure:>16} | {'KL':>5} | {'distinct-2':>10} | "
              f"{'labels':>6} | {'answers':>7} | {'wall':>8}")
        for method, runs in by_method.items():
            for r in runs:
                a, held = r["after"], describe_held_out(r.get("held_out"))
                print(f"{method:>10} | {r['seed']:>4} | {r['margin']:>5g} | {held:>16} | "
                      f"{a.get('eval/kl', float('nan')):5.2f} | {a.get('eval/distinct_2', float('nan')):10.3f} | "
                      f"{r['labels_by_team']:>6} | {r['judged_by_team']:>7} | {r['wall_s'] / 60:6.1f} m")
        for method, m in summaries.items():
            print(f"{method:>10} | {'mean of ' + str(m['runs']):>12} | {m['held_out']:16.0%} | {m['kl']:5.2f} | "
                  f"{m['distinct_2']:10.3f} | {m['labels']:6.0f} | {m['answers']:7.0f} |")
        met, why = item3_verdict(summaries["online-dpo"], summaries["ppo"], criteria)
        print(f"issue 46 item 3 on {task}: {'met' if met else 'NOT met'} ({why})")
        verdicts[task] = (met, why)
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--annotators", type=int, default=5)
    parser.add_argument("--pace", type=float, default=2.0, help="seconds each annotator takes per label")
    parser.add_argument("--set", action="append", default=[], help="a train setting for every run (key=value)")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds: one human run each (e.g. 0,1,2)")
    parser.add_argument("--task", default=SHIPPED,
                        help=f"comma-separated: {', '.join(TASK_NAMES)} (shipped: the movie-review openings judged "
                             "by VADER; the others: bench/tasks/, each judged by its own judge); the whole sweep "
                             "runs per task, compared per task")
    parser.add_argument("--tie-margins", default=None,
                        help="comma-separated tie margins of the simulated people: answers within this of their "
                             "group's best score tie (e.g. 0.05,0.1); one human run per seed and margin (default: "
                             f"{VADER_TIE_MARGIN:g} on the shipped task, {TIE_MARGIN:g} on an example task)")
    parser.add_argument("--target", type=float, default=None,
                        help="held-out result each PPO run must reach (default: 80%% positive on the shipped task, "
                             f"a win rate of {100 * TARGETS['win_rate']:.0f}%% against the base on an example task)")
    parser.add_argument("--budget", type=int, default=800, help="most answers people may judge per run")
    parser.add_argument("--methods", default="ppo",
                        help="comma-separated: ppo (reward=mix), online-dpo (judge=mix); one human run of each per "
                             "seed and margin, compared when both are given")
    parser.add_argument("--ppo-set", action="append", default=[],
                        help="a train setting for the PPO runs alone (key=value; after --set)")
    parser.add_argument("--online-dpo-set", action="append", default=[],
                        help="a train setting for the online DPO runs alone (key=value; after --set)")
    parser.add_argument("--skip-function", action="store_true",
                        help="no function-reward run (one runs only with the shipped task among --task)")
    parser.add_argument("--keep", default="", help="folder for the databases and logs")
    args = parser.parse_args()
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for method in methods:
        human_settings(method, 0, [])  # an unknown method stops here, before any run
    tasks = parse_tasks(args.task)  # and an unknown task
    work = Path(args.keep or tempfile.mkdtemp(prefix="human-loop-"))
    work.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    # task by task, seed by seed, the methods back to back: a machine that drifts moves both of a seed's runs
    # alike; the results written after each run (an hour's sweep that stops at its fifth run keeps the first four)
    results = []
    for task in tasks:
        for seed in seeds:
            for margin in task_margins(task, args.tie_margins):
                for method in methods:
                    results.append(human_run(work, args, seed, margin, method, task))
                    (work / "results.json").write_text(json.dumps(results, indent=2))
    for task in tasks:
        ppo_runs = [r for r in results if r["method"] == "ppo" and r["task"] == task]
        if len(ppo_runs) > 1:
            print(f"\n{task}:", end="")
            print_sweep(ppo_runs, task_target(task, args.target), args.budget)
    print_comparison(results)

    if not args.skip_function and SHIPPED in tasks:  # last: the human runs' figures come first on a shared machine
        db = work / "function.db"
        fresh_database(db)
        run_id, wall = train(db, ["reward=function", *args.set], work / "function-train.log")
        results.append(report(db, run_id, wall, "function reward"))
        first = next(r for r in results if r["task"] == SHIPPED)
        print(f"\nhuman / function wall time: {first['wall_s'] / results[-1]['wall_s']:.2f}x")
    (work / "results.json").write_text(json.dumps(results, indent=2))
    print(f"results in {work / 'results.json'}")


if __name__ == "__main__":
    main()
