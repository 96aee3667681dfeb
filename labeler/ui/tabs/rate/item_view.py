"""What the Rate tab shows for one item (or for an empty queue), as the values of its widgets.

Two shapes: the full outputs (page load, Refresh, Undo) set every widget, the keyboard path's (submit, skip) only
the item, as plain values (item_outputs says why).
"""
from __future__ import annotations

import inspect
import sqlite3

import gradio as gr

from labeler.services.data import labeling
from labeler.errors import InputError
from labeler.services.data.projects import get_project
from labeler.ui.context import UIContext
from labeler.ui.tabs import labelling
from labeler.ui.tabs.labelling import counter_markdown, item_key, training_banner
from storage import StorageError

KIND = "rating"
ALL_DONE = "### All done\nNothing left to rate in this project right now. New answers appear here as they are generated."


def markdown(text: str) -> str:
    """What Gradio's Markdown.postprocess sends (common indentation removed), for the events that skip it."""
    return inspect.cleandoc(text)


def scale_choices(likert_min: int, likert_max: int) -> list[tuple[str, int]]:
    return [(str(score), score) for score in range(likert_min, likert_max + 1)]


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


def empty_outputs(done: int, remaining: int, full: bool, guidelines: str = "") -> tuple:
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
    """Widgets for one QueueItem: `outputs` order when full, else `fast_outputs` order (see the tab's build).

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


def question_outputs(db, ctx: UIContext) -> tuple:
    """The full outputs' questions: the correction, the flags, the keys' hint and the criterion slots, as the
    project asks them now, unanswered."""
    criteria, flags = labelling.asked(db, ctx.project)
    return ("", labelling.flags_update(flags), labelling.questions_hint(criteria, flags),
            *labelling.criterion_updates(criteria))


def outputs_for(db, ctx: UIContext, username: str, item, *, full: bool) -> tuple:
    if item is None:
        done, remaining = labeling.progress(db, ctx.project, username, KIND)
        guidelines = get_project(db, ctx.project).guidelines_for(KIND) if full else ""
        shown = empty_outputs(done, remaining, full, guidelines)
    else:
        shown = item_outputs(item, training_banner(db, item.run_id), full=full)
    # The questions go before the guidelines, the last of the full outputs (the tab's build).
    return (*shown[:-1], *question_outputs(db, ctx), shown[-1]) if full else shown


def show_next(ctx: UIContext, db, username: str, *, full: bool = True, run_items: bool = True) -> tuple:
    item = labeling.next_item(db, ctx.project, username, KIND, run_items=run_items)
    return outputs_for(db, ctx, username, item, full=full)


def show_item(ctx: UIContext, db, username: str, item) -> tuple:
    """The full outputs for `item` (a QueueItem, or None for the "all done" screen)."""
    return outputs_for(db, ctx, username, item, full=True)
