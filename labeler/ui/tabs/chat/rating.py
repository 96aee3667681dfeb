"""The Chat tab's rating of the last answer (a score, or a thumb up or down for the ends of the project's
scale), stored as a label like any other."""
from __future__ import annotations

import gradio as gr

from labeler.services.serving import chat, models
from labeler.services.data import projects
from labeler.errors import InputError
from labeler.ui.context import UIContext
from labeler.ui.roles import requires
from labeler.ui.soft_errors import ui_errors
from labeler.ui.tabs.chat.messages import plain_history
from labeler.ui.tabs.chat.sampling import settings_from


def rate_last(ctx: UIContext, history, model_name, score_value, values: tuple,
              username: str) -> str:
    """`username` rates the last answer: the handlers below checked their role."""
    with ctx.connection() as db:
        # The stored row names the model that answered: only a model this server can chat with.
        path = models.resolve_chat_model(db, model_name or ctx.settings.model, (ctx.settings.model,))
        history = plain_history(history)
        if len(history) < 2 or history[-1]["role"] != "assistant":
            raise InputError("there is no answer to rate yet", field="history")
        if score_value is None or score_value == "":
            raise InputError("pick a score first", field="score")
        # The sliders' settings now: those of the answer unless they were moved since.
        rated = chat.rate_answer(
            db, ctx.project, username, history[:-1], history[-1]["content"],
            model_name or ctx.settings.model, float(score_value), settings=settings_from(values),
            # Only an answer this server generated with that model is marked for training exports.
            generated=ctx.models.generated, generated_by=str(path),
        )
    return f"Stored: score **{score_value:g}** for this answer (rating #{rated.rating_id})."


@ui_errors
@requires("user")
def rate(ctx: UIContext, history, model_name, score_value, tokens, sample, temperature, top_p,
         top_k, seed, request: gr.Request) -> str:
    values = (tokens, sample, temperature, top_p, top_k, seed)
    return rate_last(ctx, history, model_name, score_value, values, ctx.username(request))


@ui_errors
@requires("user")
def thumb(ctx: UIContext, up: bool, history, model_name, tokens, sample, temperature, top_p,
          top_k, seed, request: gr.Request) -> str:
    """Rates the last answer the top of the project's scale (👍, `up` bound by the tab's build) or its bottom (👎)."""
    with ctx.connection() as db:
        project = projects.get_project(db, ctx.project)
    value = project.likert_max if up else project.likert_min
    values = (tokens, sample, temperature, top_p, top_k, seed)
    return rate_last(ctx, history, model_name, value, values, ctx.username(request))
