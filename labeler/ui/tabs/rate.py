"""Rate tab: one prompt and one answer at a time, scored on the project's Likert scale.

Handlers are short adapters: widgets -> labeling service -> widgets. The gr.State holds ids only
(item, response, request id, when it was shown); the queue itself lives in SQLite, so a refresh shows
the same pending item. Every event has an api_name, so gradio_client drives exactly these handlers.
"""
from __future__ import annotations

import time
import uuid

import gradio as gr

from labeler.ui.context import UIContext
from labeler.ui.session import require_user, ui_errors

TITLE = "Rate"
KIND = "rating"
DEFAULT_GUIDELINES = (
    "Read the prompt, then the answer. Score how good the answer is **as a reply to that prompt**: "
    "helpful, correct, on topic, well written. Use the whole scale; skip what you cannot judge."
)
SHORTCUTS = "Keys: **digit** = score and submit, **s** = skip, **u** = undo last (not while typing a comment)."


def counter_markdown(done: int, remaining: int) -> str:
    return f"**{done}** done · **{remaining}** remaining"


def banner_update(run_id: int | None, waiting: int | None = None) -> dict:
    # A PPO run with human rewards is paused until these rollouts are rated: say so, it changes priorities.
    if run_id is None:
        return gr.update(value="", visible=False)
    count = f" for **{waiting}** more labels" if waiting else ""
    return gr.update(
        value=f"⏳ Training run **#{run_id}** is waiting{count}: its answers come first.", visible=True
    )


def scale_choices(likert_min: int, likert_max: int) -> list[tuple[str, int]]:
    return [(str(score), score) for score in range(likert_min, likert_max + 1)]


def _empty_outputs(done: int, remaining: int) -> tuple:
    return (
        banner_update(None),
        counter_markdown(done, remaining),
        "### All done\nNothing left to rate in this project right now. New answers appear here as they are generated.",
        "",
        gr.update(choices=[], value=None, interactive=False, label="Score"),
        gr.update(value=""),
        gr.update(),
        None,
        gr.update(interactive=False),
        gr.update(interactive=False),
    )


def item_outputs(item, waiting: int | None = None) -> tuple:
    """Widgets for one QueueItem (or the 'all done' screen for None), in OUTPUTS order minus the guidelines."""
    response = item.responses[0]
    state = {
        "item_id": item.item_id,
        "response_id": response["id"],
        # A fresh id per shown item: a double click or a retried request stores one label.
        "request_id": uuid.uuid4().hex,
        "shown_at": time.time(),
    }
    label = f"Score: {item.likert_min} = very bad … {item.likert_max} = excellent"
    return (
        banner_update(item.run_id, waiting),
        counter_markdown(item.done, item.remaining),
        f"### Prompt\n{item.prompt}",
        response["text"] or "*(empty answer)*",
        gr.update(choices=scale_choices(item.likert_min, item.likert_max), value=None, interactive=True, label=label),
        gr.update(value=""),
        item.guidelines or DEFAULT_GUIDELINES,
        state,
        gr.update(interactive=True),
        gr.update(interactive=True),
    )


def show_next(ctx: UIContext, db, username: str) -> tuple:
    from labeler.services import labeling

    item = labeling.next_item(db, ctx.project, username, KIND)
    if item is None:
        done, remaining = labeling.progress(db, ctx.project, username, KIND)
        return _empty_outputs(done, remaining)
    waiting = labeling.waiting_for_run(db, item.run_id) if item.run_id is not None else None
    return item_outputs(item, waiting)


def build(ctx: UIContext) -> None:
    from labeler.services import labeling

    state = gr.State(None)
    banner = gr.Markdown(visible=False, elem_id="rate-banner", elem_classes=["studio-banner"])
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            counter = gr.Markdown(elem_id="rate-counter")
            prompt = gr.Markdown(elem_id="rate-prompt", elem_classes=["studio-prompt"])
            response = gr.Markdown(
                elem_id="rate-response", elem_classes=["studio-response"]
            )
            score = gr.Radio(choices=[], label="Score", elem_id="rate-score")
            comment = gr.Textbox(label="Comment (optional)", lines=1, max_lines=4, elem_id="rate-comment")
            with gr.Row():
                submit = gr.Button("Submit", variant="primary", elem_id="rate-submit")
                skip = gr.Button("Skip", elem_id="rate-skip")
                undo = gr.Button("Undo last", elem_id="rate-undo")
                refresh = gr.Button("Refresh", elem_id="rate-refresh")
            gr.Markdown(SHORTCUTS, elem_classes=["studio-hint"])
        with gr.Column(scale=2):
            with gr.Accordion("Guidelines", open=True):
                guidelines = gr.Markdown(DEFAULT_GUIDELINES, elem_id="rate-guidelines")

    outputs = [banner, counter, prompt, response, score, comment, guidelines, state, submit, skip]

    @ui_errors
    def rate_next(request: gr.Request):
        with ctx.connection() as db:
            user = require_user(db, request)
            return show_next(ctx, db, user.username)

    @ui_errors
    def rate_submit(score_value, comment_value, current, request: gr.Request):
        with ctx.connection() as db:
            user = require_user(db, request)
            if not current:
                raise gr.Error("There is no item to rate: click Refresh.")
            if score_value is None or score_value == "":
                raise gr.Error("Pick a score first (or press a digit key).")
            seconds = max(0.0, time.time() - float(current.get("shown_at") or time.time()))
            labeling.submit_rating(
                db, ctx.project, user.username, int(current["item_id"]), float(score_value),
                comment=(comment_value or "").strip(), seconds=round(seconds, 2), request_id=current.get("request_id"),
            )
            return show_next(ctx, db, user.username)

    @ui_errors
    def rate_skip(current, request: gr.Request):
        with ctx.connection() as db:
            user = require_user(db, request)
            if current:
                labeling.skip_item(db, ctx.project, user.username, int(current["item_id"]))
            return show_next(ctx, db, user.username)

    @ui_errors
    def rate_undo(request: gr.Request):
        with ctx.connection() as db:
            user = require_user(db, request)
            item_id = labeling.undo_last(db, ctx.project, user.username, KIND)
            if item_id is None:
                gr.Info("Nothing to undo.")
            return show_next(ctx, db, user.username)

    # trigger_mode="once": a second click while the first submit runs is dropped in the browser;
    # the request_id makes it harmless on the server anyway.
    submit.click(rate_submit, [score, comment, state], outputs, api_name="rate_submit", trigger_mode="once")
    skip.click(rate_skip, [state], outputs, api_name="rate_skip", trigger_mode="once")
    undo.click(rate_undo, None, outputs, api_name="rate_undo", trigger_mode="once")
    refresh.click(rate_next, None, outputs, api_name="rate_next")
    if ctx.app is not None:
        ctx.app.load(rate_next, None, outputs, api_name="rate_load")
