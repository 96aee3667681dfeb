"""Chat tab: talk to any registered model (answers stream in), try best-of-N with a reward model, and rate
the last answer, which stores it as a label like any other.

The conversation lives in the Chatbot widget (a refresh clears it, as in any chat UI); a rated answer
lives in SQLite. The loaded models live in a ModelCache created here, one per app.
"""
from __future__ import annotations

import contextlib
import html
import re

import gradio as gr

from labeler.ui.context import UIContext
from labeler.ui.roles import check_role, requires
from labeler.ui.session import quiet_before_password_change
from labeler.ui.soft_errors import log_refusal, ui_errors

TITLE = "Chat"
NEW_MODEL_HINT = "Models come from the registry: `rlhf-studio models add NAME FOLDER`, or train one in the Train tab."


# Each answer names the model that wrote it: a small line above the text, in the Chatbot's
# message only. plain_history takes it off again, so the model never reads it and a rating stores the answer alone.
ANSWERED_BY = "<sub>answered by {model}</sub>\n\n"
_ANSWERED_BY = re.compile(r"\A<sub>answered by [^<]*</sub>\n\n")


def answered_by(model: str, answer: str) -> str:
    """The answer as the Chatbot shows it: the model's name above the text."""
    return ANSWERED_BY.format(model=html.escape(model)) + answer


def text_of(content) -> str:
    """A Chatbot message's content as plain text (Gradio 6 sends a list of parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return str(content.get("text") or "")
    if isinstance(content, (list, tuple)):
        return "".join(text_of(part) for part in content)
    return ""


def plain_history(history) -> list[dict]:
    return [{"role": m["role"], "content": _ANSWERED_BY.sub("", text_of(m["content"]), count=1)
             if m["role"] == "assistant" else text_of(m["content"])}
            for m in history or [] if m.get("role") in ("user", "assistant")]


def model_choices(ctx: UIContext, db, kind: str = "chat") -> tuple[list[str], str | None]:
    """(choices, default) for a model dropdown; the server's --model is offered even when unregistered."""
    from labeler.services import models

    if kind == "reward":
        names = [m["name"] for m in models.list_models(db, kind="reward")]
        return names, (names[-1] if names else None)
    names = models.chat_model_names(db)
    default = ctx.settings.model
    if default not in names:
        names.append(default)
    return names, default


def settings_widgets():
    """Sliders for the chat's sampling settings, initial values and help from GenerationSettings."""
    from labeler.services.chat import CHAT_SETTINGS
    from rlhf.configs import GenerationSettings

    help_of = {name: f.metadata.get("help") for name, f in GenerationSettings.__dataclass_fields__.items()}
    return [
        gr.Slider(1, 1024, value=CHAT_SETTINGS.max_new_tokens, step=1, label="max_new_tokens", info=help_of["max_new_tokens"], elem_id="chat-max-new-tokens"),
        gr.Checkbox(value=CHAT_SETTINGS.do_sample, label="do_sample", info=help_of["do_sample"], elem_id="chat-do-sample"),
        gr.Slider(0.05, 2.0, value=CHAT_SETTINGS.temperature, step=0.05, label="temperature", info=help_of["temperature"], elem_id="chat-temperature"),
        gr.Slider(0.05, 1.0, value=CHAT_SETTINGS.top_p, step=0.05, label="top_p", info=help_of["top_p"], elem_id="chat-top-p"),
        gr.Slider(0, 200, value=CHAT_SETTINGS.top_k, step=1, label="top_k", info=help_of["top_k"], elem_id="chat-top-k"),
        gr.Number(value=CHAT_SETTINGS.seed, precision=0, label="seed", info=help_of["seed"], elem_id="chat-seed"),
    ]


SETTING_NAMES = ["max_new_tokens", "do_sample", "temperature", "top_p", "top_k", "seed"]


def settings_from(values: tuple) -> "GenerationSettings":  # noqa: F821
    from labeler import forms
    from labeler.services.chat import CHAT_SETTINGS
    from rlhf.configs import GenerationSettings

    raw = {**forms.to_dict(CHAT_SETTINGS), **dict(zip(SETTING_NAMES, values)), "batch_size": 1}
    return forms.build_config(GenerationSettings, raw)


