"""The Chat tab's model pickers (chat models and reward models, from the registry) and the score's scale, read
on page load, by "↻ Models" and when the tab is opened."""
from __future__ import annotations

import gradio as gr

from labeler.services.serving import models
from labeler.services.data import projects
from labeler.ui.context import UIContext
from labeler.ui.model_choices import model_choices
from labeler.ui.roles import requires
from labeler.ui.soft_errors import ui_errors


@ui_errors
@requires("user")
def load(ctx: UIContext, request: gr.Request) -> tuple:
    """Both model pickers (the defaults picked), the score's choices on the project's scale, and the answer
    length set to the project's."""
    with ctx.connection() as db:
        names, default = model_choices(ctx, db)
        rewards, reward_default = model_choices(ctx, db, kind="reward")
        project = projects.get_project(db, ctx.project)
    scale = [(str(s), s) for s in range(project.likert_min, project.likert_max + 1)]
    return (
        gr.update(choices=names, value=default),
        gr.update(choices=rewards, value=reward_default),
        gr.update(choices=scale, value=None, label=f"Score ({project.likert_min} = very bad … {project.likert_max} = excellent)"),
        project.answer_tokens,
    )


@ui_errors
@requires("user")
def reload_lists(ctx: UIContext, request: gr.Request) -> tuple:
    """The model lists read again; the picked models stay picked."""
    with ctx.connection() as db:
        names, _ = model_choices(ctx, db)
        rewards, _ = model_choices(ctx, db, kind="reward")
    return gr.update(choices=names), gr.update(choices=rewards)
