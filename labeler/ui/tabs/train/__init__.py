"""Train tab: launch SFT / reward-model / DPO / PPO runs on the database's labels and watch them live.

Built from parts, each a module with its widgets and its handlers (named functions taking the UIContext first,
which tests call directly): the launch form (form.py), the run monitor (monitor.py, what it shows: run_views.py),
the reward-model inspector (inspector.py) and the demo button (demo.py). A launch queues a run
(labeler.services.training.jobs), which a worker process executes; the monitor's gr.Timer re-reads the run's row,
metrics and samples from SQLite. Every handler checks the admin role itself.
"""
from __future__ import annotations

import hashlib
import json

import gradio as gr

from labeler.services.training import jobs, recommended_path, train_configs
from labeler.services.serving import models
from labeler.services.settings import reward_spec
from labeler.errors import PermissionDenied
from labeler.ui.context import UIContext
from labeler.ui.gradio_internals import QUIET
from labeler.ui.roles import check_role, requires
from labeler.ui.session import quiet_on_load
from labeler.ui.soft_errors import ui_errors
from labeler.ui.binding import bind
from labeler.ui.tabs.train import demo, form, inspector, monitor
from labeler.ui.tabs.train.run_views import run_choices

TITLE = "Train"
# How often the pickers look for models and runs registered meanwhile while the Train tab is in front (a model
# registered in Admin or by a finished run reached them only after a tab switch).
CHOICES_REFRESH_S = 10
# The timer's input: the stamp of the choices shown, or "hidden" (nothing read) while the tab is not in front.
FOLLOW_JS = """(stamp) => {
  const el = document.getElementById("train-launch");
  return document.visibilityState === "visible" && el && el.offsetParent !== null ? stamp : "hidden";
}"""


@ui_errors
@requires("admin")
def load_choices(ctx: UIContext, request: gr.Request) -> tuple:
    """The pickers filled on page load: base models (the form's model), the form's Reward (reward specs naming
    each registered reward model), the inspector's reward models (the newest picked) and runs (the monitor's, the
    newest picked)."""
    with ctx.connection() as db:
        names = [m["name"] for m in models.list_models(db)]
        rewards = [m["name"] for m in models.list_models(db, kind="reward")]
        runs = run_choices(db, ctx.project)
    return (gr.update(choices=[*names, "default-encoder"]), gr.update(choices=reward_spec.choices(rewards)),
            gr.update(choices=rewards, value=rewards[-1] if rewards else None),
            gr.update(choices=runs, value=runs[0][1] if runs else None))


@ui_errors
@requires("admin")
def refresh_choices(ctx: UIContext, request: gr.Request) -> tuple:
    """The pickers' choices read again when the tab is selected (load_choices' outputs, their values kept):
    models registered since the page loaded (a finished run, Admin > Models, the CLI) show up."""
    with ctx.connection() as db:
        names = [m["name"] for m in models.list_models(db)]
        rewards = [m["name"] for m in models.list_models(db, kind="reward")]
        runs = run_choices(db, ctx.project)
    return (gr.update(choices=[*names, "default-encoder"]), gr.update(choices=reward_spec.choices(rewards)),
            gr.update(choices=rewards), gr.update(choices=runs))


def choices_stamp(db, project: str) -> str:
    """A short fingerprint of what the pickers offer: it changes when a model or a run is added or removed."""
    listed = [[m["name"], m["kind"]] for m in models.list_models(db)]
    return hashlib.sha1(json.dumps([listed, run_choices(db, project)]).encode()).hexdigest()[:16]


def follow_choices(ctx: UIContext, stamp, request: gr.Request) -> tuple:
    """The timer's tick while the tab is in front: the pickers' choices (refresh_choices) and the new stamp when
    a model or run came or went since `stamp`, else nothing sent (an open dropdown stays open). A refusal (an
    annotator's page) changes nothing."""
    unchanged = tuple(gr.skip() for _ in range(5))
    if stamp == "hidden":
        return unchanged
    try:
        check_role(ctx, request, "admin")
    except PermissionDenied:
        return unchanged
    with ctx.connection() as db:
        now = choices_stamp(db, ctx.project)
    if now == stamp:
        return unchanged
    return (*refresh_choices(ctx, request=request), now)


def recommended_path_line(ctx: UIContext, request: gr.Request):
    """The line above the stage picker: which path (DPO, or a reward model then PPO) suits the person's project and
    this machine (recommended_path). Nothing changes on an annotator's page."""
    try:
        check_role(ctx, request, "admin")
    except PermissionDenied:
        return gr.skip()
    with ctx.connection() as db:
        return recommended_path.project_line(db, ctx.project)


def build(ctx: UIContext):
    """The tab's widgets and events; returns the hook app.build_app calls with the gr.Tab (its select event)."""
    with ctx.connection() as db:
        jobs.poll(db)  # on app start: runs whose worker died while the server was down are marked failed
        # the values each stage's run would use in this project, shown as the form opens
        shown = {stage: form.shown_settings(db, ctx.project, stage) for stage in train_configs.STAGES}

    banner = monitor.build_banner()
    path_line = gr.Markdown(elem_id="train-recommended-path")
    launch_form = form.build_form(shown)
    with gr.Row():
        launch = gr.Button("Launch run", variant="primary", elem_id="train-launch")
        preview = gr.Button("What will this run use?", elem_id="train-preview")
        demo_button = demo.build_button()
    notice = gr.Markdown(elem_id="train-notice")
    run_monitor = monitor.build_monitor(banner)
    reward_inspector = inspector.build_inspector()

    pickers = [launch_form.model, launch_form.job_widgets["reward"], reward_inspector.model, run_monitor.run]
    if ctx.app is not None:
        ctx.app.load(quiet_on_load(bind(load_choices, ctx), 4), None, pickers, api_name="train_choices")
        ctx.app.load(bind(recommended_path_line, ctx), None, path_line, api_name="train_recommended_path", **QUIET)
    form.wire(ctx, launch_form, launch, preview, notice, run_monitor.run)
    monitor.wire(ctx, run_monitor, notice)
    demo.wire(ctx, demo_button, notice)
    inspector.wire(ctx, reward_inspector)

    stamp = gr.Textbox(value="", visible=False, elem_id="train-choices-stamp")
    gr.Timer(CHOICES_REFRESH_S).tick(bind(follow_choices, ctx), [stamp], [*pickers, stamp], js=FOLLOW_JS,
                                     api_name="train_follow_choices", trigger_mode="once", **QUIET)

    def on_tab(tab: gr.Tab) -> None:
        tab.select(quiet_on_load(bind(refresh_choices, ctx), 4), None, pickers, api_name="train_refresh_choices",
                   **QUIET)
        tab.select(bind(recommended_path_line, ctx), None, path_line, api_name="train_refresh_recommended_path",
                   **QUIET)

    return on_tab
