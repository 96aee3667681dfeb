"""The Train tab's demo button: the whole loop (answers, simulated labels, a reward model, PPO) in a project of
its own, started as a background process (labeler.services.training.demo)."""
from __future__ import annotations

from pathlib import Path

import gradio as gr

from labeler.services.training import demo
from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.roles import requires
from labeler.ui.soft_errors import ui_errors


def build_button() -> gr.Button:
    return gr.Button("Run the demo (RM + PPO on the embedded models)", elem_id="train-demo")


@ui_errors
@requires("admin")
def start_demo(ctx: UIContext, request: gr.Request) -> str:
    """Start the demo process (its output and log under the runs folder's demo/); the notice says where to look."""
    out = str(Path(ctx.settings.runs_dir) / "demo")
    pid = demo.launch_demo_process(ctx.db_path, out)
    return (f"Demo started (pid {pid}) in the project `{demo.DEMO_PROJECT}`: it generates answers, labels them "
            f"with a simulated annotator, then queues a reward-model run and a PPO run (`rlhf-studio runs list`, "
            f"or this tab when serving `--project {demo.DEMO_PROJECT}`). Log: `{out}/demo.log`.")


def wire(ctx: UIContext, button: gr.Button, notice: gr.Markdown) -> None:
    button.click(bind(start_demo, ctx), None, notice, api_name="train_demo")
