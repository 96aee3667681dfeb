"""What the Rank tab shows for one item (or for an empty queue), as the values of its widgets: the prompt, one
slot per answer (shown, its text, its rank choices), the questions about each answer and the correction, the
state naming the answers in the order shown, the key."""
from __future__ import annotations

import gradio as gr

from labeler.services.data import labeling
from labeler.services.data.labeling import MAX_RANKING_SIZE
from labeler.services.data.projects import get_project
from labeler.ui.context import UIContext
from labeler.ui.tabs import labelling
from labeler.ui.tabs.labelling import counter_markdown, item_key, training_banner

KIND = "ranking"
# One slot per answer an item can hold: the service's limit, so a larger ranking_size needs no UI change.
MAX_RESPONSES = MAX_RANKING_SIZE


def slot_updates(responses: list[dict]) -> list:
    updates = []
    n = len(responses)
    for index in range(MAX_RESPONSES):
        if index < n:
            response = responses[index]
            updates += [
                gr.update(visible=True),
                f"#### Answer {index + 1}\n\n{response['text'] or '*(empty answer)*'}",
                gr.update(choices=[str(rank) for rank in range(1, n + 1)], value=None, interactive=True),
            ]
        else:
            updates += [gr.update(visible=False), "", gr.update(choices=[], value=None)]
    return updates


def question_updates(asked: tuple[list, list], shown: int) -> list:
    """Per answer slot its flags and criterion slots (labelling.asked), shown for the `shown` answers; then the
    correction box, emptied."""
    criteria, flags = asked
    updates = []
    for index in range(MAX_RESPONSES):
        if index < shown:
            updates += [labelling.flags_update(flags), *labelling.criterion_updates(criteria)]
        else:
            updates += [gr.update(visible=False, value=[]), *labelling.criterion_updates([])]
    return [*updates, ""]


def item_outputs(item, banner: str = "", asked: tuple[list, list] = ([], [])) -> tuple:
    # The state: the response ids in the shuffled order shown, so rank k belongs to the k-th answer.
    state = {"item_id": item.item_id, "response_ids": [int(r["id"]) for r in item.responses]}
    return (
        banner,
        counter_markdown(item.done, item.remaining),
        f"### Prompt\n{item.prompt}",
        *slot_updates(item.responses),
        *question_updates(asked, len(item.responses)),
        # the comment box: a plain value, not gr.update(value=""), which costs Gradio a component
        # (rate.item_view.item_outputs)
        "",
        item.guidelines,
        state,
        item_key(item),
    )


def empty_outputs(done: int, remaining: int, guidelines: str) -> tuple:
    return (
        "",
        counter_markdown(done, remaining),
        "### All done\nNothing left to rank in this project right now.",
        *slot_updates([]),
        *question_updates(([], []), 0),
        "",
        guidelines,
        None,
        "",
    )


def outputs_for(db, ctx: UIContext, username: str, item) -> tuple:
    if item is None:
        done, remaining = labeling.progress(db, ctx.project, username, KIND)
        return empty_outputs(done, remaining, get_project(db, ctx.project).guidelines_for(KIND))
    return item_outputs(item, training_banner(db, item.run_id), labelling.asked(db, ctx.project))


def show_next(ctx: UIContext, db, username: str, *, run_items: bool = True) -> tuple:
    return outputs_for(db, ctx, username, labeling.next_item(db, ctx.project, username, KIND, run_items=run_items))


def show_item(ctx: UIContext, db, username: str, item) -> tuple:
    """The outputs for `item` (a QueueItem, or None for the "all done" screen)."""
    return outputs_for(db, ctx, username, item)
