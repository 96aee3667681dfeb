"""Records tab (admins): browse prompts, answers and labels; open one to see every label on it; correct or
delete a label (each change kept in the audit log) and mark gold there instead of typing an internal item id.

Built from parts: filters.py (the filter boxes read as RecordFilters), listing.py (a page of records: search,
previous, next), detail.py (the open record), corrections.py (correct, delete, mark gold, the audit log).
Handlers are module functions taking the UIContext first, adapters over labeler.services.labels.records; each checks
the admin role itself. The page number lives in its own widget, so nothing but widget values travels between
calls.
"""
from __future__ import annotations

import gradio as gr

from labeler.services.labels import records
from labeler.errors import InputError, PermissionDenied
from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.gradio_internals import QUIET
from labeler.ui.roles import check_role, requires
from labeler.ui.session import quiet_on_load
from labeler.ui.soft_errors import keep_on_error
from labeler.ui.tabs.records import corrections, detail, listing
from labeler.ui.tabs.records.corrections import AUDIT_HEADERS, audit_table
from labeler.ui.tabs.records.filters import ANY, score_bound, whole_number
from labeler.ui.tabs.records.listing import LIST_HEADERS, LIST_OUTPUTS

TITLE = "Records"
LOAD_OUTPUTS = LIST_OUTPUTS + 5  # the list, the project, annotator, split and source choices, the audit log


def _with_choices(ctx: UIContext, db, listed: tuple, **project_value) -> tuple:
    """A listing, then the filters' choices (their values as they are; the project's `value=` when given) and the
    audit log: LOAD_OUTPUTS."""
    choices = records.filter_choices(db, ctx.project)
    return (
        *listed, gr.update(choices=choices["projects"], **project_value), gr.update(choices=[ANY, *choices["annotators"]]),
        gr.update(choices=[ANY, *choices["splits"]]), gr.update(choices=[ANY, *choices["sources"]]),
        audit_table(db),
    )


@keep_on_error(LOAD_OUTPUTS)
@requires("admin")
def load(ctx: UIContext, request: gr.Request) -> tuple:
    """The first page of every record, the filters' choices and the audit log (page load)."""
    with ctx.connection() as db:
        # The project this person works in (the picker at the top), not the one the page was built with.
        return _with_choices(ctx, db, listing.listing(db, [ctx.project, "", ANY, "any", None, None, ANY, ANY], 1),
                             value=ctx.project)


@keep_on_error(LOAD_OUTPUTS)
@requires("admin")
def refresh(ctx: UIContext, project_name, text, annotator_name, state_name, low_text, high_text, split_name,
            source_name, page, request: gr.Request) -> tuple:
    """Refresh: the page shown, read again with the filters shown (it listed every record while a Source filter
    still showed), and the filters' choices and the audit log read again."""
    values = [project_name, text, annotator_name, state_name, score_bound(low_text, "some rating >="),
              score_bound(high_text, "some rating <="), split_name, source_name]
    with ctx.connection() as db:
        return _with_choices(ctx, db, listing.listing(db, values, page))


def view(ctx: UIContext, project_name, text, annotator_name, state_name, low_text, high_text, split_name,
         source_name, page, record_id, request: gr.Request) -> tuple:
    """The Records tab selected: the page shown and the open record read again with the filters shown, so a
    prompt's split, answers and labels follow the data (a prompt held out after the page loaded still showed
    "train" with 0 answers until Search). A refusal (an annotator's page) or a filter typed wrong changes nothing:
    Refresh and Search say what is wrong."""
    n_outputs = LOAD_OUTPUTS + 1
    try:
        check_role(ctx, request, "admin")
        values = [project_name, text, annotator_name, state_name, score_bound(low_text, "some rating >="),
                  score_bound(high_text, "some rating <="), split_name, source_name]
        with ctx.connection() as db:
            listed = _with_choices(ctx, db, listing.listing(db, values, page))
            opened = whole_number(record_id, "record id")
            shown = gr.skip() if opened is None else detail.detail_markdown(records.record_detail(db, int(opened)))
    except (InputError, PermissionDenied):
        return tuple(gr.skip() for _ in range(n_outputs))
    return (*listed, shown)


SEARCHING = "⏳ Searching the prompts, answers and labels…"
SEARCHING_JS = f"() => {SEARCHING!r}"
SEARCHED_JS = f"(note) => note === {SEARCHING!r} ? '' : note"


