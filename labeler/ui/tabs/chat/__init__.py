"""Chat tab: talk to any registered model (answers stream in), try best-of-N with a reward model, and rate
the last answer, which stores it as a label like any other.

Built from parts: model_lists.py (the model pickers and the score's scale), conversation.py (send, clear, a new
model), best_of_n.py, rating.py (a score or a thumb for the last answer), bound.py (the time bound, shown before
asking), with messages.py (the Chatbot's messages and the plain history) and sampling.py (the sampling widgets).
Handlers are module functions taking the UIContext first. The conversation lives in the Chatbot widget (a refresh
clears it, as in any chat UI); a rated answer lives in SQLite. The loaded models live in the server's one
ModelCache (ctx.models, shared with the Arena and Data > Generate), which also keeps each person to one answer
at a time and queues answers beyond the server's cap.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import gradio as gr

from labeler.ui.binding import bind
from labeler.ui.context import GENERATING_EVENTS, UIContext
from labeler.ui.session import quiet_before_password_change
from labeler.ui.tabs.chat import conversation, model_lists, rating
from labeler.ui.tabs.chat.bound import show_bound
from labeler.ui.tabs.chat.best_of_n import best_of_n
from labeler.ui.tabs.chat.sampling import SETTING_NAMES, settings_widgets

TITLE = "Chat"
NEW_MODEL_HINT = "Models come from the registry: `rlhf-studio models add NAME FOLDER`, or train one in the Train tab."


def streamed(bound: Callable[..., Any]) -> Callable[..., Any]:
    """A bound generator handler as a generator function again: Gradio streams what an event function yields only
    when inspect.isgeneratorfunction says it is one, which bind's plain wrapper is not. functools.wraps keeps the
    signature Gradio reads (bind's)."""
    @functools.wraps(bound)
    def stream(*args, **kwargs):
        yield from bound(*args, **kwargs)

    return stream



def build(ctx: UIContext):

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
    bound = gr.Markdown(elem_id="chat-bound")  # the time bound, seen before asking
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

    load_outputs = [model, reward_model, score, setting_inputs[SETTING_NAMES.index("max_new_tokens")]]
    reload_models.click(bind(model_lists.load, ctx), None, load_outputs, api_name="chat_models")
    if ctx.app is not None:
        ctx.app.load(quiet_before_password_change(bind(model_lists.load, ctx), len(load_outputs)), None, load_outputs,
                     api_name="chat_load")
    send_inputs = [message, chatbot, model, system, *setting_inputs]
    send_event = streamed(bind(conversation.send, ctx))
    shared = GENERATING_EVENTS
    show = bind(show_bound, ctx)
    if ctx.app is not None:
        # On page load no model is picked yet: the bound for the server's own model.
        ctx.app.load(quiet_before_password_change(bind(show_bound, ctx, ""), 1), None, bound, api_name="chat_bound")
    # After each answer the bound is shown again: the speed it is worked out from follows every answer.
    send.click(send_event, send_inputs, [chatbot, message], api_name="chat_send", **shared).then(
        show, [model], bound, api_name=False, show_progress="hidden")
    message.submit(send_event, send_inputs, [chatbot, message], api_name="chat_submit", **shared).then(
        show, [model], bound, api_name=False, show_progress="hidden")
    clear.click(bind(conversation.clear, ctx), None, [chatbot, message, scores, rate_status], api_name="chat_clear")
    model.change(conversation.model_changed, None, [chatbot, scores, rate_status], api_name=False,
                 show_progress="hidden")
    model.change(show, [model], bound, api_name=False, show_progress="hidden")
    best.click(bind(best_of_n, ctx), [message, chatbot, model, reward_model, n, system, *setting_inputs],
               [chatbot, message, scores], api_name="chat_best_of_n", **shared).then(
        show, [model], bound, api_name=False, show_progress="hidden")
    rate.click(bind(rating.rate, ctx), [chatbot, model, score, *setting_inputs], rate_status,
               api_name="chat_rate", trigger_mode="once")
    thumbs_up.click(bind(rating.thumb, ctx, True), [chatbot, model, *setting_inputs], rate_status,
                    api_name="chat_thumbs_up", trigger_mode="once")
    thumbs_down.click(bind(rating.thumb, ctx, False), [chatbot, model, *setting_inputs], rate_status,
                      api_name="chat_thumbs_down", trigger_mode="once")

    def on_tab(tab: gr.Tab) -> None:
        # Opening the tab reads the registry again: no "↻ Models" click needed for a model
        # registered or trained since the page loaded.
        tab.select(quiet_before_password_change(bind(model_lists.reload_lists, ctx), 2), None, [model, reward_model],
                   api_name="chat_model_lists", show_progress="hidden")

    return on_tab
