"""What the Rate and Rank tabs share (this module is not a tab): the shown item's key, the counter, the training
banner, undo, the guidelines read again on select and the live "N remaining" count, the row of buttons under an
item and the wiring of their events (`wire`), so each tab says only what is its own: its widgets, its submit and
skip.

The handlers here are module functions taking the UIContext and the label kind first, bound to their events
by the tabs (binding.bind).
"""
from __future__ import annotations

import inspect
import sqlite3
from dataclasses import dataclass, field
from typing import Any, Callable

import gradio as gr

from labeler.services.data import labeling
from labeler.services.labels import questions
from labeler.services.execution import runs
from labeler.errors import InputError, PermissionDenied
from labeler.services.data.projects import get_project
from labeler.services.labels.questions import ItemAnswers, Question
from labeler.services.training.stages import model_name
from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.gradio_internals import QUIET
from labeler.ui.roles import check_role, requires
from labeler.ui.session import quiet_before_password_change
from labeler.ui.soft_errors import log_refusal, ui_errors

# The concurrency group of every Rate and Rank handler (see FAST).
LABELLING = "labelling"
# How often a shown item's "N remaining" is read again (count), and the concurrency group of those reads.
COUNT_REFRESH_S = 5
COUNTS = "queue-counts"
# The keyboard handlers' event options: no progress overlay (it flashed "processing" over every component per
# key); one concurrency group for all labelling handlers, so requests queue in Gradio instead of spinning in
# SQLite's busy handler. shortcuts.js sends one request at a time and queues the keys typed meanwhile;
# trigger_mode="once" drops a second mouse click while one runs (the key makes a repeat harmless anyway).
FAST = {"show_progress": "hidden", "trigger_mode": "once", "concurrency_id": LABELLING, "concurrency_limit": 1}
# Tells shortcuts.js that the request finished (success or error), so it sends the next queued key. Wired with
# both .success and .failure: Gradio 6.31's front end dispatches a .then only after a success (Blocks.svelte
# fires "all" triggers on completion, only "failure" ones on an error), so a refused label never told the
# script and the keyboard froze for its 20 s STUCK_MS.
DONE_JS = """() => { if (window.__rlhfStudioDone) window.__rlhfStudioDone(); }"""
# The live count's key, or "" (nothing read, nothing renewed) while the tab is hidden, the browser tab in the
# background or the user idle (shortcuts.js: no key, click or pointer move for a while): the count also renews
# the hold on an item a training run waits for (labeling.keep_holding), which an idle annotator must lose.
COUNT_JS = """(key) => {{
  const active = window.__rlhfStudioActive;
  return active && !active("{name}") ? "" : key;
}}"""


# ---- the project's questions beside the main label --------------------------------------------------
# Criterion widgets are built once per slot and shown, labelled and given their scale per item (a criterion added
# later needs no restart); a project asking more than MAX_CRITERIA has the rest answered through the CLI or API.
MAX_CRITERIA = 6
# The letter that ticks the k-th flag (shortcuts.js reads the same order): a-d, then f-i, skipping e (correction).
FLAG_KEYS = "abcdfghi"
CORRECTION_KEY = "e"
# A new item on screen (its key changed) clears the answers to the questions, in the page: Rate's keyboard path
# sends only the item's seven plain values (rate.item_view.item_outputs), and an item back after an undo is
# answered again as its score is.
CLEARED_JS = """() => ["", [], {nulls}]"""


def asked(db, project: str) -> tuple[list[Question], list[Question]]:
    """The criteria (the project's own score left out) and flags people are asked now, at most the slots shown."""
    criteria = questions.criteria(db, project)[1:][:MAX_CRITERIA]
    flags = [q for q in questions.list_questions(db, project, include_retired=False) if q.kind == "flag"]
    return criteria, flags[:len(FLAG_KEYS)]


def criterion_label(question: Question) -> str:
    guideline = f": {question.guideline}" if question.guideline else ""
    return f"{question.name} ({question.scale_min}-{question.scale_max}){guideline}"