def build(ctx: UIContext):
    from labeler.services import chat
    from labeler.services.errors import InputError, PermissionDenied

    cache = chat.ModelCache(max_models=2)

    with gr.Row():
        # The handlers accept registered models only (models.resolve_chat_model), never a typed path or hub id.
        # allow_custom_value stays on because Gradio checks a dropdown's value against the choices its session
        # loaded, which an API client that never ran chat_load does not have; the registry check is the guard.
        model = gr.Dropdown(choices=[], label="Model", allow_custom_value=True, scale=2, elem_id="chat-model",
                            info=NEW_MODEL_HINT)
        system = gr.Textbox(label="System prompt (optional)", lines=1, max_lines=4, scale=3, elem_id="chat-system")
        reload_models = gr.Button("↻ Models", size="sm", scale=0, min_width=90, elem_id="chat-reload")
    chatbot = gr.Chatbot(label="Conversation", height=420, elem_id="chat-chatbot", feedback_options=None)
    with gr.Row():
        message = gr.Textbox(placeholder="Type a message and press Enter", show_label=False, scale=5, elem_id="chat-input")
        send = gr.Button("Send", variant="primary", scale=1, elem_id="chat-send")
        clear = gr.Button("Clear", scale=0, min_width=80, elem_id="chat-clear")
    with gr.Accordion("Sampling settings", open=False):
        setting_inputs = settings_widgets()
    with gr.Row():
        with gr.Column():
            gr.Markdown("**Rate the last answer** (stored as a label for training)")
            score = gr.Radio(choices=[], label="Score", elem_id="chat-score")
            with gr.Row():
                thumbs_up = gr.Button("👍 Good", elem_id="chat-thumbs-up", min_width=60)
                thumbs_down = gr.Button("👎 Bad", elem_id="chat-thumbs-down", min_width=60)
                rate = gr.Button("Rate", variant="secondary", elem_id="chat-rate")
            rate_status = gr.Markdown(elem_id="chat-rate-status")
        with gr.Column():
            with gr.Accordion("Best of N (needs a reward model)", open=False):
                reward_model = gr.Dropdown(choices=[], label="Reward model", elem_id="chat-reward-model")
                n = gr.Slider(2, 16, value=4, step=1, label="N", info="answers sampled; the reward model picks the best")
                best = gr.Button("Best of N", elem_id="chat-best-of-n")
                scores = gr.Dataframe(headers=["score", "answer"], datatype=["number", "str"], interactive=False,
                                      wrap=True, elem_id="chat-best-scores")

    def errors_as_toasts(error: Exception) -> gr.Error:
        # One log line, no traceback (soft_errors.log_refusal): the user's mistake, not the server's.
        log_refusal(chat_send, error)
        if isinstance(error, PermissionDenied):
            return gr.Error(f"Not allowed: {error}", title="Permission denied", print_exception=False)
        return gr.Error(str(error), title="Invalid input", print_exception=False)

    @ui_errors
    @requires(ctx, "user")
    def chat_models(request: gr.Request):
        from labeler.services import projects

        with ctx.connection() as db:
            names, default = model_choices(ctx, db)
            rewards, reward_default = model_choices(ctx, db, kind="reward")
            project = projects.get_project(db, ctx.project)
        scale = [(str(s), s) for s in range(project.likert_min, project.likert_max + 1)]
        return (
            gr.update(choices=names, value=default),
            gr.update(choices=rewards, value=reward_default),
            gr.update(choices=scale, value=None, label=f"Score ({project.likert_min} = very bad … {project.likert_max} = excellent)"),
        )

    # Gradio fills `request` by its annotation, which it cannot see after *args: settings are spelled out.
    def chat_send(text, history, model_name, system_prompt, tokens, sample, temperature, top_p, top_k, seed,
                  request: gr.Request):
        values = (tokens, sample, temperature, top_p, top_k, seed)
        # A generator: ui_errors cannot wrap it, errors raised while streaming are converted here.
        try:
            from labeler.services import models, projects

            check_role(ctx, request, "user")  # here, not @requires: a refusal becomes a toast like every error
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
            # which stops its generation thread instead of leaving it running to max_new_tokens. The project's
            # prompt format: a chat template, or plain text to continue (as Generate and the arena use it).
            with contextlib.closing(chat.stream_reply(cache, path, history, system_prompt, settings,
                                                      chat_template=chat_template)) as pieces:
                for piece in pieces:
                    answer += piece
                    yield shown + [{"role": "assistant", "content": answered_by(writer, answer)}], ""
        except (InputError, PermissionDenied) as error:
            raise errors_as_toasts(error) from error

    @ui_errors
    @requires(ctx, "user")
    def chat_best_of_n(text, history, model_name, reward_name, n_value, system_prompt, tokens, sample, temperature,
                       top_p, top_k, seed, request: gr.Request):
        from labeler.services import models, projects

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
        winner, scored = chat.best_of_n(cache, path, reward_path, history, int(n_value), settings, system_prompt,
                                        chat_template=chat_template)
        table = [[round(score, 4), answer] for answer, score in sorted(scored, key=lambda pair: -pair[1])]
        return shown + [{"role": "assistant", "content": answered_by(model_name or ctx.settings.model, winner)}], "", table

    def rate_last(history, model_name, score_value, values: tuple, username: str):
        """`username` rates the last answer: the handlers below checked their role."""
        from labeler.services import models

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
                generated=cache.generated, generated_by=str(path),
            )
        return f"Stored: score **{score_value:g}** for this answer (rating #{rated.rating_id})."

    @ui_errors
    @requires(ctx, "user")
    def chat_rate(history, model_name, score_value, tokens, sample, temperature, top_p, top_k, seed, request: gr.Request):
        values = (tokens, sample, temperature, top_p, top_k, seed)
        return rate_last(history, model_name, score_value, values, ctx.username(request))

    def thumbs(up: bool):
        @ui_errors
        @requires(ctx, "user")
        def handler(history, model_name, tokens, sample, temperature, top_p, top_k, seed, request: gr.Request):
            from labeler.services import projects

            with ctx.connection() as db:
                project = projects.get_project(db, ctx.project)
            value = project.likert_max if up else project.likert_min
            values = (tokens, sample, temperature, top_p, top_k, seed)
            return rate_last(history, model_name, value, values, ctx.username(request))

        return handler

    load_outputs = [model, reward_model, score]
    reload_models.click(chat_models, None, load_outputs, api_name="chat_models")
    if ctx.app is not None:
        ctx.app.load(quiet_before_password_change(chat_models, len(load_outputs)), None, load_outputs,
                     api_name="chat_load")
    send_inputs = [message, chatbot, model, system, *setting_inputs]
    send.click(chat_send, send_inputs, [chatbot, message], api_name="chat_send", concurrency_limit=2)
    message.submit(chat_send, send_inputs, [chatbot, message], api_name="chat_submit", concurrency_limit=2)
    @ui_errors
    @requires(ctx, "user")
    def chat_clear(request: gr.Request):
        return [], "", None, ""

    clear.click(chat_clear, None, [chatbot, message, scores, rate_status], api_name="chat_clear")

    def chat_model_changed():
        # Another model starts another conversation: the earlier answers were not its own, and
        # a rating of the last one would name the wrong model.
        return [], None, ""

    model.change(chat_model_changed, None, [chatbot, scores, rate_status], api_name=False, show_progress="hidden")
    best.click(chat_best_of_n, [message, chatbot, model, reward_model, n, system, *setting_inputs],
               [chatbot, message, scores], api_name="chat_best_of_n", concurrency_limit=1)
    rate.click(chat_rate, [chatbot, model, score, *setting_inputs], rate_status, api_name="chat_rate", trigger_mode="once")
    thumbs_up.click(thumbs(True), [chatbot, model, *setting_inputs], rate_status, api_name="chat_thumbs_up", trigger_mode="once")
    thumbs_down.click(thumbs(False), [chatbot, model, *setting_inputs], rate_status, api_name="chat_thumbs_down", trigger_mode="once")

    @ui_errors
    @requires(ctx, "user")
    def chat_model_lists(request: gr.Request):
        """The model lists read again; the picked models stay picked."""
        with ctx.connection() as db:
            names, _ = model_choices(ctx, db)
            rewards, _ = model_choices(ctx, db, kind="reward")
        return gr.update(choices=names), gr.update(choices=rewards)

    def on_tab(tab: gr.Tab) -> None:
        # Opening the tab reads the registry again: no "↻ Models" click needed for a model
        # registered or trained since the page loaded.
        tab.select(quiet_before_password_change(chat_model_lists, 2), None, [model, reward_model],
                   api_name="chat_model_lists", show_progress="hidden")

    return on_tab
