"""The Chat tab's bound, shown before asking: how long an answer may take here, about how many tokens that is at
the model's speed now, and what a training run or the queue means for it (chat.bound_words)."""
from __future__ import annotations

import gradio as gr

from labeler.services.serving import chat, models
from labeler.errors import InputError
from labeler.ui.context import UIContext
from labeler.ui.roles import requires
from labeler.ui.soft_errors import ui_errors


@ui_errors
@requires("user")
def show_bound(ctx: UIContext, model_name, request: gr.Request) -> str:
    """The bound's sentence for the picked model (the server's own when none is picked)."""
    with ctx.connection() as db:
        try:
            path = models.resolve_chat_model(db, model_name or ctx.settings.model, (ctx.settings.model,))
        except InputError:
            path = None  # a model the picker no longer offers: the bound without its speed
    return chat.bound_words(ctx.models, path, ctx.settings.chat_budget_s)