def criterion_updates(criteria: list[Question]) -> list:
    """One update per criterion slot: shown with its name, guideline and scale (unanswered), or hidden."""
    updates = []
    for slot in range(MAX_CRITERIA):
        if slot < len(criteria):
            q = criteria[slot]
            choices = [(str(v), v) for v in range(q.scale_min, q.scale_max + 1)]
            updates.append(gr.update(visible=True, label=criterion_label(q), choices=choices,
                                     value=None, interactive=True))
        else:
            updates.append(gr.update(visible=False, value=None))
    return updates


def flag_choices(flags: list[Question]) -> list[tuple[str, str]]:
    return [(f"{q.name} ({key})", q.name) for q, key in zip(flags, FLAG_KEYS)]


def flags_update(flags: list[Question], ticked=()) -> dict:
    return gr.update(choices=flag_choices(flags), value=list(ticked), visible=bool(flags))


def questions_hint(criteria: list[Question], flags: list[Question]) -> str:
    """The keys for the questions asked, under the item (empty when the project asks only its own score)."""
    if not criteria and not flags:
        return ""
    parts = []
    if criteria:
        parts.append("**digits** score the highlighted question (the main score first, then "
                     + ", ".join(q.name for q in criteria) + ") and move to the next; **Enter** submits")
    if flags:
        parts.append(", ".join(f"**{key}** = {q.name}" for q, key in zip(flags, FLAG_KEYS)) + " (toggle a flag)")
    parts.append(f"**{CORRECTION_KEY}** = write a better answer, starting from the shown one")
    return "Questions: " + "; ".join(parts) + "."


def item_answers(db, project: str, criterion_values, flags_value, correction_value) -> ItemAnswers:
    """The question widgets' values as the service takes them: criterion slot k is the k-th criterion asked."""
    criteria, _ = asked(db, project)
    values = list(criterion_values or ())
    extra = [v for v in values[len(criteria):] if v not in (None, "")]
    if extra:
        raise InputError(f"the project asks {len(criteria)} criteria; got a score for slot {len(criteria) + 1}: "
                         "click Refresh", field="scores")
    scores = {q.name: v for q, v in zip(criteria, values) if v not in (None, "")}
    if flags_value in (None, ""):
        flags_value = []
    flags = tuple(flags_value) if isinstance(flags_value, list) else flags_value  # the service checks its type
    return ItemAnswers(scores=scores, flags=flags, correction=correction_value if correction_value not in (None, "") else None)


def tail_signature(handler, fixed: int, tail: list[tuple[str, Any]]) -> inspect.Signature:
    """`handler`'s first `fixed` parameters (ctx ... request), then `tail`'s named, defaulted ones in place of its
    *args: how Gradio and gradio_client see a submit whose optional inputs come after the request (an API caller
    leaves them out)."""
    kept = list(inspect.signature(handler).parameters.values())[:fixed]
    named = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default) for name, default in tail]
    return inspect.Signature([*kept, *named])


def cleared_js() -> str:
    return CLEARED_JS.format(nulls=", ".join(["null"] * MAX_CRITERIA))


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


REFUSED_TITLE = "Label not stored"


def stored_or_next(handler: Callable, store: Callable[[], tuple], show_next: Callable[[], tuple]) -> tuple:
    """`store()` (a submit returning the next item's outputs), or, when the service refuses the label because the
    item can no longer take it (labeling.ItemUnavailable: its hold passed to another annotator, its overlap is
    full, the user labelled it already, its prompt is held out; or PermissionDenied: it is not the user's), a
    toast saying why and `show_next()`: the next item loads by itself, so the keyboard goes on (it once refused
    every key until the mouse pressed Refresh). A slip on the item shown (no score picked, a bad ranking) still
    fails and keeps the item."""
    try:
        return store()
    except (labeling.ItemUnavailable, PermissionDenied) as refusal:
        log_refusal(handler, refusal)
        gr.Warning(f"{refusal} Here is your next item.", title=REFUSED_TITLE)
        return show_next()


# What a label of each kind is called, and what the user does with an item, in Undo's message.
UNDO_WORDS = {"rating": ("score", "rate"), "ranking": ("ranking", "rank")}


def undo_message(undone, label: str, verb: str) -> str:
    """What Undo did, said every time: a skip is taken back like a label (the skipped item comes back first)."""
    if undone is None:
        return "Nothing to undo."
    # No item id: it means nothing to an annotator, who sees the item itself come back.
    if undone.action == "skip":
        return f"Undid your last skip: that item is back, {verb} it or skip it again."
    return f"Undid your last {label}: that item is back, {verb} it again."


