"""The Train tab's run monitor: the picked run's status, progress, charts, samples, before/after evaluation, log
and the run history, read back from SQLite by a gr.Timer every REFRESH_SECONDS (so a refresh, a second admin or
a server restart all see the same thing); and its Early stop, Cancel and Resume buttons.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import gradio as gr
import pandas as pd

from labeler.services.evals import evaluation
from labeler.services.training import jobs
from labeler.services.execution import run_metrics, runs
from labeler.errors import InputError, PermissionDenied
from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.roles import check_role, requires
from labeler.ui.soft_errors import ui_errors
from labeler.ui.tabs.train import judge_summary
from labeler.ui.tabs.train.run_views import (
    ANSWER_COLUMNS, COMPARISON_COLUMNS, HISTORY_COLUMNS, SAMPLE_COLUMNS, comparison_frame, default_metrics,
    heldout_bars, history_frame, metric_words, metrics_html, progress_html, reward_curve_html, run_choices,
    status_markdown, waiting_banner,
)

REFRESH_SECONDS = 2.0
LONG_TEXT_CHARS = 600  # a table cell shows at most this much of a prompt or an answer
REWARD_CURVE_METRICS = ("env/reward_mean", "reward")
# The widgets a refresh sets, in read_run's order.
REFRESHED = ("banner", "status", "progress", "metric_names", "plot", "samples", "log", "history", "run", "reward_curve",
             "comparison", "comparison_answers", "eval_note", "stop", "cancel", "resume", "judges")


@dataclass(frozen=True)
class RunMonitor:
    banner: gr.Markdown  # 'run #N is waiting for labels', at the top of the tab
    run: gr.Dropdown  # the picked run (none: the newest)
    stop: gr.Button
    cancel: gr.Button
    resume: gr.Button
    status: gr.Markdown
    progress: gr.HTML
    plot: gr.HTML
    metric_names: gr.CheckboxGroup  # the metrics plotted ("All metrics")
    # {"run": id, "metrics": [...]}: what the admin picked under "All metrics", for that run only. The checkboxes
    # themselves are no input of the timer: a tick sent before another run was picked carried the old run's
    # plots into the new one (an SFT run's "loss" kept as a GRPO run's only plot).
    picked: gr.State
    reward_curve: gr.HTML
    eval_note: gr.Markdown
    comparison: gr.Dataframe
    comparison_answers: gr.Dataframe
    samples: gr.Dataframe
    log: gr.Code
    history: gr.Dataframe
    judges: gr.Markdown  # an online DPO run's judges: pairs people judged, the model judged, their agreement

    @property
    def outputs(self) -> list:
        return [getattr(self, name) for name in REFRESHED]

    @property
    def inputs(self) -> list:
        return [self.run, self.picked]


def build_banner() -> gr.Markdown:
    return gr.Markdown(visible=False, elem_id="train-waiting-banner")


def build_monitor(banner: gr.Markdown) -> RunMonitor:
    """The monitor's widgets below the form (the banner is built first, at the top of the tab)."""
    gr.Markdown("## Runs")
    with gr.Row():
        run = gr.Dropdown([], value=None, label="Run", scale=3, elem_id="train-run")
        # Shown only for the runs they apply to (run_buttons): Cancel stayed red and active on finished runs.
        stop = gr.Button("Early stop (keep model)", scale=1, visible=False, elem_id="train-stop")
        cancel = gr.Button("Cancel", variant="stop", scale=1, visible=False, elem_id="train-cancel")
        resume = gr.Button("Resume", scale=1, visible=False, elem_id="train-resume")
    status = gr.Markdown(elem_id="train-status")
    progress = gr.HTML()
    # Drawn on the server as SVG (metrics_html): the default plots, or those picked under "All metrics".
    plot = gr.HTML(metrics_html(pd.DataFrame(columns=["step", "name", "value"]), []), elem_id="train-plot")
    with gr.Accordion("All metrics (pick which to plot)", open=False):
        metric_names = gr.CheckboxGroup([], value=[], label="Metrics", elem_id="train-metrics")
    picked = gr.State(None)
    reward_curve = gr.HTML(reward_curve_html(None), elem_id="train-reward-curve")
    judges = gr.Markdown(elem_id="train-judges")
    gr.Markdown("**Held-out evaluation: the base model before, the trained model after**")
    eval_note = gr.Markdown(elem_id="train-eval-note")
    comparison = gr.Dataframe(pd.DataFrame(columns=COMPARISON_COLUMNS), interactive=False,
                              elem_id="train-comparison")
    # Widths fixed in percent and long texts wrapped: sized by their content, the long answers
    # made 1952 px tables in a 1214 px page and pushed "after" and "reward" out of sight.
    comparison_answers = gr.Dataframe(pd.DataFrame(columns=ANSWER_COLUMNS), label="First held-out answers",
                                      interactive=False, wrap=True, column_widths=["30%", "35%", "35%"],
                                      max_chars=LONG_TEXT_CHARS, elem_id="train-answers")
    samples = gr.Dataframe(pd.DataFrame(columns=SAMPLE_COLUMNS), label="Samples (latest steps)", wrap=True,
                           interactive=False, column_widths=["8%", "35%", "45%", "12%"], max_chars=LONG_TEXT_CHARS,
                           elem_id="train-samples")
    log = gr.Code(label="Log (tail)", language=None, lines=12, interactive=False)
    history = gr.Dataframe(pd.DataFrame(columns=HISTORY_COLUMNS), label="Run history", interactive=False)
    return RunMonitor(banner, run, stop, cancel, resume, status, progress, plot, metric_names, picked, reward_curve,
                      eval_note, comparison, comparison_answers, samples, log, history, judges)


