"""Rank tab: 2 to 8 answers to one prompt (labeling.MAX_RANKING_SIZE), ordered best to worst, ties allowed.

Each answer gets a rank number (1 = best); equal numbers are a tie. The ranks become one ranking,
`order` best to worst with tied response ids grouped: ranks {a: 2, b: 1, c: 2} -> [[b], [a, c]].
Keyboard: type the answer numbers best to worst ("3 1 2"), "=" before a number ties it with the
previous one, Enter submits (labeler/ui/static/shortcuts.js).
"""
from __future__ import annotations

import inspect

import gradio as gr

from labeler.services import labeling
from labeler.services.errors import InputError
from labeler.services.labeling import MAX_RANKING_SIZE
from labeler.services.projects import get_project
from labeler.ui.context import UIContext
from labeler.ui.roles import check_role, requires
from labeler.ui.session import quiet_before_password_change
from labeler.ui.soft_errors import ui_errors
from labeler.ui.tabs.rate import (
    DONE_JS, LABELLING, counter_markdown, guidelines_handler, item_key, live_count, parse_key, training_banner,
    undo_message,
)

TITLE = "Rank"
KIND = "ranking"
# One slot per answer an item can hold: the service's limit, so a larger ranking_size needs no UI change.
MAX_RESPONSES = MAX_RANKING_SIZE
SLOTS_PER_ROW = 4  # 8 answers side by side are too narrow to read: the slots wrap in rows of 4
SHORTCUTS = (
    "Keys: type the answer numbers **best to worst** (e.g. `3 1 2`), **=** before a number ties it with the "
    "previous one (`1 = 2 3`), **Enter** submits, **Esc** starts over, **s** skips, **u** undoes the last ranking or skip."
)


def order_from_ranks(response_ids: list[int], ranks: list) -> list[list[int]]:
    """Best-to-worst groups from one rank number per response; equal numbers share a group.

    ranks may be gaps or dense (1, 1, 3 and 1, 1, 2 give the same order). A missing rank is an error,
    because an unranked answer would silently fall out of the training pairs.
    """
    if len(ranks) < len(response_ids):
        raise InputError("every answer needs a rank", field="rank")
    groups: dict[int, list[int]] = {}
    for position, (response_id, rank) in enumerate(zip(response_ids, ranks), start=1):
        if rank is None or rank == "":
            raise InputError(f"answer {position} has no rank: give every answer a number (1 = best)", field="rank")
        try:
            value = int(rank)
        except (TypeError, ValueError):
            raise InputError(f"answer {position}: rank {rank!r} is not a whole number", field="rank") from None
        if not 1 <= value <= len(response_ids):
            raise InputError(f"answer {position}: rank {value} is outside 1..{len(response_ids)}", field="rank")
        groups.setdefault(value, []).append(int(response_id))
    return [sorted(groups[rank]) for rank in sorted(groups)]


def _slot_updates(responses: list[dict]) -> list:
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


def item_outputs(item, banner: str = "") -> tuple:
    # The state: the response ids in the shuffled order shown, so rank k belongs to the k-th answer.
    state = {"item_id": item.item_id, "response_ids": [int(r["id"]) for r in item.responses]}
    return (
        banner,
        counter_markdown(item.done, item.remaining),
        f"### Prompt\n{item.prompt}",
        *_slot_updates(item.responses),
        "",  # the comment box: a plain value, not gr.update(value=""), which costs Gradio a component (rate.item_outputs)
        item.guidelines,
        state,
        item_key(item),
    )


def _empty_outputs(done: int, remaining: int, guidelines: str) -> tuple:
    return (
        "",
        counter_markdown(done, remaining),
        "### All done\nNothing left to rank in this project right now.",
        *_slot_updates([]),
        "",
        guidelines,
        None,
        "",
    )


def outputs_for(db, ctx: UIContext, username: str, item) -> tuple:
    if item is None:
        done, remaining = labeling.progress(db, ctx.project, username, KIND)
        return _empty_outputs(done, remaining, get_project(db, ctx.project).guidelines_for(KIND))
    return item_outputs(item, training_banner(db, item.run_id))


def show_next(ctx: UIContext, db, username: str) -> tuple:
    return outputs_for(db, ctx, username, labeling.next_item(db, ctx.project, username, KIND))


# The keyboard path (shortcuts.js): the ranks typed go straight into the submit (see rate.SUBMIT_JS). The
# ranks come last and as a rest parameter, so this needs no change when MAX_RESPONSES does; the typed list
# only covers the slots typed, the rest are null (unranked).
SUBMIT_JS = """(comment, current, key, ...ranks) => {
  const typed = window.__rlhfStudioTake ? window.__rlhfStudioTake("rank") : null;
  return [comment, current, key, ...(typed === null ? ranks : ranks.map((_, i) => typed[i] ?? null))];
}"""