@requires("user")
def undo(ctx: UIContext, kind: str, show_next: Callable[..., tuple], request: gr.Request) -> tuple:
    """Take back the user's last label or skip of `kind`, say which (a toast), and show the item it brings back
    (`show_next(ctx, db, username)`: the tab's full outputs, as undo can leave the "all done" screen). The
    body of each tab's undo handler, which is what its event binds."""
    username = ctx.username(request)
    with ctx.connection() as db:
        gr.Info(undo_message(questions.undo_with_answers(db, ctx.project, username, kind), *UNDO_WORDS[kind]))
        return show_next(ctx, db, username)


@ui_errors
@requires("user")
def guidelines(ctx: UIContext, kind: str, request: gr.Request) -> str:
    """The project's guidelines for `kind`, read again when the tab is selected: the keyboard path does not resend
    them with every item, and an admin may have changed them since the page loaded."""
    with ctx.connection() as db:
        return get_project(db, ctx.project).guidelines_for(kind)


def count(ctx: UIContext, kind: str, key_value, request: gr.Request):
    """The counter of the Rate or Rank tab read again while an item is shown: answers generated meanwhile (a run, the
    Data tab, the CLI) show up in "N remaining" without a reload. Only the count: the item on screen, the score or
    the half-made ranking stay as they are. The user is active on the item (COUNT_JS), so an item a training run
    waits for stays theirs (labeling.keep_holding). The training banner is read again with it: once the run has
    ended it goes (it said the labels were training a cancelled run until a Refresh). The input is the shown
    item's key; with none ("All done") nothing changes, because shortcuts.js's poll presses Refresh there, which
    shows the next item and its count together. A refusal (logged out, a one-time password to replace) or a busy
    database leaves the counter too: every COUNT_REFRESH_S, a toast would bury the page, and the user's next click
    says what is wrong."""
    if not key_value:
        return gr.skip(), gr.skip()
    try:
        user = check_role(ctx, request, "user")  # here, not ui_errors: a refusal leaves the counter as it is
        item_id, _ = parse_key(str(key_value))
        with ctx.connection() as db:
            labeling.keep_holding(db, ctx.project, user.username, item_id)
            # The banner too: a run that ended (finished, cancelled) no longer claims the annotator's labels.
            return (counter_markdown(*labeling.progress(db, ctx.project, user.username, kind)),
                    training_banner(db, labeling.run_of_item(db, item_id)))
    except (InputError, PermissionDenied, sqlite3.OperationalError):
        return gr.skip(), gr.skip()


def on_select(ctx: UIContext, kind: str, show_item: Callable[..., tuple], n_outputs: int, key_value,
              request: gr.Request) -> tuple:
    """The Rate or Rank tab is selected: when the user's next item (labeling.next_item, an item a training run
    waits for first) is not the one shown, show it (`show_item(ctx, db, username, item)`: the tab's full outputs).
    The page load takes no run item (the page may open on another tab), so this is where a person who comes to
    the tab picks it up. The item already shown leaves everything as it is (a half-made ranking stays). A refusal
    (a one-time password to replace) changes nothing, as the page load does."""
    try:
        user = check_role(ctx, request, "user")
        shown = parse_key(str(key_value))[0] if key_value else None
    except (InputError, PermissionDenied):
        return tuple(gr.skip() for _ in range(n_outputs))
    with ctx.connection() as db:
        item = labeling.next_item(db, ctx.project, user.username, kind)
        if item is not None and item.item_id == shown:
            return tuple(gr.skip() for _ in range(n_outputs))
        return show_item(ctx, db, user.username, item)


def live_count(ctx: UIContext, kind: str, key, counter, banner, api_name: str) -> None:
    """A gr.Timer that keeps `counter` and `banner` (the tab's Markdowns) current while an item is shown (count).

    A read of the queue's counters (labeling.progress: a few indexed rows), as a plain value: no Gradio pre- or
    postprocessing. Its own concurrency group, not the labelling one, so labels never wait behind counts;
    trigger_mode="once" drops a tick while the previous one is still out.
    """
    timer = gr.Timer(COUNT_REFRESH_S)
    timer.tick(bind(count, ctx, kind), [key], [counter, banner], api_name=api_name, **QUIET,
               js=COUNT_JS.format(name=api_name.split("_")[0]),
               trigger_mode="once", preprocess=False, postprocess=False, concurrency_id=COUNTS, concurrency_limit=2)


