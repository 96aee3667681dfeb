"""Train tab: launch SFT / reward-model / DPO / PPO runs on the database's labels and watch them live.

Built from parts, each a module with its widgets and its handlers (named functions taking the UIContext first,
which tests call directly): the launch form (form.py), the run monitor (monitor.py, what it shows: run_views.py),
the reward-model inspector (inspector.py) and the demo button (demo.py). A launch queues a run
(labeler.services.jobs), which a worker process executes; the monitor's gr.Timer re-reads the run's row, metrics
and samples from SQLite. Every handler checks the admin role itself.
"""
from __future__ import annotations

import gradio as gr

from labeler.services import jobs, models, reward_spec, train_configs
from labeler.ui.context import UIContext
from labeler.ui.gradio_internals import QUIET
from labeler.ui.roles import requires
from labeler.ui.session import quiet_on_load
from labeler.ui.soft_errors import ui_errors
from labeler.ui.binding import bind
from labeler.ui.tabs.train import demo, form, inspector, monitor
from labeler.ui.tabs.train.run_views import run_choices

TITLE = "Train"


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


def build(ctx: UIContext):
    """The tab's widgets and events; returns the hook app.build_app calls with the gr.Tab (its select event)."""
    with ctx.connection() as db:
        jobs.poll(db)  # on app start: runs whose worker died while the server was down are marked failed
        # the values each stage's run would use in this project, shown as the form opens
        shown = {stage: form.shown_settings(db, ctx.project, stage) for stage in train_configs.STAGES}

    banner = monitor.build_banner()
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
    form.wire(ctx, launch_form, launch, preview, notice, run_monitor.run)
    monitor.wire(ctx, run_monitor, notice)
    demo.wire(ctx, demo_button, notice)
    inspector.wire(ctx, reward_inspector)

    def on_tab(tab: gr.Tab) -> None:
        tab.select(quiet_on_load(bind(refresh_choices, ctx), 4), None, pickers, api_name="train_refresh_choices",
                   **QUIET)

    return on_tab