def run_buttons(run: runs.Run | None) -> tuple[bool, bool, bool]:
    """Which of Early stop, Cancel and Resume the run takes (jobs.request_stop, cancel_run, resume_run refuse the
    others): a queued or running run can be stopped or cancelled, a failed or cancelled one resumed."""
    live = run is not None and run.status in ("queued", "running")
    return live, live, run is not None and run.status in ("failed", "cancelled")


def read_run(db, project: str, run_id: int | None, selected: list[str] | None) -> tuple:
    """Everything shown about run `run_id` (none: the newest of `project`), one value per REFRESHED widget;
    `selected`: the metrics picked under "All metrics" (none or none logged: default_metrics)."""
    if not run_id:  # nothing picked yet: follow the newest run
        newest = runs.list_runs(db, project=project, limit=1)
        run_id = newest[0].id if newest else None
    current = runs.get_run(db, run_id) if run_id else None
    names = run_metrics.metric_names(db, run_id) if current else []
    chosen = [n for n in (selected or []) if n in names] or default_metrics(current.stage if current else "", names)
    frame = (run_metrics.metrics_frame(db, run_id, chosen) if current
             else pd.DataFrame(columns=["step", "name", "value"]))
    # The reward by wall time: PPO logs env/reward_mean, GRPO and RLOO (TRL's names) reward.
    reward_name = next((n for n in REWARD_CURVE_METRICS if n in names), None)
    curve = evaluation.reward_curve(db, run_id, reward_name) if reward_name else None
    metrics_table, answers_table, note = comparison_frame(db, run_id if current and current.finished else None)
    rows = run_metrics.samples(db, run_id, 12) if current else []
    return (
        waiting_banner(db, project),
        status_markdown(current),
        progress_html(current),
        gr.update(choices=[(metric_words(name), name) for name in names], value=chosen),
        metrics_html(frame, chosen, heldout_bars(db, run_id if current and current.finished else None)),
        pd.DataFrame(rows, columns=SAMPLE_COLUMNS).round({"reward": 3}),
        run_metrics.log_tail(current, 40) if current else "",
        history_frame(db, project),
        # Choices only: a tick that started before a launch finished must not reset the picked run.
        gr.update(choices=run_choices(db, project)),
        reward_curve_html(curve),
        metrics_table,
        answers_table,
        note,
        *(gr.update(visible=shown) for shown in run_buttons(current)),
        judge_summary.judge_markdown(db, run_id if current else None),
    )