@dataclass(frozen=True)
class Buttons:
    """The row under an item: Submit, Skip, Undo last, Refresh."""

    submit: gr.Button
    skip: gr.Button
    undo: gr.Button
    refresh: gr.Button


def buttons(name: str, submit_label: str) -> Buttons:
    """The tab `name`'s row of buttons (elem_ids <name>-submit, -skip, -undo, -refresh: the keyboard script and the
    browser tests find them by these)."""
    with gr.Row():
        return Buttons(gr.Button(submit_label, variant="primary", elem_id=f"{name}-submit"),
                       gr.Button("Skip", elem_id=f"{name}-skip"), gr.Button("Undo last", elem_id=f"{name}-undo"),
                       gr.Button("Refresh", elem_id=f"{name}-refresh"))


@dataclass(frozen=True)
class Event:
    """A tab's own event on one of its buttons: the handler (a module function taking the UIContext first), what
    it reads and what it shows, and its options besides FAST (a keyboard path's js, raw payloads)."""

    handler: Callable[..., Any]
    inputs: list
    outputs: list
    options: dict[str, Any] = field(default_factory=dict)


def wire(ctx: UIContext, name: str, kind: str, row: Buttons, *, submit: Event, skip: Event, undo: Callable,
         next_item: Callable, load_item: Callable, show_item: Callable, outputs: list, key, counter, banner,
         guidelines_box) -> Callable[[gr.Tab], None]:
    """The events Rate and Rank share, each named `<name>_<event>` (gradio_client calls these names):

    submit, skip and undo (FAST, each followed by DONE_JS so shortcuts.js sends the next queued key; undo shows
    the full `outputs`, as it can bring an item back to the "all done" screen), refresh (`<name>_next`, showing
    `next_item`) and the page load (`<name>_load`, quiet while the password is a one-time one, showing
    `load_item`: no item a training run waits for), in the labelling concurrency group, and the live count of
    `counter` and the training `banner` while `key` names a shown item. Returns the hook app.build_app calls with
    the gr.Tab: its select reads the guidelines of `kind` again into `guidelines_box`, and shows a run's item
    first (`<name>_select`, on_select with `show_item`)."""
    own = {"submit": (row.submit, submit), "skip": (row.skip, skip), "undo": (row.undo, Event(undo, None, outputs))}
    for event, (button, spec) in own.items():
        sent = button.click(bind(spec.handler, ctx), spec.inputs, spec.outputs, api_name=f"{name}_{event}", **FAST,
                            **spec.options)
        sent.success(None, js=DONE_JS, api_name=f"{name}_{event}_done")
        sent.failure(None, js=DONE_JS, api_name=f"{name}_{event}_refused")
    # Refresh (the mouse, or the key `r` in shortcuts.js) tells the script when it is done, as a submit does.
    refreshed = row.refresh.click(bind(next_item, ctx), None, outputs, api_name=f"{name}_next",
                                  concurrency_id=LABELLING, concurrency_limit=1)
    refreshed.success(None, js=DONE_JS, api_name=f"{name}_next_done")
    refreshed.failure(None, js=DONE_JS, api_name=f"{name}_next_refused")
    live_count(ctx, kind, key, counter, banner, f"{name}_count")  # not the item: what the user picked stays
    if ctx.app is not None:
        ctx.app.load(quiet_before_password_change(bind(load_item, ctx), len(outputs)), None, outputs,
                     api_name=f"{name}_load", concurrency_id=LABELLING, concurrency_limit=1)

    def on_tab(tab: gr.Tab) -> None:
        tab.select(quiet_before_password_change(bind(guidelines, ctx, kind), 1), None, [guidelines_box],
                   api_name=f"{name}_guidelines", show_progress="hidden")
        tab.select(bind(on_select, ctx, kind, show_item, len(outputs)), [key], outputs, api_name=f"{name}_select",
                   **QUIET, concurrency_id=LABELLING, concurrency_limit=1)

    return on_tab
