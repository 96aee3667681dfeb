"""`rlhf-studio train sft|rm|dpo|ppo`, `rlhf-studio runs list|show|cancel|stop|resume`, `rlhf-studio demo`.

Settings come from `--config FILE.json` and `--set key=value` (later wins), looked up in the job's settings
and then the stage trainer's config (labeler/services/training/train_configs.py); `--list-settings` prints them all
with their help. A run is queued in the database and executed by its own worker process; `--wait` follows it.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from labeler import forms
from labeler.services.evals import criterion_wins, evaluation
from labeler.services.training import demo, jobs, run_preview, train_configs
from labeler.services.settings import job_settings, training_stages
from labeler.services.execution import run_judgements, run_metrics, runs, supervision
from labeler.services.training.kept_models import KEPT_FROM, kept_models
from storage import open_db


def _print_settings(stage: str) -> None:
    """The job's settings, section by section, then the stage trainer's."""
    for section in job_settings.SECTIONS:
        only = "" if section.STAGES == job_settings.ALL_STAGES else f"; {', '.join(section.STAGES)} runs"
        print(f"{section.TITLE} settings ({section.__doc__.splitlines()[0].rstrip('.').lower()}{only}):")
        for spec in forms.field_specs(section):
            print(f"  {spec.name}={spec.shown_default}  [{spec.kind}{': ' + '|'.join(map(str, spec.choices)) if spec.choices else ''}]  {spec.help}")
        print()
    cls = train_configs.stage_config_class(stage)
    print(f"{cls.__name__} settings ({stage}; a job setting of the same name takes precedence):")
    for spec in forms.field_specs(cls):
        print(f"  {spec.name}={spec.shown_default}  {spec.help.splitlines()[0][:160] if spec.help else ''}")


def _describe(run: runs.Run) -> str:
    eta = run.eta_seconds()
    parts = [f"run {run.id}", run.stage, run.status, f"step {run.step}/{run.total_steps or '?'}"]
    if eta is not None:
        parts.append(f"ETA {eta:.0f}s")
    if run.error:
        parts.append(f"error: {run.error.splitlines()[-1][:200]}")
    return "  ".join(parts)


def _follow(db, run_id: int, interval: float = 1.0) -> int:
    """Print progress until the run ends; exit code 0 when it succeeded."""
    last = None
    try:
        while True:
            jobs.poll(db)
            run = runs.get_run(db, run_id)
            if run.finished:  # a failed run's final error comes from its launcher, a moment after rank 0's
                run = supervision.settled(db, run)
            frame = run_metrics.metrics_frame(db, run_id)
            latest = ""
            if len(frame):
                step = frame["step"].max()
                values = frame[frame["step"] == step].set_index("name")["value"]
                shown = [n for n in ("loss", "ppo/loss/total", "env/reward_mean", "objective/kl", "accuracy") if n in values]
                latest = "  ".join(f"{n}={values[n]:.4g}" for n in shown)
            # One line per step (or status change), not per poll: the ETA alone changes every second.
            if (run.status, run.step) != last:
                print(f"{_describe(run)}  {latest}".rstrip(), flush=True)
                last = (run.status, run.step)
            if run.finished:
                if run.status != "succeeded":
                    print(run_metrics.log_tail(run, 20), file=sys.stderr)
                return 0 if run.status == "succeeded" else 1
            time.sleep(interval)
    except KeyboardInterrupt:
        print(f"\nstopped following; run {run_id} keeps running (rlhf-studio runs cancel {run_id} to stop it)",
              file=sys.stderr)
        return 130


def _stages_in_words() -> str:
    """'sft, rm (reward model), ... or kto': each stage's name, with its words where the name is an abbreviation."""
    named = [f"{s.name} ({s.aka})" if s.aka else s.name for s in training_stages.STAGES.values()]
    return f"{', '.join(named[:-1])} or {named[-1]}"


