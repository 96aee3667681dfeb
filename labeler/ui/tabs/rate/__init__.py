"""Rate tab: one prompt and one answer at a time, scored on the project's Likert scale.

Built from parts: item_view.py (what an item shows, as widget values), handlers.py (show, submit, skip, undo:
module functions taking the UIContext first), and what Rate shares with Rank (tabs/labelling.py: the item key,
the counter, the live count, the guidelines on select). The page holds only the shown item's key (its id and
idempotency key); the queue itself lives in SQLite, so a refresh shows the same pending item. A submit stores
the label and returns the next item in one round trip. Every event has an api_name, so gradio_client drives
exactly these handlers.

The project's questions (labelling.asked: a radio per criterion, the flags, "write a better answer") sit under the
score and go with it in one submit (questions.submit_rating_with_answers). With questions, digits score the
highlighted question and move to the next, letters tick flags, e opens the correction, Enter submits
(shortcuts.js); without, a digit scores and submits as it always did.
"""
from __future__ import annotations

import gradio as gr

from labeler.ui.context import UIContext
from labeler.ui.tabs import labelling
from labeler.ui.tabs.labelling import Event
from labeler.ui.tabs.rate.handlers import load_item, next_item, skip, submit, undo
from labeler.ui.tabs.rate.item_view import KIND, show_item, startup_choices

TITLE = "Rate"
SHORTCUTS = (
    "Keys: **digit** = score and submit (when the project asks questions: score and move on, **Enter** submits), **s** = skip, **u** = undo the last score or skip, **r** = refresh (not while typing a comment), "
    "**e** = write a better answer, **Esc** = leave a text box."
)
# The keyboard path (shortcuts.js): the score a digit key chose goes straight into the submit, without
# waiting for the Radio's change to reach Gradio's store; the mouse path leaves the inputs as they are.
# With the project's questions the keyboard fills them too and Enter submits: what it typed comes as an object
# ({score, flags, criteria}), read from the page when Enter is pressed.
SUBMIT_JS = """(score, comment, key, correction, flags, ...criteria) => {
  const typed = window.__rlhfStudioTake ? window.__rlhfStudioTake("rate") : null;
  if (typed === null) return [score, comment, key, correction, flags, ...criteria];
  if (typeof typed === "number") return [typed, comment, key, correction, flags, ...criteria];
  return [typed.score ?? score, comment, key, correction, typed.flags ?? flags,
          ...criteria.map((value, i) => typed.criteria[i] ?? value)];
}"""
# Submit and skip also skip Gradio's pre- and postprocessing (item_view.item_outputs says why): with 20 annotators
# that and the pooled connections took the server from ~9 to ~4 ms of CPU per label (bench/annotators.py).
RAW = {"preprocess": False, "postprocess": False}


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
            # The project's questions (labelling.asked): shown, labelled and scaled per item by the full outputs.
            criteria = [gr.Radio(choices=[], visible=False, elem_id=f"rate-criterion-{slot}",
                                 elem_classes=["studio-criterion"])
                        for slot in range(1, labelling.MAX_CRITERIA + 1)]
            flags = gr.CheckboxGroup(choices=[], label="Flags", visible=False, elem_id="rate-flags")
            correction = gr.Textbox(label="Write a better answer (optional: corrects the shown answer)", lines=2,
                                    max_lines=12, elem_id="rate-correction",
                                    placeholder="Press e to start from the shown answer")
            comment = gr.Textbox(label="Comment (optional)", lines=1, max_lines=4, elem_id="rate-comment")
            # The shown item's key ('<item id>:<request id>'): sent back with the label, so a retried or
            # doubled submit stores one label and a submit names the item it labels. In the page, not in
            # server-side session state, so gradio_client sees it and sends it as the browser does.
            key = gr.Textbox(visible="hidden", elem_id="rate-key", label="Item key")
            row = labelling.buttons("rate", "Submit")
            gr.Markdown(SHORTCUTS, elem_classes=["studio-hint"])
            hint = gr.Markdown(elem_id="rate-questions-hint", elem_classes=["studio-hint"])
        with gr.Column(scale=2):
            with gr.Accordion("Guidelines", open=True):
                guidelines = gr.Markdown(elem_id="rate-guidelines")

    # The keyboard path's outputs are the first seven of the full ones, so the key is [6] in both.
    fast_outputs = [banner, counter, prompt, response, score, comment, key]
    # The questions before the guidelines (the last): the full outputs show and scale them
    # (item_view.question_outputs); a new item's key clears their answers in the page (labelling.CLEARED_JS).
    outputs = [*fast_outputs, row.submit, row.skip, correction, flags, hint, *criteria, guidelines]
    # Submit and skip answer in the keyboard path's shape; the rest (undo, refresh, load) is labelling.wire's.
    key.change(None, None, [correction, flags, *criteria], js=labelling.cleared_js(), api_name="rate_new_item",
               show_progress="hidden", queue=False)
    return labelling.wire(ctx, "rate", KIND, row,
                          submit=Event(submit, [score, comment, key, correction, flags, *criteria], fast_outputs,
                                       {"js": SUBMIT_JS, **RAW}),
                          skip=Event(skip, [key], fast_outputs, RAW), undo=undo, next_item=next_item,
                          load_item=load_item, show_item=show_item,
                          outputs=outputs, key=key, counter=counter, banner=banner,
                          guidelines_box=guidelines)