def picked_for(picked, run_id) -> list[str] | None:
    """The metrics the admin picked for this run (the monitor's `picked` state), None when they picked none for it."""
    if isinstance(picked, dict) and picked.get("run") == run_id:
        return list(picked.get("metrics") or [])
    return None


def refresh(ctx: UIContext, run_id, picked, request: gr.Request) -> tuple:
    """The timer's tick (and a run picked): read_run after marking dead runs failed (jobs.poll), with the metrics
    `picked` for this run (none: the run's default plots)."""
    try:
        check_role(ctx, request, "admin")  # a refused tick changes nothing (no toast every REFRESH_SECONDS)
        with ctx.connection() as db:
            jobs.poll(db)
            return read_run(db, ctx.project, run_id, picked_for(picked, run_id))
    except (PermissionDenied, InputError):
        return tuple(gr.update() for _ in REFRESHED)


def pick_metrics(ctx: UIContext, run_id, selected, request: gr.Request) -> tuple:
    """Metrics picked under "All metrics": the refresh with them, and the pick remembered for this run."""
    picked = {"run": run_id, "metrics": [str(name) for name in (selected or [])]}
    return (*refresh(ctx, run_id, picked, request), picked)


# The launch's notice ("Run **#N** started." / "... queued ..."): emptied in the browser once the status line shows
# that run ended (it stayed, saying "queued", after the run had finished). A js-only tick: no request, and no
# progress timer flickering in the notice every REFRESH_SECONDS as a server event's would.
FADE_NOTICE_JS = """(notice) => {{
  const launched = /^Run \\*\\*#(\\d+)\\*\\* (started|queued)/.exec(notice || "");
  const status = (document.getElementById("train-status") || {{}}).innerText || "";
  const ended = launched && new RegExp("^Run #" + launched[1] + " · .* · ({final})").test(status);
  return ended ? "" : notice;
}}""".format(final="|".join(runs.FINAL))


@ui_errors
@requires("admin")
def run_action(ctx: UIContext, action: Callable, verb: str, run_id, request: gr.Request) -> str:
    """`action(db, run_id)` (jobs.request_stop, cancel_run, resume_run) on the picked run (none picked: the newest,
    which the monitor shows); the notice says what became of it."""
    with ctx.connection() as db:
        if not run_id:  # the monitor shows the newest run then, with its buttons
            newest = runs.list_runs(db, project=ctx.project, limit=1)
            if not newest:
                raise InputError("pick a run first", field="run")
            run_id = newest[0].id
        result = action(db, int(run_id))
    return f"Run **#{result.id}** {verb}: {result.status}."


def wire(ctx: UIContext, monitor: RunMonitor, notice: gr.Markdown) -> None:
    """The timer (built here: a gr.Timer is a component of the page) and the run buttons' events."""
    timer = gr.Timer(REFRESH_SECONDS)
    tick = bind(refresh, ctx)
    # preprocess=False: the run and the metric names arrive as sent, and read_run keeps only the run's own metrics.
    # Gradio checked them against the session's copy of the widgets' choices, which a refresh's gr.update does not
    # change there, and logged "Value: 'reward' ... not in the list of choices: []" for a run picked meanwhile.
    raw = {"show_progress": "hidden", "preprocess": False}
    timer.tick(tick, monitor.inputs, monitor.outputs, api_name="train_refresh", **raw)
    monitor.run.input(tick, monitor.inputs, monitor.outputs, api_name="train_select", **raw)
    monitor.metric_names.input(bind(pick_metrics, ctx), [monitor.run, monitor.metric_names],
                               [*monitor.outputs, monitor.picked], api_name="train_metrics", **raw)
    timer.tick(None, [notice], [notice], js=FADE_NOTICE_JS, api_name="train_notice")
    monitor.stop.click(bind(run_action, ctx, jobs.request_stop, "asked to stop after the current step"), monitor.run,
                       notice, api_name="train_stop")
    monitor.cancel.click(bind(run_action, ctx, jobs.cancel_run, "cancelled"), monitor.run, notice,
                         api_name="train_cancel")
    monitor.resume.click(bind(run_action, ctx, jobs.resume_run, "resumed"), monitor.run, notice,
                         api_name="train_resume")
