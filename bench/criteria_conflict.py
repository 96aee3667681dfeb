"""Issue 47, item 5: two criteria that conflict, rated by simulated people through the web app, one reward model per
criterion, then PPO on their weighted sum, PPO under a constraint, and PPO on one criterion alone; each criterion's
win rate against the base, and whether the constraint held.

    nice -n 10 python bench/criteria_conflict.py           # the full recipe (hours on a CPU)
    nice -n 10 python bench/criteria_conflict.py --limit 16 --heldout-share 0.4 --n 2 --judged-answers 12 \\
        --annotators 2 --pace 0 --answer-tokens 40 --set steps=1 --set eval_samples=1 --ppo-set batch_size=4 \\
        --ppo-set mini_batch_size=4 --rm-set steps=2          # a smoke run (a few minutes)
    python bench/criteria_conflict.py --keep DIR --reuse --maximise short   # the runs again on DIR's reward models

The task is bench/tasks/explain: how-to questions, judged by two simulated judges that pull apart, `complete`
(judge A: the points an answer covers) and `short` (judge B: fewer words). The recipe, one `rlhf-studio` subprocess
per step (bench/own_task.py's Studio), on a fresh database in a temporary folder (--keep: a folder):

1. `projects create explain --criterion complete:1-5:... --criterion short:1-5:...` (the project's own score
   is the overall one, the mean of the two judges)
2. `prompts import` (a share held out for evaluation), `generate --n N`: answers queued for rating
3. `serve` and --annotators simulated people (bench/simulated_annotators.py's WebAnnotator) who rate each answer
   through the web API (`/rate_submit`, the Rate tab's): the overall score and a score per criterion, each from its
   judge, until --judged-answers answers are rated
4. `train rm --set criterion=complete` and `--set criterion=short`: one reward model per criterion
5. `train ppo` three times (--runs picks): `sum` on rm:complete*W+rm:short*(1-W), `constraint` on rm:complete
   under rm:short>=--threshold (Safe RLHF's Lagrangian; `base`, the default, holds it at the base model's own
   level, its first batch's mean; a number is a level on the reward model's scale, standardised on its training
   answers), `single` on rm:complete alone. `--maximise
   short` swaps the two: maximise brevity, hold completeness. `--reuse` with a --keep folder whose recipe got past
   step 4 runs step 5 alone, on its ratings and reward models (each maximised criterion's runs log and write
   results apart: ppo-RUN-CRITERION.log, results-CRITERION.json)
6. each run's held-out answers against its base's (the app's automatic evaluation), scored by each judge: the
   win rate per criterion with its 95% Wilson interval over prompts (ties within --win-margin counted half), and
   the app's own per-criterion win rate by the criterion's reward model (labeler/services/evals/criterion_wins.py,
   as `runs show --criteria` prints it)

`--evaluate-on FILE` (with --reuse): no training; the models of the runs an earlier --reuse wrote (--results, default
results-CRITERION.json) and their base answer the project's held-out prompts and FILE's together, with the settings
of each run's own evaluation, and each criterion's judge scores them as in 6. A 30-prompt held-out split gives an
interval of about +-16 points; bench/tasks/explain/heldout_more.txt adds 120 how-to questions written for evaluation
only (never generated for, rated or trained on), 150 prompts in all.

Printed: one table, a row per run and a column per criterion; a run under a constraint says whether it held (the
judge's interval of the constrained criterion reaches 50%: no worse than the base) and a run's other criteria
whether they improved (interval above 50%).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))  # bench scripts import their siblings by plain name

from own_task import (Studio, app_evaluation, generate, import_prompts, judge_win_rate,  # noqa: E402
                      newest_evaluations, paired_answers, train)

from bench.tasks import TASKS, Task  # noqa: E402
from rlhf.stats import WinRate  # noqa: E402

TASK = "explain"
CRITERION_SCALE = (1, 5)
CRITERION_GUIDELINES = {"complete": "Does it cover every point the question needs?",
                        "short": "Is it brief: no more words than needed?"}
RUNS = ("sum", "constraint", "single")


# ---- the table: pure functions (tests/bench/test_criteria_conflict.py) ------------------------------------------

def held(win: WinRate) -> bool:
    """A constrained criterion no worse than the base: its interval reaches 50% (criterion_wins' rule)."""
    return win.high >= 0.5


def improved(win: WinRate) -> bool:
    """A criterion better than the base: its whole interval above 50%."""
    return win.low > 0.5


def reward_specs(first: str, second: str, weight: float, threshold: float | str, models: Mapping[str, str]) -> dict:
    """{run: its reward spec} for the three runs, `first` the criterion maximised and `second` the one weighed in
    (sum) or held (constraint, at a number or at `base`, the base's own level); `models` {criterion: registered
    reward model}."""
    a, b = f"rm:{models[first]}", f"rm:{models[second]}"
    level = threshold if isinstance(threshold, str) else f"{threshold:g}"
    return {"sum": f"{a}*{weight:g}+{b}*{1 - weight:g}", "constraint": f"{a},{b}>={level}", "single": a}


@dataclass
class Row:
    """One run's line: the judges' and the app's win rate per criterion against the base."""

    run: str
    reward: str
    judge_wins: dict[str, WinRate]
    app_wins: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # criterion_wins: rate, low, high
    constrained: str | None = None  # the criterion held by a constraint
    length_base: float = float("nan")
    length: float = float("nan")
    kl: float = float("nan")
    multiplier: float | None = None  # the Lagrange multiplier at the run's last step

    def verdicts(self) -> dict[str, str]:
        """Per criterion: 'held' / 'NOT held' for the constrained one, 'improved' / 'not improved' for the rest."""
        out = {}
        for name, win in self.judge_wins.items():
            if name == self.constrained:
                out[name] = "held" if held(win) else "NOT held"
            else:
                out[name] = "improved" if improved(win) else "not improved"
        return out


def _pct(rate: float, low: float, high: float) -> str:
    return f"{rate:.0%} ({low:.0%}-{high:.0%})"


def format_table(title: str, rows: Sequence[Row]) -> str:
    criteria = list(rows[0].judge_wins) if rows else []
    header = ["run", "reward", *(f"{c}: judge's win rate (95% CI)" for c in criteria),
              *(f"{c}: app's (its reward model)" for c in criteria), "length base -> tuned", "KL", "multiplier"]
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        verdicts = row.verdicts()
        judge_cells = [f"{_pct(w.rate, w.low, w.high)} {verdicts[c]}" for c, w in row.judge_wins.items()]
        app_cells = [_pct(*row.app_wins[c]) if c in row.app_wins else "-" for c in criteria]
        multiplier = "-" if row.multiplier is None else f"{row.multiplier:.3f}"
        lines.append("| " + " | ".join([row.run, f"`{row.reward}`", *judge_cells, *app_cells,
                                         f"{row.length_base:.0f} -> {row.length:.0f}", f"{row.kl:.2f}",
                                         multiplier]) + " |")
    lines += ["", "win rates against the base on held-out prompts, ties counted half; a constrained criterion "
                  "held if its interval reaches 50%, another improved if its interval lies above 50%"]
    return "\n".join(lines)


def judge_row(run: str, reward: str, prompts: Sequence, base: Sequence[str], tuned: Sequence[str], samples: int,
              judges: Mapping[str, Callable], margin: float = 0.0, constrained: str | None = None) -> Row:
    """A row's judges' part: each criterion's judge scores the tuned and the base answers (row i of each answers
    the same prompt), compared pair by pair (own_task.judge_win_rate)."""
    wins = {}
    for name, judge in judges.items():
        wins[name] = judge_win_rate([float(s) for s in judge(prompts, tuned)],
                                    [float(s) for s in judge(prompts, base)], samples, margin)
    return Row(run, reward, wins, constrained=constrained)


def criterion_ratings(scores: Mapping[str, float], scale: tuple[int, int] = CRITERION_SCALE) -> dict[str, int]:
    """A judge's score in [0, 1] per criterion as the rating a person gives on the criterion's scale."""
    from simulated_annotators import rating_from_score

    return {name: rating_from_score(score, *scale, score_range=(0.0, 1.0)) for name, score in scores.items()}


# ---- the simulated people: the Rate tab's overall score and one score per criterion ------------------------------

def make_annotator(url: str, username: str, task: Task, criteria: Sequence[str], pace: float):
    """A WebAnnotator whose ratings also answer the project's criteria, each by its judge (the order `criteria`
    is the Rate tab's: questions.criteria)."""
    from simulated_annotators import WebAnnotator, prompt_shown, rating_from_score

    judges = task_judges(task)

    class CriteriaAnnotator(WebAnnotator):
        def label(self, kind: str) -> bool:
            if kind != "rating":
                return super().label(kind)
            shown = self._current(kind)
            key = shown[6]
            if not key:
                self._shown[kind] = None
                return False
            prompt, answer = prompt_shown(shown[2]), shown[3] if isinstance(shown[3], str) else ""
            if self.budget is not None and not self.budget.take(1):
                return False
            if self.pace:
                time.sleep(self.pace)
            overall = rating_from_score(float(self.judge([prompt], [answer])[0]), score_range=(0.0, 1.0))
            scores = criterion_ratings({name: float(judges[name]([prompt], [answer])[0]) for name in criteria})
            self._shown[kind] = self.client.predict(overall, "", key, "", [], *(scores[n] for n in criteria),
                                                    api_name="/rate_submit")
            self.answers_judged += 1
            self.labels[kind] += 1
            return True

    return CriteriaAnnotator(url, username, pace=pace, judge=task.judge(), score_range=(0.0, 1.0))


def task_judges(task: Task) -> dict[str, Callable]:
    import importlib

    return importlib.import_module(f"bench.tasks.{task.name}.judge").CRITERIA


def rate_until_done(studio: Studio, task: Task, count: int, pace: float, budget: int,
                    timeout: float = 6 * 3600) -> int:
    """Serve the app and let `count` simulated people rate the queued answers (overall and per criterion) until
    `budget` answers are rated or none is left; the answers rated."""
    from annotators import Server
    from simulated_annotators import Budget, add_users, run_team

    from labeler.services.data import labeling
    from labeler.services.labels import questions

    db = studio.db_handle()
    try:
        criteria = [q.name for q in questions.criteria(db, studio.project)[1:]]
    finally:
        db.conn.close()
    users = [f"person{i}" for i in range(count)]
    add_users(str(studio.db), users)
    server = Server(str(studio.db), str(studio.work / "server.log"), project=studio.project)
    team = [make_annotator(server.url, name, task, criteria, pace) for name in users]
    spend, stop = Budget(budget), threading.Event()
    for annotator in team:
        annotator.budget = spend

    def remaining() -> int:
        db = studio.db_handle()
        try:
            return sum(labeling.progress(db, studio.project, a.username, "rating")[1] for a in team)
        finally:
            db.conn.close()

    threads = run_team(team, ("rating",), stop, idle_sleep=1.0)
    deadline = time.monotonic() + timeout
    try:
        while not spend.spent and time.monotonic() < deadline and remaining() > 0:
            time.sleep(2.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        for annotator in team:
            annotator.close()
        server.close()
    return sum(a.answers_judged for a in team)


# ---- the recipe ----------------------------------------------------------------------------------------------

def create_project(studio: Studio, answer_tokens: int, heldout_share: float, criteria: Sequence[str]) -> None:
    low, high = CRITERION_SCALE
    specs = [arg for name in criteria for arg in ("--criterion", f"{name}:{low}-{high}:{CRITERION_GUIDELINES[name]}")]
    studio.run("projects", "create", studio.project, "--prompt-format", "chat", "--answer-tokens", str(answer_tokens),
               "--heldout-share", str(heldout_share), *specs, "--create-db", log="setup.log", project=False)


def last_metric(studio: Studio, run_id: int, name: str) -> float | None:
    from labeler.services.execution import run_metrics

    db = studio.db_handle()
    try:
        frame = run_metrics.metrics_frame(db, run_id, [name])
    finally:
        db.conn.close()
    return None if frame.empty else float(frame.sort_values("step")["value"].iloc[-1])


def app_criterion_wins(studio: Studio, run_id: int) -> dict[str, tuple[float, float, float]]:
    from labeler.services.evals import criterion_wins

    db = studio.db_handle()
    try:
        wins = criterion_wins.run_criterion_wins(db, run_id, studio.project)
    finally:
        db.conn.close()
    return {name: (m["eval/win_rate"], m["eval/win_low"], m["eval/win_high"])
            for name, m in wins.items() if "eval/win_rate" in m}


def reward_model_name(criterion: str) -> str:
    """The name step 4 registers a criterion's reward model under, and --reuse looks it up by."""
    return f"rm-{criterion}"


def kept_reward_models(studio: Studio, criteria: Sequence[str]) -> tuple[dict[str, str], int]:
    """--reuse: ({criterion: its reward model} as an earlier run of the recipe registered them, the answers people
    rated), read from the kept database; refused, naming what is missing, when that run did not get so far."""
    from labeler.services.serving import models as registry

    if not studio.db.exists():
        raise SystemExit(f"--reuse: no database at {studio.db}: run the recipe with --keep {studio.work} first")
    db = studio.db_handle()
    try:
        names = {m["name"] for m in registry.list_models(db)}
        rated = db.execute("SELECT COUNT(*) FROM ratings").fetchone()[0]
    finally:
        db.conn.close()
    found = {name: reward_model_name(name) for name in criteria if reward_model_name(name) in names}
    if missing := [name for name in criteria if name not in found]:
        raise SystemExit(f"--reuse: {studio.db} has no reward model for {', '.join(missing)} (rm-NAME): "
                         "the earlier run stopped before step 4")
    return found, rated


def run_recipe(args, work: Path) -> list[Row]:
    task = TASKS[TASK]
    judges = task_judges(task)
    first = args.maximise
    (second,) = [name for name in judges if name != first]
    work.mkdir(parents=True, exist_ok=True)
    studio = Studio(work / "studio.db", task.name, work)
    common = [f"seed={args.seed}", *args.set]
    if args.reuse:
        models, rated = kept_reward_models(studio, list(judges))
        print(f"  reusing {work}: {rated} ratings, reward models {', '.join(models.values())}", flush=True)
    else:
        create_project(studio, args.answer_tokens, args.heldout_share, list(judges))           # 1.
        import_prompts(studio, task, args.heldout_share, args.limit)                           # 2.
        generate(studio, args.n, args.seed)
        studio.run("projects", "set", studio.project, "--measure", task.judge_spec, log="setup.log", project=False)
        rated = rate_until_done(studio, task, args.annotators, args.pace, args.judged_answers)  # 3.
        print(f"  people rated {rated} answers on both criteria", flush=True)
        models = {}
        for name in judges:                                                                     # 4.
            _, models[name], _ = train(studio, "rm", [*common, f"criterion={name}", f"output_name={reward_model_name(name)}",
                                                      *args.rm_set], f"rm-{name}.log")
    specs = reward_specs(first, second, args.weight, args.threshold, models)
    rows, results = [], []
    for run in args.runs:                                                                   # 5.
        run_id, model, timing = train(studio, "ppo", [*common, f"reward={specs[run]}",
                                                    f"constraint_lr={args.constraint_lr}", *args.ppo_set],
                                    f"ppo-{run}-{first}.log")
        before, after = app_evaluation(studio, run_id, model)                              # 6.
        prompts, base, tuned = paired_answers(before.samples, after.samples)
        row = judge_row(run, specs[run], prompts, base, tuned, int(after.settings["samples"]), judges,
                        args.win_margin, constrained=second if run == "constraint" else None)
        row.app_wins = app_criterion_wins(studio, run_id)
        row.length_base, row.length = before.metrics["eval/length_mean"], after.metrics["eval/length_mean"]
        row.kl = float(after.metrics.get("eval/kl") or 0.0)
        row.multiplier = last_metric(studio, run_id, "reward/lagrange_multiplier") if run == "constraint" else None
        rows.append(row)
        print("\n" + format_table(f"{TASK}: after the {run} run", rows) + "\n", flush=True)  # a long run shows each
        results.append({"run": run, "run_id": run_id, "model": model, "wall_s": timing.wall_s,
                        "estimate_s": timing.estimate_s, "reward": specs[run],
                        "verdicts": row.verdicts(), "judge_wins": {c: vars(w) for c, w in row.judge_wins.items()},
                        "app_wins": row.app_wins, "rated": rated})
    (work / f"results-{first}.json").write_text(json.dumps(results, indent=2))
    return rows


def evaluate_wider(args, work: Path) -> list[Row]:
    """--evaluate-on: the runs of an earlier --reuse (their models in its results file) and their base evaluated
    again on the project's held-out prompts and the file's, and judged per criterion; nothing trained."""
    from labeler.services.evals import evaluation

    task = TASKS[TASK]
    judges = task_judges(task)
    (second,) = [name for name in judges if name != args.maximise]
    studio = Studio(work / "studio.db", task.name, work)
    kept_reward_models(studio, list(judges))  # refuses a folder whose recipe did not get so far
    results_file = Path(args.results) if args.results else work / f"results-{args.maximise}.json"
    earlier = {r["run"]: r for r in json.loads(results_file.read_text())}
    if missing := [run for run in args.runs if run not in earlier]:
        raise SystemExit(f"--evaluate-on: {results_file} has no {', '.join(missing)} run (it has "
                         f"{', '.join(earlier)}): pick --runs from those")
    db = studio.db_handle()
    try:
        held = [str(prompt) for prompt in evaluation.heldout_prompts(db, studio.project)]
    finally:
        db.conn.close()
    extra = [line.strip() for line in Path(args.evaluate_on).read_text().splitlines() if line.strip()]
    prompts = held + [text for text in extra if text not in held]
    combined = work / "evaluate-on.txt"
    combined.write_text("".join(f"{text}\n" for text in prompts))
    print(f"  evaluating on {len(prompts)} prompts: {len(held)} held out, {len(prompts) - len(held)} from "
          f"{args.evaluate_on}", flush=True)
    rows = []
    for run in args.runs:
        model = earlier[run]["model"]
        db = studio.db_handle()
        try:
            _, own = evaluation.run_comparison(db, earlier[run]["run_id"])
        finally:
            db.conn.close()
        record = own.settings
        studio.run("eval", "--model", model, "--prompts", str(combined), "--samples", str(record["samples"]),
                   "--max-new-tokens", str(record["max_new_tokens"]), "--seed", str(record["seed"]),
                   *(["--bf16"] if record.get("bf16") else []), log=f"eval-wider-{run}.log")
        before, after = newest_evaluations(studio, model)
        answered, base, tuned = paired_answers(before.samples, after.samples)
        row = judge_row(run, earlier[run]["reward"], answered, base, tuned, int(after.settings["samples"]), judges,
                        args.win_margin, constrained=second if run == "constraint" else None)
        row.length_base, row.length = before.metrics["eval/length_mean"], after.metrics["eval/length_mean"]
        row.kl = float(after.metrics.get("eval/kl") or 0.0)
        rows.append(row)
    (work / f"results-{args.maximise}-wider.json").write_text(json.dumps(
        [{"run": r.run, "reward": r.reward, "prompts": len(prompts), "verdicts": r.verdicts(),
          "judge_wins": {c: vars(w) for c, w in r.judge_wins.items()}, "kl": r.kl} for r in rows], indent=2))
    return rows


def level(text: str) -> float | str:
    """--threshold: `base` (reward_spec.BASE_LEVEL) or a number."""
    from labeler.services.settings.reward_spec import BASE_LEVEL

    return text if text == BASE_LEVEL else float(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=4, help="answers per training prompt for people to rate")
    parser.add_argument("--limit", type=int, default=None, help="use only the task's first N prompts (smoke runs)")
    parser.add_argument("--heldout-share", type=float, default=0.1)
    parser.add_argument("--answer-tokens", type=int, default=96, help="the project's answer length")
    parser.add_argument("--judged-answers", type=int, default=400, help="answers people rate (both criteria each)")
    parser.add_argument("--annotators", type=int, default=5)
    parser.add_argument("--pace", type=float, default=2.0, help="seconds each person takes per rating")
    parser.add_argument("--maximise", choices=("complete", "short"), default="complete",
                        help="the criterion the runs maximise; the other is weighed in (sum) or held (constraint)")
    parser.add_argument("--reuse", action="store_true", help="with --keep holding an earlier run of the recipe "
                        "that trained both reward models: only the PPO runs, on its ratings and reward models")
    parser.add_argument("--weight", type=float, default=0.5, help="the sum's weight of the maximised criterion "
                        "(the other: 1 - it)")
    parser.add_argument("--threshold", type=level, default="base", help="the constraint's level: a number on "
                        "the reward model's standardised scale (0: the mean of its training answers), or base (the "
                        "base model's own level under the run's sampling: its first batch's mean)")
    parser.add_argument("--constraint-lr", type=float, default=1.0, help="the Lagrange multiplier's step per "
                        "batch (the app's default)")
    parser.add_argument("--runs", default=",".join(RUNS), help=f"comma-separated, of {', '.join(RUNS)}")
    parser.add_argument("--win-margin", type=float, default=0.0, help="judge scores within this count as a tie")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], help="a setting for every train (key=value)")
    parser.add_argument("--ppo-set", action="append", default=[], help="a setting for the PPO runs alone")
    parser.add_argument("--rm-set", action="append", default=[], help="a setting for `train rm` alone")
    parser.add_argument("--evaluate-on", default="", metavar="FILE", help="with --reuse: train nothing; evaluate "
                        "the earlier runs' models and their base on the held-out prompts and FILE's (a prompt file)")
    parser.add_argument("--results", default="", help="--evaluate-on: the earlier runs' results file (default: "
                        "results-CRITERION.json in --keep)")
    parser.add_argument("--keep", default="", help="folder for the database, logs and results (default: a temp one)")
    args = parser.parse_args()
    args.runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    unknown = [r for r in args.runs if r not in RUNS]
    if unknown:
        parser.error(f"--runs: {', '.join(unknown)} is not one of {', '.join(RUNS)}")
    if args.evaluate_on and not (args.reuse and args.keep):
        parser.error("--evaluate-on needs --reuse and --keep: it evaluates an earlier run's models")
    root = Path(args.keep or tempfile.mkdtemp(prefix="criteria-conflict-"))
    started = time.monotonic()
    rows = evaluate_wider(args, root) if args.evaluate_on else run_recipe(args, root)
    table = format_table(f"{TASK}: complete against short, seed {args.seed}", rows)
    print("\n" + table, flush=True)
    (root / "table.md").write_text(table + "\n")
    print(f"\n{time.monotonic() - started:.0f} s; table in {root / 'table.md'}, database and logs under {root}")


if __name__ == "__main__":
    main()
