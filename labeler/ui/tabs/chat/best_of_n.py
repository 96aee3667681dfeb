"""The Chat tab's "Best of N": N answers sampled, a reward model picks the best one, every score shown."""
from __future__ import annotations

import gradio as gr

from labeler.services.serving import chat, models
from labeler.services.data import projects
from labeler.errors import InputError
from labeler.ui.context import UIContext
from labeler.ui.roles import requires
from labeler.ui.soft_errors import ui_errors
from labeler.ui.tabs.chat.messages import answered_by, plain_history
from labeler.ui.tabs.chat.sampling import settings_from


@ui_errors
@requires("user")
def best_of_n(ctx: UIContext, text, history, model_name, reward_name, n_value, system_prompt,
              tokens, sample, temperature, top_p, top_k, seed, request: gr.Request) -> tuple:
    """(the conversation with the best answer, the message box emptied, [score, answer] best first). With no new
    message, the last answer is answered again."""
    values = (tokens, sample, temperature, top_p, top_k, seed)
    settings = settings_from(values)
    with ctx.connection() as db:
        chat_template = projects.get_project(db, ctx.project).chat_template
        if not reward_name:
            raise InputError("register or train a reward model first", field="reward_model")
        chat.check_length(text or "", "message")
        chat.check_length(system_prompt or "", "system prompt")
        path = models.resolve_chat_model(db, model_name or ctx.settings.model, (ctx.settings.model,))
        reward_path = models.resolve_reward_model(db, reward_name)
    shown = list(history or [])
    history = plain_history(history)
    text = (text or "").strip()
    if text:
        history.append({"role": "user", "content": text})
        shown.append({"role": "user", "content": text})
    elif history and history[-1]["role"] == "assistant":
        history, shown = history[:-1], shown[:-1]  # no new message: re-answer the last one
    winner, scored = chat.best_of_n(ctx.models, path, reward_path, history, int(n_value), settings, system_prompt,
                                    chat_template=chat_template, budget_s=ctx.settings.chat_budget_s,
                                    username=UIContext.username(request), notify=gr.Warning)
    table = [[round(score, 4), answer] for answer, score in sorted(scored, key=lambda pair: -pair[1])]
    return shown + [{"role": "assistant", "content": answered_by(model_name or ctx.settings.model, winner)}], "", table