def cmd_train(args) -> int:
    if args.list_settings:
        _print_settings(args.stage)
        return 0
    values = train_configs.read_config_file(args.config) if args.config else {}
    values.update(forms.parse_sets(args.set))
    db = open_db(args.db)
    if args.dry_run or values.get("time_budget"):
        if args.dry_run:  # what the run would use and how long it would take; nothing is queued
            print(_plain(run_preview.preview_run(db, args.project, args.stage, values, source=args.config).markdown()))
            return 0
        values, preview = run_preview.apply_time_budget(db, args.project, args.stage, values)
        if preview is not None and preview.estimate is not None:
            print(_plain(run_preview.estimate_line(preview.estimate, preview.budget_seconds, preview.steps_asked)))
    # A run that would stop at once for want of data is refused now, as the Train tab refuses it (a runner of the
    # user's own reads what it likes).
    check = None if values.get("runner") else lambda: run_preview.refuse_without_data(db, args.project, args.stage, values)
    run = jobs.create_run(db, args.stage, values, project=args.project, name=args.name or "",
                          runs_dir=args.runs_dir, source=args.config, check=check)
    print(f"{_describe(run)}\n  log: {run.log_path}\n  output: {run.output_dir}")
    return _follow(db, run.id) if args.wait else 0


def _plain(markdown: str) -> str:
    """The preview's markdown for a terminal: no bold marks, no forced line breaks."""
    return markdown.replace("**", "").replace("`", "").replace("  \n", "\n")


def cmd_runs_list(args) -> int:
    db = open_db(args.db)
    jobs.poll(db)
    listed = runs.list_runs(db, project=args.project, status=args.status, limit=args.limit)
    if not listed:
        print("no runs")
    for run in listed:
        print(f"{run.id:>4}  {run.stage:<4} {run.status:<10} step {run.step:>5}/{run.total_steps:<5} "
              f"{run.created_at[:19]}  {run.name}")
    return 0


def cmd_runs_show(args) -> int:
    db = open_db(args.db)
    jobs.poll(db)
    run = runs.get_run(db, args.run_id)
    print(_describe(run))
    for key in ("name", "command", "log_path", "output_dir", "created_at", "started_at", "ended_at", "heartbeat_at"):
        print(f"  {key}: {getattr(run, key)}")
    print(f"  config: {run.config}")
    sentence, warnings = evaluation.run_verdict(db, run.id)
    if sentence:
        print(f"  verdict: {sentence}")
    for warning in warnings:
        print(f"  note: {warning}")
    judged = run_judgements.judge_summary(db, run.id)  # online DPO: who judged its pairs
    if judged is not None:
        print("  judges: " + "\n          ".join(run_judgements.summary_lines(judged)))
    if args.criteria:  # loads each criterion's reward model: asked for, not by default
        for line in criterion_wins.win_lines(criterion_wins.run_criterion_wins(db, run.id, run.project)):
            print(f"  criterion {line}")
    frame = run_metrics.metrics_frame(db, run.id)
    if len(frame):
        last = frame.sort_values("step").groupby("name").tail(1)
        print("  latest metrics:")
        for _, row in last.iterrows():
            print(f"    {row['name']} = {row['value']:.6g} (step {row['step']})")
    tail = run_metrics.log_tail(run, args.log_lines)
    if tail:
        print("  log tail:\n" + "\n".join("    " + line for line in tail.splitlines()))
    return 0


def cmd_runs_cancel(args) -> int:
    db = open_db(args.db)
    run = jobs.cancel_run(db, args.run_id)
    print(_describe(run))
    for model in kept_models(db, run.id)[-1:]:  # the model of its newest checkpoint (kept_models)
        print(f"  kept model {model['name']} (step {model['config'][KEPT_FROM]['step']}): {model['path']}")
    return 0


def cmd_runs_stop(args) -> int:
    run = jobs.request_stop(open_db(args.db), args.run_id)
    print(f"{_describe(run)}  (stops after the current step and keeps the model)")
    return 0


def cmd_runs_resume(args) -> int:
    db = open_db(args.db)
    run = jobs.resume_run(db, args.run_id)
    print(_describe(run))
    return _follow(db, run.id) if args.wait else 0


def cmd_demo(args) -> int:
    # Before torch is imported (run_demo imports it; the demo module does not): OpenMP threads that sleep rather
    # than spin (see supervision.spawn).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    settings = forms.build_config(demo.DemoSettings, forms.flag_values(demo.DemoSettings, args), source="demo")
    # Never the project people label in: the demo adds rankings and may move prompts to the held-out split.
    # The shared --project flag defaults to 'default', so that value means "not given" here (set_defaults on
    # this subparser would change the shared flag's default for every command).
    project = demo.DEMO_PROJECT if args.project == "default" else args.project
    report = demo.run_demo(args.db, settings, project=project, log=print)
    print(report.table())
    return 0


