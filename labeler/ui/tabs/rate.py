"""Rate tab: one prompt and one answer at a time, scored on the project's Likert scale.

Handlers are short adapters: widgets -> labeling service -> widgets. The page holds only the shown item's
key (its id and idempotency key); the queue itself lives in SQLite, so a refresh shows the same pending
item. A submit stores the label and returns the next item in one round trip. Every event has an api_name,
so gradio_client drives exactly these handlers.
"""
from __future__ import annotations

import inspect
import sqlite3

import gradio as gr

from labeler.services import labeling, runs
from labeler.services.errors import InputError, PermissionDenied
from labeler.services.projects import get_project
from labeler.services.stages import model_name
from labeler.ui.context import UIContext
from labeler.ui.roles import check_role, requires
from labeler.ui.session import quiet_before_password_change
from labeler.ui.soft_errors import ui_errors
from storage import StorageError

TITLE = "Rate"
KIND = "rating"
# The concurrency group of every Rate and Rank handler (see build).
LABELLING = "labelling"
# How often a shown item's "N remaining" is read again (count_handler), and the concurrency group of those reads.
COUNT_REFRESH_S = 5
COUNTS = "queue-counts"
SHORTCUTS = (
    "Keys: **digit** = score and submit, **s** = skip, **u** = undo the last score or skip (not while typing a comment)."
)


def counter_markdown(done: int, remaining: int) -> str:
    return f"**{done}** done · **{remaining}** remaining"


def banner_text(run_id: int | None, waiting: int | None = None, model: str | None = None) -> str:
    """The banner's Markdown; "" hides it (studio.css hides an empty banner, so no visibility update is sent)."""
    # A PPO run with human rewards is paused until these rollouts are labelled: say so in plain words (the
    # annotator's labels are its rewards now), it changes priorities.
    if run_id is None:
        return ""
    count = f", waiting for **{waiting}** more labels" if waiting else ""
    return (f"⏳ Your labels are training the model{f' **{model}**' if model else ''} right now (training run "
            f"**#{run_id}**{count}): its answers come first.")


def training_banner(db, run_id: int | None) -> str:
    """The banner for an item of training run `run_id` (rating or ranking): while the run is running, which
    model its labels train and how many more it waits for; "" for other items and once the run has ended."""
    if run_id is None:
        return ""
    run = runs.get_run(db, run_id)
    if run.status != "running":
        return ""
    model = model_name(run.stage, run.id, run.config.get("job", {}).get("output_name", ""))
    return banner_text(run_id, labeling.waiting_for_run(db, run_id), model)


def markdown(text: str) -> str:
    """What Gradio's Markdown.postprocess sends (common indentation removed), for the events that skip it."""
    return inspect.cleandoc(text)


def scale_choices(likert_min: int, likert_max: int) -> list[tuple[str, int]]:
    return [(str(score), score) for score in range(likert_min, likert_max + 1)]


def undo_message(undone, label: str, verb: str) -> str:
    """What Undo did, said every time: a skip is taken back like a label (the skipped item comes back first)."""
    if undone is None:
        return "Nothing to undo."
    if undone.action == "skip":
        return f"Undid your skip of item {undone.item_id}: it is back, {verb} it or skip it again."
    return f"Undid your {label} of item {undone.item_id}: it is back, {verb} it again."


def startup_choices(ctx: UIContext) -> list[tuple[str, int]]:
    """The project's scale when the server starts, as the score widget's built choices.

    Gradio checks a Radio's input against the choices of the session's copy of the widget, and a session the
    server has not seen (a page or API client sending its submit again after a server restart) has only the
    built copy: with no choices built in, every such retry was refused ("Value: 4 ... is not in the list of
    choices: []") until the client fetched a new item. rate_next still sets each item's own scale.
    """
    try:
        with ctx.connection() as db:
            project = get_project(db, ctx.project)
    except (InputError, StorageError, OSError, sqlite3.Error):  # no database or project yet (tests building a bare app)
        return []
    return scale_choices(project.likert_min, project.likert_max)


