"""Rank tab: 2 to 8 answers to one prompt (labeling.MAX_RANKING_SIZE), ordered best to worst, ties allowed.

Each answer gets a rank number (1 = best); equal numbers are a tie. The ranks become one ranking,
`order` best to worst with tied response ids grouped: ranks {a: 2, b: 1, c: 2} -> [[b], [a, c]] (ranks.py).
Keyboard: type the answer numbers best to worst ("3 1 2"), "=" before a number ties it with the
previous one, Enter submits (labeler/ui/static/shortcuts.js). The project's questions (labelling.asked) sit under
each answer, its flags and a radio per criterion, with one "better answer" box, a correction of the answer ranked
first; the ranking and all of them are one submit (questions.submit_ranking_with_answers). By keyboard as in Rate,
once an answer has the focus (the digits rank until then): j / k move the focus to the next / previous answer,
digits score its highlighted criterion and move to the next, letters tick its flags, Esc gives the digits back to
ranking, e opens the correction with the answer ranked first in it, Enter submits everything once.

Built from parts: ranks.py (rank numbers to an order), item_view.py (what an item shows, as widget values),
handlers.py (show, submit, skip, undo: module functions taking the UIContext first), and what Rank shares with
Rate (tabs/labelling.py).
"""
from __future__ import annotations

import gradio as gr

from labeler.ui.context import UIContext
from labeler.ui.tabs import labelling
from labeler.ui.tabs.labelling import Event
from labeler.ui.tabs.rank.handlers import load_item, next_item, skip, submit, undo
from labeler.ui.tabs.rank.item_view import KIND, MAX_RESPONSES, show_item
from labeler.ui.tabs.rank.ranks import order_from_ranks  # noqa: F401 - the tab's rule, imported from here by tests

TITLE = "Rank"
SLOTS_PER_ROW = 4  # 8 answers side by side are too narrow to read: the slots wrap in rows of 4
SHORTCUTS = (
    "Keys: type the answer numbers **best to worst** (e.g. `3 1 2`), **=** before a number ties it with the "
    "previous one (`1 = 2 3`), **Enter** submits, **Esc** starts over, **s** skips, **u** undoes the last ranking "
    "or skip, **r** refreshes, **e** writes a better answer than your first choice. With questions under the answers: **j** / **k** = next / "
    "previous answer, then **digits** score its highlighted criterion, **letters** tick its flags (as labelled), "
    "**Esc** = back to ranking."
)
# The keyboard path (shortcuts.js): the ranks typed go straight into the submit (see the Rate tab's SUBMIT_JS).
# The ranks come last and as a rest parameter, so this needs no change when MAX_RESPONSES does; the typed list
# only covers the slots typed, the rest are null (unranked).
# The questions' inputs come after the ranks: the correction, then per slot its flags and MAX_CRITERIA criteria.
# With questions, Enter sends an object ({ranks, slots: [{flags, criteria}]}) read from the page as it pressed.
SUBMIT_JS = f"""(comment, current, key, ...rest) => {{
  const typed = window.__rlhfStudioTake ? window.__rlhfStudioTake("rank") : null;
  const ranks = rest.slice(0, {MAX_RESPONSES}), questions = rest.slice({MAX_RESPONSES});
  if (typed === null) return [comment, current, key, ...ranks, ...questions];
  if (Array.isArray(typed)) return [comment, current, key, ...ranks.map((_, i) => typed[i] ?? null), ...questions];
  const typedRanks = typed.ranks === null ? ranks : ranks.map((_, i) => typed.ranks[i] ?? null);
  const width = 1 + {labelling.MAX_CRITERIA};
  const asked = questions.map((value, j) => {{
    if (j === 0) return value;
    const slot = typed.slots[Math.floor((j - 1) / width)], k = (j - 1) % width;
    if (!slot) return value;
    return k === 0 ? slot.flags : (slot.criteria[k - 1] ?? value);
  }});
  return [comment, current, key, ...typedRanks, ...asked];
}}"""


def build(ctx: UIContext):
    """The tab's widgets and events; returns the hook app.build_app calls with the gr.Tab (its select event)."""
    state = gr.State(None)
    banner = gr.Markdown(elem_id="rank-banner", elem_classes=["studio-banner"])  # hidden while empty (studio.css)
    slot_widgets: list = []
    question_widgets: list = []
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
                            # after a restart) reaches the submit handler, which asks for a Refresh (the shown
                            # order is session state), instead of Gradio's "not in the list of choices: []"
                            # (rate.item_view.startup_choices).
                            rank = gr.Radio(choices=[str(r) for r in range(1, MAX_RESPONSES + 1)],
                                            label="Rank (1 = best)", elem_id=f"rank-slot-{index}")
                            # The project's questions about this answer (item_view.question_updates).
                            flags = gr.CheckboxGroup(choices=[], label="Flags", visible=False,
                                                     elem_id=f"rank-flags-{index}")
                            criteria = [gr.Radio(choices=[], visible=False, elem_id=f"rank-criterion-{index}-{c}")
                                        for c in range(1, labelling.MAX_CRITERIA + 1)]
                        slot_widgets += [column, text, rank]
                        question_widgets += [flags, *criteria]
            # Stored as a correction of the answer ranked first: preferred to it (question_rows), and an SFT row.
            correction = gr.Textbox(label="Write a better answer than your first choice (optional)", lines=2,
                                    max_lines=12, elem_id="rank-correction")
            comment = gr.Textbox(label="Comment (optional)", lines=1, max_lines=4, elem_id="rank-comment")
            key = gr.Textbox(visible="hidden", elem_id="rank-key", label="Item key")  # see the Rate tab's key
            row = labelling.buttons("rank", "Submit ranking")
            gr.Markdown(SHORTCUTS, elem_classes=["studio-hint"])
        with gr.Column(scale=1, min_width=240):
            with gr.Accordion("Guidelines", open=True):
                guidelines = gr.Markdown(elem_id="rank-guidelines")

    rank_radios = slot_widgets[2::3]
    # The questions after the slots (whose outputs tests and callers index), then the correction.
    outputs = [banner, counter, prompt, *slot_widgets, *question_widgets, correction, comment, guidelines, state, key]
    # As in the Rate tab (labelling.wire): no progress overlay, one labelling concurrency group, shortcuts.js told
    # when a request finished; every Rank event shows the full outputs.
    return labelling.wire(ctx, "rank", KIND, row,
                          submit=Event(submit, [comment, state, key, *rank_radios, correction, *question_widgets],
                                       outputs, {"js": SUBMIT_JS}),
                          skip=Event(skip, [state], outputs), undo=undo, next_item=next_item, load_item=load_item,
                          show_item=show_item, outputs=outputs, key=key, counter=counter, banner=banner,
                          guidelines_box=guidelines)
