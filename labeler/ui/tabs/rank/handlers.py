"""The Rank tab's handlers: show the next item, submit a ranking, skip, undo. Module functions taking the
UIContext first (bound to their events by the tab's build), each checking the caller's role itself."""
from __future__ import annotations

import dataclasses
import inspect

import gradio as gr

from labeler.services.data import labeling
from labeler.services.labels import questions
from labeler.errors import InputError
from labeler.ui.context import UIContext
from labeler.ui.roles import requires
from labeler.ui.soft_errors import ui_errors
from labeler.ui.tabs import labelling
from labeler.ui.tabs.labelling import parse_key
from labeler.ui.tabs.rank.item_view import KIND, MAX_RESPONSES, outputs_for, show_next
from labeler.ui.tabs.rank.ranks import order_from_ranks


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


def submit_signature(handler) -> inspect.Signature:
    """submit's signature as Gradio and gradio_client should see it: rank_1..rank_N defaulting to None.

    The handler takes `*ranks` (one per slot), which Gradio cannot name or give defaults; with named,
    optional ranks an API caller ranking 3 answers passes 3 ranks, not 3 and 5 Nones.
    """
    fixed = list(inspect.signature(handler).parameters.values())[:5]  # ctx, comment_value, current, key_value, request
    ranks = [inspect.Parameter(f"rank_{slot}", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
             for slot in range(1, MAX_RESPONSES + 1)]
    # Then the questions (the tab's build: the correction, then per slot its flags and criteria), optional too.
    asked = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
             for name in question_parameters()]
    return inspect.Signature([*fixed, *ranks, *asked])


def question_parameters() -> list[str]:
    return ["correction", *(name for slot in range(1, MAX_RESPONSES + 1)
                            for name in (f"flags_{slot}", *(f"criterion_{slot}_{c}"
                                                            for c in range(1, labelling.MAX_CRITERIA + 1))))]


def slot_answers(db, project: str, response_ids: list[int], order: list[list[int]], values: tuple) -> dict | None:
    """The questions' values after the ranks as {response id: ItemAnswers} for the answers shown (the correction
    belongs to the answer ranked first); None when none were sent (an API caller passing ranks only)."""
    if not values:
        return None
    correction, per_slot = values[0], values[1:]
    width = 1 + labelling.MAX_CRITERIA
    answers = {}
    for index, response_id in enumerate(response_ids):
        chunk = tuple(per_slot[index * width:(index + 1) * width])
        flags, criteria = (chunk[0] if chunk else None), chunk[1:]
        answers[response_id] = labelling.item_answers(db, project, criteria, flags, None)
    best = order[0][0]
    answers[best] = dataclasses.replace(answers[best], correction=correction if correction not in (None, "") else None)
    return answers


@requires("user")
def submit(ctx: UIContext, comment_value, current, key_value, request: gr.Request, *values) -> tuple:
    """Rank numbers for the answers in the order shown (`current`), for the item `key_value` names, with the
    answers to the project's questions.

    `values`: one rank per slot (None past the answers shown), then the questions' values (the tab's build:
    the correction, then per slot its flags and criteria; left out by an API caller passing ranks only);
    request comes before them because Gradio fills a gr.Request only into a positional parameter.
    """
    ranks, asked = values[:MAX_RESPONSES], values[MAX_RESPONSES:]
    # The role is checked before anything, as everywhere; the extra ranks are checked here, not by the signature
    # below (whose rank_N stop at the slots): a caller sending a rank too many must hear "This item has N
    # answers", not a TypeError.
    username = ctx.username(request)
    with ctx.connection() as db:
        # InputError, not gr.Error: a user's slip is one log line (soft_errors), not a traceback.
        if not current or not key_value:
            raise InputError("There is nothing to rank: click Refresh.")
        item_id, request_id = parse_key(key_value)
        if int(current["item_id"]) != item_id:
            raise InputError(f"The answers shown belong to item {current['item_id']}, not {item_id}: click Refresh.")
        response_ids = current["response_ids"]
        if any(rank not in (None, "") for rank in ranks[len(response_ids):]):
            raise InputError(f"This item has {len(response_ids)} answers: only ranks for those are expected.")
        order = order_from_ranks(response_ids, list(ranks[: len(response_ids)]))

        answers = slot_answers(db, ctx.project, response_ids, order, asked)

        def store() -> tuple:
            # Nothing asked beside the ranking (or an API caller sending ranks only): the path as before.
            if answers is None or (all(a == questions.ItemAnswers() for a in answers.values())
                                   and not questions.has_questions(db, ctx.project)):
                _, item = labeling.submit_ranking_and_next(
                    db, ctx.project, username, item_id, order, comment=(comment_value or "").strip(),
                    request_id=request_id,
                )
            else:
                _, item = questions.submit_ranking_with_answers(
                    db, ctx.project, username, item_id, order, answers, comment=(comment_value or "").strip(),
                    request_id=request_id)
            return outputs_for(db, ctx, username, item)

        return labelling.stored_or_next(submit, store, lambda: show_next(ctx, db, username))


submit.__signature__ = submit_signature(submit)
submit = ui_errors(submit)


@ui_errors
@requires("user")
def skip(ctx: UIContext, current, request: gr.Request) -> tuple:
    username = ctx.username(request)
    with ctx.connection() as db:
        if current:
            labeling.skip_item(db, ctx.project, username, int(current["item_id"]))
        return show_next(ctx, db, username)


@ui_errors
def undo(ctx: UIContext, request: gr.Request) -> tuple:
    """Take back the user's last ranking or skip and show that item again (labelling.undo)."""
    return labelling.undo(ctx, KIND, show_next, request)