def item_key(item) -> str:
    """What the page (or an API client) sends back with a label: the item and this showing's idempotency key."""
    return f"{item.item_id}:{item.request_id}"


def parse_key(key: str | None) -> tuple[int, str]:
    """(item_id, request_id) from item_key's text; InputError naming the field when it is not one."""
    item_id, _, request_id = (key or "").strip().partition(":")
    if not item_id.isdigit() or not request_id:
        raise InputError(
            f"expected the key of the item shown, '<item id>:<request id>' as rate_next returned it, got {key!r}",
            field="key",
        )
    return int(item_id), request_id


ALL_DONE = "### All done\nNothing left to rate in this project right now. New answers appear here as they are generated."


def _empty_outputs(done: int, remaining: int, full: bool, guidelines: str = "") -> tuple:
    if not full:
        # The keyboard path's plain values: the key is "" (a further submit is refused with "click Refresh");
        # the scale keeps its choices until the next full load (a prop update costs what it costs, see below).
        return ("", counter_markdown(done, remaining), markdown(ALL_DONE), "", None, "", "")
    return (
        "",
        counter_markdown(done, remaining),
        ALL_DONE,
        "",
        gr.update(choices=[], value=None, interactive=False, label="Score"),
        gr.update(value=""),
        "",
        gr.update(interactive=False),
        gr.update(interactive=False),
        guidelines,
    )


def item_outputs(item, banner: str = "", *, full: bool = True) -> tuple:
    """Widgets for one QueueItem: `outputs` order when full, else `fast_outputs` order (see build).

    full=False is the keyboard path (submit, skip), whose events skip Gradio's pre- and postprocessing: plain
    values only, what Gradio's postprocessing would have sent. Each property update (gr.update, and gr.skip()
    too) makes Gradio 6.31 construct a new component for the session (~0.4 ms of CPU), and each plain value
    it postprocesses is a hop to a worker thread; a label changes only the item, so that is all it sends.
    The comment box is emptied with a plain "" even when it was empty: a gr.skip() there cost 11% of the
    server's CPU per label (py-spy, 20 annotators).
    """
    response = item.responses[0]
    counter = counter_markdown(item.done, item.remaining)
    prompt = markdown(f"### Prompt\n{item.prompt}")
    answer = markdown(response["text"] or "*(empty answer)*")
    if not full:
        return (banner, counter, prompt, answer, None, "", item_key(item))
    label = f"Score: {item.likert_min} = very bad … {item.likert_max} = excellent"
    return (
        banner,
        counter,
        prompt,
        answer,
        gr.update(choices=scale_choices(item.likert_min, item.likert_max), value=None, interactive=True, label=label),
        gr.update(value=""),
        item_key(item),
        gr.update(interactive=True),
        gr.update(interactive=True),
        item.guidelines,
    )


def outputs_for(db, ctx: UIContext, username: str, item, *, full: bool) -> tuple:
    if item is None:
        done, remaining = labeling.progress(db, ctx.project, username, KIND)
        guidelines = get_project(db, ctx.project).guidelines_for(KIND) if full else ""
        return _empty_outputs(done, remaining, full, guidelines)
    return item_outputs(item, training_banner(db, item.run_id), full=full)


def show_next(ctx: UIContext, db, username: str, *, full: bool = True) -> tuple:
    return outputs_for(db, ctx, username, labeling.next_item(db, ctx.project, username, KIND), full=full)


# The keyboard path (shortcuts.js): the score a digit key chose goes straight into the submit, without
# waiting for the Radio's change to reach Gradio's store; the mouse path leaves the inputs as they are.
SUBMIT_JS = """(score, comment, key) => {
  const typed = window.__rlhfStudioTake ? window.__rlhfStudioTake("rate") : null;
  return [typed === null ? score : typed, comment, key];
}"""
# Tells shortcuts.js that the request finished (success or error), so it sends the next queued key.
DONE_JS = """() => { if (window.__rlhfStudioDone) window.__rlhfStudioDone(); }"""