def build(ctx: UIContext):
    with gr.Row():
        search = gr.Textbox(label="Search prompts and answers", scale=3, elem_id="records-search")
        project = gr.Dropdown(choices=[ctx.project], value=ctx.project, label="Project", elem_id="records-project")
        annotator = gr.Dropdown(choices=[ANY], value=ANY, label="Labelled by", elem_id="records-annotator")
        state = gr.Dropdown(choices=["any", "unlabelled", "labelled", "gold"], value="any", label="Label state",
                            elem_id="records-state")
    with gr.Row():
        # Text, not gr.Number: a number box cannot be blank in the browser (it showed and sent 0), and blank
        # is "no filter".
        low = gr.Textbox(value="", label="Some rating >=", placeholder="any", elem_id="records-min-score")
        high = gr.Textbox(value="", label="Some rating <=", placeholder="any", elem_id="records-max-score")
        split = gr.Dropdown(choices=[ANY], value=ANY, label="Split", elem_id="records-split")
        source = gr.Dropdown(choices=[ANY], value=ANY, label="Source", elem_id="records-source")
        page_number = gr.Number(value=1, precision=0, minimum=1, label="Page", elem_id="records-page")
    with gr.Row():
        search_button = gr.Button("Search", variant="primary", elem_id="records-search-button")
        previous = gr.Button("◀ Previous page", elem_id="records-previous")
        following = gr.Button("Next page ▶", elem_id="records-next")
    note = gr.Markdown(elem_id="records-note")
    table = gr.Dataframe(headers=LIST_HEADERS, interactive=False, wrap=True, elem_id="records-table",
                         label="Records (click a row to open it)")
    with gr.Row():
        # Id boxes are text for the same reason as the score filters: blank until a row is picked, not 0.
        record_id = gr.Textbox(value="", label="Record (prompt) id", placeholder="click a row or type an id",
                               elem_id="records-open-id")
        open_button = gr.Button("Open record", elem_id="records-open")
    shown = gr.Markdown(elem_id="records-detail")
    with gr.Accordion("Correct or delete a label (kept in the audit log)", open=True):
        with gr.Row():
            label_kind = gr.Radio(["rating", "ranking"], value="rating", label="Label kind", elem_id="records-label-kind")
            label_id = gr.Textbox(value="", label="Label id (from the record)", elem_id="records-label-id")
            value = gr.Textbox(label="Corrected value", info="rating: a score; ranking: '3 > 1 = 2' (answer ids)",
                               elem_id="records-value")
            reason = gr.Textbox(label="Reason", elem_id="records-reason")
        with gr.Row():
            correct_button = gr.Button("Correct label", elem_id="records-correct")
            delete_button = gr.Button("Delete label", variant="stop", elem_id="records-delete")
    with gr.Accordion("Mark gold", open=False):
        with gr.Row():
            gold_item = gr.Textbox(value="", label="Item id (from the record)", elem_id="records-gold-item")
            gold_value = gr.Textbox(label="Gold answer", info="rating: a score; ranking: '3 > 1 = 2'; blank clears",
                                    elem_id="records-gold-value")
            gold_button = gr.Button("Mark gold", elem_id="records-gold")
    with gr.Accordion("Audit log", open=False):
        audit = gr.Dataframe(headers=AUDIT_HEADERS, interactive=False, wrap=True, elem_id="records-audit")

    search_inputs = [project, search, annotator, state, low, high, split, source, page_number]
    list_outputs = [table, note, page_number]
    # A search took ~40 s on a busy machine with nothing said: the note says it is searching at once (in the
    # browser, no server round trip), the table carries the progress timer, and the answer replaces the note (a
    # refused search, which leaves the outputs as they were, takes the line away after its toast).
    searches = ((search_button.click, 0, "records_search"), (search.submit, 0, "records_search_submit"),
                (previous.click, -1, "records_previous"), (following.click, +1, "records_next"))
    for trigger, step, name in searches:
        trigger(None, None, note, js=SEARCHING_JS, api_name=f"{name}_said")
        trigger(bind(listing.search, ctx, step), search_inputs, list_outputs, api_name=name,
                show_progress_on=[table]).then(None, note, note, js=SEARCHED_JS, api_name=f"{name}_done")
    open_button.click(bind(detail.open_record, ctx), [record_id], [shown], api_name="records_open")
    table.select(bind(detail.select, ctx), None, [record_id, shown], api_name="records_select")
    correct_button.click(bind(corrections.correct, ctx), [label_kind, label_id, value, reason, record_id],
                         [shown, audit], api_name="records_correct")
    delete_button.click(bind(corrections.delete, ctx), [label_kind, label_id, reason, record_id], [shown, audit],
                        api_name="records_delete")
    gold_button.click(bind(corrections.mark_gold, ctx), [gold_item, gold_value, record_id], [shown],
                      api_name="records_gold")
    load_outputs = [*list_outputs, project, annotator, split, source, audit]
    refresh_button = gr.Button("Refresh", size="sm", elem_id="records-refresh")
    refresh_button.click(bind(refresh, ctx), search_inputs, load_outputs, api_name="records_refresh")
    if ctx.app is not None:
        ctx.app.load(quiet_on_load(bind(load, ctx), len(load_outputs)), None, load_outputs, api_name="records_load")

    def on_tab(tab: gr.Tab) -> None:
        tab.select(bind(view, ctx), [*search_inputs, record_id], [*load_outputs, shown], api_name="records_view",
                   **QUIET)

    return on_tab
