"""The Chat tab's conversation: a message sent and its answer streamed in, the conversation cleared, or
started again when another model is picked. The conversation lives in the Chatbot widget (a refresh clears it,
as in any chat UI).
"""
from __future__ import annotations

import contextlib

import gradio as gr

from labeler.services.serving import chat, models
from labeler.services.data import projects
from labeler.errors import InputError, PermissionDenied
from labeler.ui.context import UIContext
from labeler.ui.roles import check_role, requires
from labeler.ui.field_labels import toast_text
from labeler.ui.soft_errors import log_refusal, ui_errors
from labeler.ui.tabs.chat.messages import answered_by, plain_history
from labeler.ui.tabs.chat.sampling import settings_from


def as_toast(error: InputError | PermissionDenied) -> gr.Error:
    """A refusal while streaming as the toast ui_errors would show, with one log line and no traceback
    (soft_errors.log_refusal): the user's mistake, not the server's."""
    log_refusal(send, error)
    if isinstance(error, PermissionDenied):
        return gr.Error(f"Not allowed: {error}", title="Permission denied", print_exception=False)
    return gr.Error(toast_text(error), title="Invalid input", print_exception=False)


# Gradio fills `request` by its annotation, which it cannot see after *args: settings are spelled out.
def send(ctx: UIContext, text, history, model_name, system_prompt, tokens, sample, temperature,
         top_p, top_k, seed, request: gr.Request):
    """Yields (the Chatbot's messages, the message box emptied) as the answer to `text` streams in; earlier
    answers keep their model's name (messages.answered_by)."""
    values = (tokens, sample, temperature, top_p, top_k, seed)
    # A generator: ui_errors cannot wrap it, errors raised while streaming are converted here.
    try:
        check_role(ctx, request, "user")  # here, not before the try: a refusal becomes a toast like every error
        with ctx.connection() as db:
            text = (text or "").strip()
            if not text:
                raise InputError("type a message first", field="message")
            chat.check_length(text, "message")
            chat.check_length(system_prompt or "", "system prompt")
            settings = settings_from(values)
            path = models.resolve_chat_model(db, model_name or ctx.settings.model, (ctx.settings.model,))
            chat_template = projects.get_project(db, ctx.project).chat_template
        # `shown`: the Chatbot's messages as they are, earlier answers with their model's name.
        shown = [*(history or []), {"role": "user", "content": text}]
        history = plain_history(history) + [{"role": "user", "content": text}]
        writer = model_name or ctx.settings.model
        answer = ""
        yield shown + [{"role": "assistant", "content": answered_by(writer, "")}], ""
        # closing(): when Gradio closes this generator (Stop, a closed tab), the inner one is closed too,
        # which stops its generation thread instead of leaving it running to max_new_tokens (or leaves the queue).
        # The project's prompt format: a chat template, or plain text to continue (as Generate and the arena use it).
        # Bounded in elapsed time (the user is told when the answer length is capped or the bound ends it), one at a
        # time per user across Chat, Arena and best-of-N; while it waits for a turn, its place is where it will be.
        asked = chat.ChatRequest(path, history, system_prompt, settings, chat_template=chat_template,
                                 budget_s=ctx.settings.chat_budget_s, username=UIContext.username(request),
                                 notify=gr.Warning)
        with contextlib.closing(chat.stream_events(ctx.models, asked)) as events:
            for event in events:
                if isinstance(event, chat.Waiting):
                    waiting = f"*⏳ {event.words}*"
                    yield shown + [{"role": "assistant", "content": answered_by(writer, waiting)}], ""
                    continue
                answer += event
                yield shown + [{"role": "assistant", "content": answered_by(writer, answer)}], ""
        # The answer as it ended (also when nothing was written after a wait, which showed the place there).
        yield shown + [{"role": "assistant", "content": answered_by(writer, answer)}], ""
    except (InputError, PermissionDenied) as error:
        raise as_toast(error) from error


@ui_errors
@requires("user")
def clear(ctx: UIContext, request: gr.Request) -> tuple:
    """The conversation, the message box, the best-of-N scores and the rating note emptied."""
    return [], "", None, ""


def model_changed() -> tuple:
    # Another model starts another conversation: the earlier answers were not its own, and
    # a rating of the last one would name the wrong model.
    return [], None, ""