def guidelines_handler(ctx: UIContext, kind: str):
    """The project's guidelines for `kind`, read again when the tab is selected: the keyboard path does not resend
    them with every item, and an admin may have changed them since the page loaded."""

    @ui_errors
    @requires(ctx, "user")
    def guidelines(request: gr.Request):
        with ctx.connection() as db:
            return get_project(db, ctx.project).guidelines_for(kind)

    return guidelines


def count_handler(ctx: UIContext, kind: str):
    """The counter of the Rate or Rank tab read again while an item is shown: answers generated meanwhile (a run,
    the Data tab, the CLI) show up in "N remaining" without a reload. Only the count: the item on screen, the
    score or the half-made ranking stay as they are. The input is the shown item's key; with none ("All done")
    nothing changes, because shortcuts.js's poll presses Refresh there, which shows the next item and its count
    together. A refusal (logged out, a one-time password to replace) or a busy database leaves the counter too:
    every COUNT_REFRESH_S, a toast would bury the page, and the user's next click says what is wrong."""

    def count(key_value, request: gr.Request):
        if not key_value:
            return gr.skip()
        try:
            user = check_role(ctx, request, "user")  # here, not @requires: a refusal leaves the counter as it is
            with ctx.connection() as db:
                return counter_markdown(*labeling.progress(db, ctx.project, user.username, kind))
        except (InputError, PermissionDenied, sqlite3.OperationalError):
            return gr.skip()

    return count


def live_count(ctx: UIContext, kind: str, key, counter, api_name: str) -> None:
    """A gr.Timer that keeps `counter` (the tab's Markdown) current while an item is shown (count_handler).

    A read of the queue's counters (labeling.progress: a few indexed rows), as a plain value: no Gradio pre- or
    postprocessing. Its own concurrency group, not the labelling one, so labels never wait behind counts;
    trigger_mode="once" drops a tick while the previous one is still out.
    """
    timer = gr.Timer(COUNT_REFRESH_S)
    timer.tick(count_handler(ctx, kind), [key], [counter], api_name=api_name, show_progress="hidden",
               trigger_mode="once", preprocess=False, postprocess=False, concurrency_id=COUNTS, concurrency_limit=2)