def register(subparsers, common: argparse.ArgumentParser) -> None:
    train = subparsers.add_parser(
        "train", parents=[common], help=f"queue a training run ({', '.join(train_configs.STAGES)}) on the database's labels",
        description="Queue a training run. Data comes from the database's labels; the run executes in its own "
                    "worker process (one at a time by default) and registers its model when it succeeds.",
    )
    train.add_argument("stage", choices=train_configs.STAGES, help=_stages_in_words())
    train.add_argument("--config", metavar="FILE", help="settings as a JSON or YAML (.yaml/.yml) file (flat, or {job, trainer})")
    train.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                       help="one setting (repeatable), e.g. --set steps=50 --set learning_rate=1e-5")
    train.add_argument("--name", help="a name for the run (default: <stage>-run<id>)")
    train.add_argument("--runs-dir", default="runs", help="folder for run outputs and logs (default: runs)")
    train.add_argument("--wait", action="store_true", help="follow the run's progress until it ends")
    train.add_argument("--list-settings", action="store_true", help="print every setting of the stage with its help")
    train.add_argument("--dry-run", action="store_true",
                       help="queue nothing: print what the run would use and, for dpo, rm, ppo, grpo and rloo, how long it "
                            "would take here (a micro-step is measured) and, for ppo, the steps a time_budget fits")
    train.set_defaults(func=cmd_train)

    runs_parser = subparsers.add_parser("runs", help="list, inspect, cancel, stop or resume training runs",
                                        description="Training runs recorded in the database.")
    sub = runs_parser.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
    p = sub.add_parser("list", parents=[common], help="recent runs, newest first (marks dead runs failed)")
    p.add_argument("--status", choices=runs.STATUSES, help="only runs with this status")
    p.add_argument("--limit", type=int, default=30, help="how many (default: 30)")
    p.set_defaults(func=cmd_runs_list)
    p = sub.add_parser("show", parents=[common], help="one run: command, paths, config, latest metrics, log tail")
    p.add_argument("run_id", type=int, help="run id")
    p.add_argument("--log-lines", type=int, default=20, help="log lines to show (default: 20)")
    p.add_argument("--criteria", action="store_true",
                   help="each project criterion's win rate against the base, scored by the reward model trained on "
                        "it (train rm --set criterion=NAME; loads those models)")
    p.set_defaults(func=cmd_runs_show)
    p = sub.add_parser("cancel", parents=[common],
                       help="stop a run now (SIGTERM, then SIGKILL); the model of its newest checkpoint is registered "
                            "as <name>-step<N>, and the run can be resumed")
    p.add_argument("run_id", type=int, help="run id")
    p.set_defaults(func=cmd_runs_cancel)
    p = sub.add_parser("stop", parents=[common], help="early stop: end after the current step and keep the model")
    p.add_argument("run_id", type=int, help="run id")
    p.set_defaults(func=cmd_runs_stop)
    p = sub.add_parser("resume", parents=[common], help="continue a failed or cancelled run from its last checkpoint")
    p.add_argument("run_id", type=int, help="run id")
    p.add_argument("--wait", action="store_true", help="follow the run's progress until it ends")
    p.set_defaults(func=cmd_runs_resume)

    demo_parser = subparsers.add_parser(
        "demo", parents=[common], help="the whole loop on the embedded models: generate, simulated labels, RM, PPO",
        description="Generate answers to the shipped prompts, rank them with a simulated annotator (VADER "
                    "sentiment), train the MiniLM reward model, run PPO on the default policy with it, and print "
                    "responses and rewards before and after on held-out prompts. CPU, about 10-20 minutes. It works "
                    "in its own project ('demo', or another that --project names, never 'default'; created with "
                    "the shipped prompts), and one demo runs per database at a time.",
    )
    forms.add_flags(demo_parser, demo.DemoSettings)
    demo_parser.set_defaults(func=cmd_demo)
