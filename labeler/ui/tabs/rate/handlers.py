"""The Rate tab's handlers: show the next item, submit a score, skip, undo. Module functions taking the UIContext
first (bound to their events by the tab's build), each checking the caller's role itself.

Submit and skip answer in the keyboard path's shape (item_view.item_outputs, full=False); show and undo in the
full one, since undo can bring an item back to the "all done" screen and must turn the buttons on again.
"""
from __future__ import annotations

import gradio as gr

from labeler.services.data import labeling
from labeler.services.labels import questions
from labeler.errors import InputError
from labeler.ui.context import UIContext
from labeler.ui.roles import requires
from labeler.ui.soft_errors import ui_errors
from labeler.ui.tabs import labelling
from labeler.ui.tabs.labelling import parse_key
from labeler.ui.tabs.rate.item_view import KIND, outputs_for, show_next


@ui_errors
@requires("user")
def next_item(ctx: UIContext, request: gr.Request) -> tuple:
    """The user's pending item, or the next one (Refresh): an item a training run waits for first."""
    with ctx.connection() as db:
        return show_next(ctx, db, ctx.username(request))


@ui_errors
@requires("user")
def load_item(ctx: UIContext, request: gr.Request) -> tuple:
    """The page load's item: the user's pending one, or the next one a run does not wait for (the page may open
    on another tab, or for an admin who does not label; a run's item held by them would wait for nobody)."""
    with ctx.connection() as db:
        return show_next(ctx, db, ctx.username(request), run_items=False)


@requires("user")
def submit(ctx: UIContext, score_value, comment_value, key_value, request: gr.Request, correction_value=None,
           flags_value=None, *criterion_values) -> tuple:
    """Store the score of the item `key_value` names, with the answers to the project's questions (the
    correction, the flags ticked, a score per criterion slot), and return the next item: one round trip per label.

    The inputs arrive as sent (no Gradio preprocessing): the service validates the score (a number on
    the project's scale), the answers and the comment, parse_key the key. The request comes before the criterion
    scores because Gradio fills a gr.Request only into a positional parameter (as Rank's ranks).
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

        answers = labelling.item_answers(db, ctx.project, criterion_values, flags_value, correction_value)

        def store() -> tuple:
            if answers == questions.ItemAnswers() and not questions.has_questions(db, ctx.project):
                # Nothing asked beside the score: the one-criterion path as before (no answers read or written).
                _, item = labeling.submit_rating_and_next(
                    db, ctx.project, username, item_id, score_value, comment=comment_text, request_id=request_id,
                )
            else:
                _, item = questions.submit_rating_with_answers(
                    db, ctx.project, username, item_id, score_value, answers, comment=comment_text,
                    request_id=request_id)
            return outputs_for(db, ctx, username, item, full=False)

        return labelling.stored_or_next(submit, store, lambda: show_next(ctx, db, username, full=False))


submit.__signature__ = labelling.tail_signature(
    submit, 5, [("correction_value", None), ("flags_value", None),
                *((f"criterion_{slot}", None) for slot in range(1, labelling.MAX_CRITERIA + 1))])
submit = ui_errors(submit)


@ui_errors
@requires("user")
def skip(ctx: UIContext, key_value, request: gr.Request) -> tuple:
    username = ctx.username(request)
    with ctx.connection() as db:
        if key_value:
            labeling.skip_item(db, ctx.project, username, parse_key(str(key_value))[0])
        return show_next(ctx, db, username, full=False)


@ui_errors
def undo(ctx: UIContext, request: gr.Request) -> tuple:
    """Take back the user's last score or skip and show that item again (labelling.undo)."""
    return labelling.undo(ctx, KIND, show_next, request)