def build(ctx: UIContext):
    """The tab's widgets and events; returns the hook app.build_app calls with the gr.Tab (its select event)."""
    banner = gr.Markdown(elem_id="rate-banner", elem_classes=["studio-banner"])  # hidden while empty (studio.css)
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            counter = gr.Markdown(elem_id="rate-counter")
            prompt = gr.Markdown(elem_id="rate-prompt", elem_classes=["studio-prompt"])
            response = gr.Markdown(
                elem_id="rate-response", elem_classes=["studio-response"]
            )
            score = gr.Radio(choices=startup_choices(ctx), label="Score", elem_id="rate-score")
            comment = gr.Textbox(label="Comment (optional)", lines=1, max_lines=4, elem_id="rate-comment")
            # The shown item's key ('<item id>:<request id>'): sent back with the label, so a retried or
            # doubled submit stores one label and a submit names the item it labels. In the page, not in
            # server-side session state, so gradio_client sees it and sends it as the browser does.
            key = gr.Textbox(visible="hidden", elem_id="rate-key", label="Item key")
            with gr.Row():
                submit = gr.Button("Submit", variant="primary", elem_id="rate-submit")
                skip = gr.Button("Skip", elem_id="rate-skip")
                undo = gr.Button("Undo last", elem_id="rate-undo")
                refresh = gr.Button("Refresh", elem_id="rate-refresh")
            gr.Markdown(SHORTCUTS, elem_classes=["studio-hint"])
        with gr.Column(scale=2):
            with gr.Accordion("Guidelines", open=True):
                guidelines = gr.Markdown(elem_id="rate-guidelines")

    # The keyboard path's outputs are the first seven of the full ones, so the key is [6] in both.
    fast_outputs = [banner, counter, prompt, response, score, comment, key]
    outputs = [*fast_outputs, submit, skip, guidelines]

    @ui_errors
    @requires(ctx, "user")
    def rate_next(request: gr.Request):
        with ctx.connection() as db:
            return show_next(ctx, db, ctx.username(request))

    @ui_errors
    @requires(ctx, "user")
    def rate_submit(score_value, comment_value, key_value, request: gr.Request):
        """Store the score of the item `key_value` names and return the next item: one round trip per label.

        The inputs arrive as sent (no Gradio preprocessing): the service validates the score (a number on
        the project's scale) and the comment, parse_key the key.
        """
        username = ctx.username(request)
        with ctx.connection() as db:
            # InputError, not gr.Error: a user's slip is one log line (soft_errors), not a traceback.
            if not key_value:
                raise InputError("There is no item to rate: click Refresh.")
            item_id, request_id = parse_key(str(key_value))
            if score_value is None or score_value == "":
                raise InputError("Pick a score first (or press a digit key).")
            comment_text = str(comment_value or "").strip()
            _, item = labeling.submit_rating_and_next(
                db, ctx.project, username, item_id, score_value, comment=comment_text, request_id=request_id,
            )
            return outputs_for(db, ctx, username, item, full=False)

    @ui_errors
    @requires(ctx, "user")
    def rate_skip(key_value, request: gr.Request):
        username = ctx.username(request)
        with ctx.connection() as db:
            if key_value:
                labeling.skip_item(db, ctx.project, username, parse_key(str(key_value))[0])
            return show_next(ctx, db, username, full=False)

    @ui_errors
    @requires(ctx, "user")
    def rate_undo(request: gr.Request):
        username = ctx.username(request)
        with ctx.connection() as db:
            gr.Info(undo_message(labeling.undo_last_action(db, ctx.project, username, KIND), "score", "rate"))
            return show_next(ctx, db, username)

    # The keyboard handlers: no progress overlay (it flashed "processing" over every component per key);
    # one concurrency group for all labelling handlers, so requests queue in Gradio instead of spinning in
    # SQLite's busy handler. shortcuts.js sends one request at a time and queues the keys typed meanwhile;
    # trigger_mode="once" drops a second mouse click while one runs (the key makes a repeat harmless anyway).
    fast = {"show_progress": "hidden", "trigger_mode": "once", "concurrency_id": LABELLING, "concurrency_limit": 1}
    # Submit and skip also skip Gradio's pre- and postprocessing (item_outputs says why): with 20 annotators
    # that and the pooled connections took the server from ~9 to ~4 ms of CPU per label (bench/annotators.py).
    raw = {"preprocess": False, "postprocess": False}
    submit.click(rate_submit, [score, comment, key], fast_outputs, api_name="rate_submit", js=SUBMIT_JS, **fast,
                 **raw).then(None, js=DONE_JS, api_name="rate_submit_done")
    skip.click(rate_skip, [key], fast_outputs, api_name="rate_skip", **fast, **raw).then(
        None, js=DONE_JS, api_name="rate_skip_done")
    # Undo can bring an item back to the "all done" screen: it re-enables the buttons (full outputs).
    undo.click(rate_undo, None, outputs, api_name="rate_undo", **fast).then(
        None, js=DONE_JS, api_name="rate_undo_done")
    refresh.click(rate_next, None, outputs, api_name="rate_next", concurrency_id=LABELLING, concurrency_limit=1)
    live_count(ctx, KIND, key, counter, "rate_count")
    if ctx.app is not None:
        ctx.app.load(quiet_before_password_change(rate_next, len(outputs)), None, outputs, api_name="rate_load",
                     concurrency_id=LABELLING, concurrency_limit=1)

    def on_tab(tab: gr.Tab) -> None:
        tab.select(quiet_before_password_change(guidelines_handler(ctx, KIND), 1), None, [guidelines],
                   api_name="rate_guidelines", show_progress="hidden")

    return on_tab