def _submit_signature(handler) -> inspect.Signature:
    """rank_submit's signature as Gradio and gradio_client should see it: rank_1..rank_N defaulting to None.

    The handler takes `*ranks` (one per slot), which Gradio cannot name or give defaults; with named,
    optional ranks an API caller ranking 3 answers passes 3 ranks, not 3 and 5 Nones.
    """
    fixed = list(inspect.signature(handler).parameters.values())[:4]  # comment_value, current, key_value, request
    ranks = [inspect.Parameter(f"rank_{slot}", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
             for slot in range(1, MAX_RESPONSES + 1)]
    return inspect.Signature([*fixed, *ranks])


def build(ctx: UIContext):
    """The tab's widgets and events; returns the hook app.build_app calls with the gr.Tab (its select event)."""
    state = gr.State(None)
    banner = gr.Markdown(elem_id="rank-banner", elem_classes=["studio-banner"])  # hidden while empty (studio.css)
    slot_widgets: list = []
    with gr.Row(equal_height=False):
        with gr.Column(scale=4):
            counter = gr.Markdown(elem_id="rank-counter")
            prompt = gr.Markdown(elem_id="rank-prompt", elem_classes=["studio-prompt"])
            for row_start in range(1, MAX_RESPONSES + 1, SLOTS_PER_ROW):
                with gr.Row(equal_height=False, elem_classes=["studio-rank-row"]):
                    for index in range(row_start, min(row_start + SLOTS_PER_ROW, MAX_RESPONSES + 1)):
                        with gr.Column(visible=False, min_width=220, elem_classes=["studio-response"]) as column:
                            text = gr.Markdown(elem_id=f"rank-text-{index}")
                            # Built with every rank, so a submit from a session the server has not seen (a retry
                            # after a restart) reaches rank_submit, which asks for a Refresh (the shown order is
                            # session state), instead of Gradio's "not in the list of choices: []"
                            # (rate.startup_choices).
                            rank = gr.Radio(choices=[str(r) for r in range(1, MAX_RESPONSES + 1)],
                                            label="Rank (1 = best)", elem_id=f"rank-slot-{index}")
                        slot_widgets += [column, text, rank]
            comment = gr.Textbox(label="Comment (optional)", lines=1, max_lines=4, elem_id="rank-comment")
            key = gr.Textbox(visible="hidden", elem_id="rank-key", label="Item key")  # see the Rate tab's key
            with gr.Row():
                submit = gr.Button("Submit ranking", variant="primary", elem_id="rank-submit")
                skip = gr.Button("Skip", elem_id="rank-skip")
                undo = gr.Button("Undo last", elem_id="rank-undo")
                refresh = gr.Button("Refresh", elem_id="rank-refresh")
            gr.Markdown(SHORTCUTS, elem_classes=["studio-hint"])
        with gr.Column(scale=1, min_width=240):
            with gr.Accordion("Guidelines", open=True):
                guidelines = gr.Markdown(elem_id="rank-guidelines")

    rank_radios = slot_widgets[2::3]
    outputs = [banner, counter, prompt, *slot_widgets, comment, guidelines, state, key]

    @ui_errors
    @requires(ctx, "user")
    def rank_next(request: gr.Request):
        with ctx.connection() as db:
            return show_next(ctx, db, ctx.username(request))

    def rank_submit(comment_value, current, key_value, request: gr.Request, *ranks):
        """Rank numbers for the answers in the order shown (`current`), for the item `key_value` names.

        `ranks`: one per slot (None past the answers shown); request comes before them because Gradio
        fills a gr.Request only into a positional parameter.
        """
        # check_role, not @requires: it binds a call to the signature below, whose rank_N stop at the slots, and a
        # caller sending a rank too many must hear "This item has N answers", not a TypeError.
        username = check_role(ctx, request, "user").username
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
            _, item = labeling.submit_ranking_and_next(
                db, ctx.project, username, item_id, order, comment=(comment_value or "").strip(),
                request_id=request_id,
            )
            return outputs_for(db, ctx, username, item)

    rank_submit.__signature__ = _submit_signature(rank_submit)
    rank_submit = ui_errors(rank_submit)

    @ui_errors
    @requires(ctx, "user")
    def rank_skip(current, request: gr.Request):
        username = ctx.username(request)
        with ctx.connection() as db:
            if current:
                labeling.skip_item(db, ctx.project, username, int(current["item_id"]))
            return show_next(ctx, db, username)

    @ui_errors
    @requires(ctx, "user")
    def rank_undo(request: gr.Request):
        username = ctx.username(request)
        with ctx.connection() as db:
            gr.Info(undo_message(labeling.undo_last_action(db, ctx.project, username, KIND), "ranking", "rank"))
            return show_next(ctx, db, username)

    # As in the Rate tab: no progress overlay, one labelling concurrency group, and shortcuts.js told when a
    # request finished so it sends the next queued key.
    fast = {"show_progress": "hidden", "trigger_mode": "once", "concurrency_id": LABELLING, "concurrency_limit": 1}
    submit.click(rank_submit, [comment, state, key, *rank_radios], outputs, api_name="rank_submit", js=SUBMIT_JS,
                 **fast).then(None, js=DONE_JS, api_name="rank_submit_done")
    skip.click(rank_skip, [state], outputs, api_name="rank_skip", **fast).then(None, js=DONE_JS, api_name="rank_skip_done")
    undo.click(rank_undo, None, outputs, api_name="rank_undo", **fast).then(None, js=DONE_JS, api_name="rank_undo_done")
    refresh.click(rank_next, None, outputs, api_name="rank_next", concurrency_id=LABELLING, concurrency_limit=1)
    live_count(ctx, KIND, key, counter, "rank_count")  # the count only: the ranks picked so far stay
    if ctx.app is not None:
        ctx.app.load(quiet_before_password_change(rank_next, len(outputs)), None, outputs, api_name="rank_load",
                     concurrency_id=LABELLING, concurrency_limit=1)

    def on_tab(tab: gr.Tab) -> None:
        tab.select(quiet_before_password_change(guidelines_handler(ctx, KIND), 1), None, [guidelines],
                   api_name="rank_guidelines", show_progress="hidden")

    return on_tab
