"""Records tab (admins): browse prompts, answers and labels; open one to see every label on it; correct or
delete a label (each change kept in the audit log) and mark gold there instead of typing an internal item id.

Handlers are adapters over labeler.services.records; the page number lives in its own widget, so nothing
but widget values travels between calls.
"""
from __future__ import annotations

import gradio as gr

from labeler.services.errors import InputError
from labeler.ui.context import UIContext
from labeler.ui.roles import requires
from labeler.ui.session import quiet_on_load
from labeler.ui.soft_errors import keep_on_error
from labeler.ui.tabs.admin.quality import parse_gold

TITLE = "Records"
ANY = "(any)"
LIST_HEADERS = ["id", "prompt", "split", "source", "answers", "ratings", "mean_score", "rankings", "gold"]
AUDIT_HEADERS = ["when", "admin", "action", "kind", "label", "before", "after", "reason"]
PAGE_SIZE = 20


def _optional(value):
    return None if value in (None, "", ANY) else value


def score_bound(text, field: str) -> float | None:
    """A score filter box's text: blank is no filter, anything else must be a number."""
    if text is None or str(text).strip() == "":
        return None
    try:
        return float(str(text).strip())
    except ValueError:
        raise InputError(f"must be a number or blank, got {text!r}", field=field) from None


def whole_number(text, field: str) -> int | None:
    """An id box's text (or a number from an API client): blank is None, anything else a whole number."""
    if text is None or str(text).strip() == "":
        return None
    try:
        value = float(str(text).strip())
    except ValueError:
        value = float("nan")
    if not value.is_integer():
        raise InputError(f"must be a whole number, got {text!r}", field=field)
    return int(value)


def filters_from(project, search, annotator, state, low, high, split, source):
    from labeler.services.records import RecordFilters

    return RecordFilters(
        project=project, search=search or "", annotator=_optional(annotator), label_state=state or "any",
        min_score=_optional(low), max_score=_optional(high), split=_optional(split), source=_optional(source),
    )


def list_table(page) -> list[list]:
    rows = []
    for r in page.rows:
        rows.append([r["id"], r["text"][:160], r["split"], r["source"], r["answers"], r["ratings"],
                     "" if r["mean_score"] is None else r["mean_score"], r["rankings"], "yes" if r["gold"] else ""])
    return rows


def page_note(page) -> str:
    return f"**{page.total}** records · page **{page.page}** of **{page.pages}**"


def detail_markdown(detail: dict) -> str:
    """Everything on one record: its answers, each label with its id (what Correct/Delete take) and annotator,
    and its items with their gold answers (what Mark gold takes)."""
    lines = [f"### Record {detail['id']} ({detail['split']}, source `{detail['source'] or '-'}`)",
             f"**Prompt**: {detail['text']}", "", "**Answers**"]
    for answer in detail["answers"]:
        lines.append(f"- answer **{answer['id']}** ({answer['model'] or answer['source']}): {answer['text'][:400]}")
    lines += ["", "**Ratings**"]
    lines += [f"- rating **{r['id']}** by {r['username'] or '(imported)'}: answer {r['response_id']} scored "
              f"**{r['score']:g}**" + (f" · _{r['comment']}_" if r["comment"] else "") for r in detail["ratings"]]
    if not detail["ratings"]:
        lines.append("- none")
    lines += ["", "**Rankings** (best first, = ties)"]
    for r in detail["rankings"]:
        order = " > ".join(" = ".join(str(i) for i in group) for group in r["order"])
        lines.append(f"- ranking **{r['id']}** by {r['username'] or '(imported)'} ({r['source']}): {order}")
    if not detail["rankings"]:
        lines.append("- none")
    lines += ["", "**Items** (gold: the known answer annotators are checked against)"]
    for item in detail["items"]:
        lines.append(f"- {item['kind']} item **{item['id']}** of answers {item['response_ids']}: gold "
                     f"`{item['gold'] if item['gold'] is not None else 'none'}`")
    return "\n".join(lines)


def parse_correction(kind: str, text: str):
    """What the admin typed: a score for a rating, '3 > 1 = 2' (or JSON) for a ranking."""
    gold = parse_gold(text)
    if gold is None:
        raise InputError("type the corrected value", field="value")
    if kind == "rating":
        if "score" not in gold:
            raise InputError("a rating takes a score, e.g. 5", field="value")
        return gold["score"]
    if "order" not in gold:
        raise InputError("a ranking takes an order, e.g. '3 > 1 = 2'", field="value")
    return gold["order"]


def audit_table(db) -> list[list]:
    from labeler.services import records

    def short(label: dict | None) -> str:
        if label is None:
            return "(deleted)"
        return f"score {label['score']:g}" if "score" in label else f"order {label['order_json']}"

    return [[e["created_at"], e["admin"], e["action"], e["label_kind"], e["label_id"], short(e["before"]),
             short(e["after"]), e["reason"]] for e in records.audit_log(db)]


def build(ctx: UIContext) -> None:
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
    detail = gr.Markdown(elem_id="records-detail")
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

    filter_inputs = [project, search, annotator, state, low, high, split, source]
    list_outputs = [table, note, page_number]

    def listing(db, values, page: int) -> tuple:
        from labeler.services import records

        result = records.list_records(db, filters_from(*values), page=max(1, int(page or 1)), page_size=PAGE_SIZE)
        return list_table(result), page_note(result), result.page

    def searcher(step: int):
        # step 0: search from page 1; -1 / +1: the page before or after the one shown (clamped to the pages).
        # Every input spelled out: Gradio fills `request` only when it is a positional parameter (its
        # special_args stops at *args), so `*args, request` failed every search with a TypeError.
        @keep_on_error(len(list_outputs))
        @requires(ctx, "admin")
        def handler(project_name, text, annotator_name, state_name, low_text, high_text, split_name, source_name,
                    page, request: gr.Request):
            from labeler.services import records

            values = [project_name, text, annotator_name, state_name, score_bound(low_text, "some rating >="),
                      score_bound(high_text, "some rating <="), split_name, source_name]
            with ctx.connection() as db:
                if step == 0:
                    return listing(db, values, 1)
                total_pages = records.list_records(db, filters_from(*values), page=1, page_size=PAGE_SIZE).pages
                return listing(db, values, min(max(1, int(page or 1) + step), total_pages))

        return handler

    @keep_on_error(1)
    @requires(ctx, "admin")
    def records_open(prompt_id, request: gr.Request):
        from labeler.services import records

        prompt_id = whole_number(prompt_id, "record id")
        if prompt_id is None:
            raise InputError("enter a record id or click a row", field="record id")
        with ctx.connection() as db:
            return detail_markdown(records.record_detail(db, int(prompt_id)))

    @keep_on_error(2)
    def records_select(event: gr.SelectData, request: gr.Request):
        row = event.row_value or []
        if not row:
            return gr.skip(), gr.skip()
        return str(row[0]), records_open(row[0], request=request)

    def changed(db, prompt_id) -> tuple:
        from labeler.services import records

        prompt_id = whole_number(prompt_id, "record id")
        shown = detail_markdown(records.record_detail(db, prompt_id)) if prompt_id is not None else gr.skip()
        return shown, audit_table(db)

    @keep_on_error(2)
    @requires(ctx, "admin")
    def records_correct(kind, label, text, why, prompt_id, request: gr.Request):
        from labeler.services import records

        label = whole_number(label, "label id")
        if label is None:
            raise InputError("enter the label's id (shown in the record)", field="label id")
        with ctx.connection() as db:
            records.correct_label(db, ctx.username(request), kind, int(label), parse_correction(kind, text), why or "")
            gr.Info(f"{kind.capitalize()} {int(label)} corrected.")
            return changed(db, prompt_id)

    @keep_on_error(2)
    @requires(ctx, "admin")
    def records_delete(kind, label, why, prompt_id, request: gr.Request):
        from labeler.services import records

        label = whole_number(label, "label id")
        if label is None:
            raise InputError("enter the label's id (shown in the record)", field="label id")
        with ctx.connection() as db:
            records.delete_label(db, ctx.username(request), kind, int(label), why or "")
            gr.Info(f"{kind.capitalize()} {int(label)} deleted.")
            return changed(db, prompt_id)

    @keep_on_error(1)
    @requires(ctx, "admin")
    def records_gold(item, text, prompt_id, request: gr.Request):
        from labeler.services import records

        item = whole_number(item, "item id")
        if item is None:
            raise InputError("enter the item's id (shown in the record)", field="item id")
        with ctx.connection() as db:
            records.mark_gold(db, ctx.username(request), int(item), parse_gold(text))
            return changed(db, prompt_id)[0]

    @keep_on_error(len(list_outputs) + 5)
    @requires(ctx, "admin")
    def records_load(request: gr.Request):
        from labeler.services import records

        with ctx.connection() as db:
            choices = records.filter_choices(db, ctx.project)
            listed = listing(db, [ctx.project, "", ANY, "any", None, None, ANY, ANY], 1)
            return (
                *listed, gr.update(choices=choices["projects"]), gr.update(choices=[ANY, *choices["annotators"]]),
                gr.update(choices=[ANY, *choices["splits"]]), gr.update(choices=[ANY, *choices["sources"]]),
                audit_table(db),
            )

    search_button.click(searcher(0), [*filter_inputs, page_number], list_outputs, api_name="records_search")
    search.submit(searcher(0), [*filter_inputs, page_number], list_outputs, api_name="records_search_submit")
    previous.click(searcher(-1), [*filter_inputs, page_number], list_outputs, api_name="records_previous")
    following.click(searcher(+1), [*filter_inputs, page_number], list_outputs, api_name="records_next")
    open_button.click(records_open, [record_id], [detail], api_name="records_open")
    table.select(records_select, None, [record_id, detail], api_name="records_select")
    correct_button.click(records_correct, [label_kind, label_id, value, reason, record_id], [detail, audit],
                         api_name="records_correct")
    delete_button.click(records_delete, [label_kind, label_id, reason, record_id], [detail, audit],
                        api_name="records_delete")
    gold_button.click(records_gold, [gold_item, gold_value, record_id], [detail], api_name="records_gold")
    load_outputs = [*list_outputs, project, annotator, split, source, audit]
    refresh = gr.Button("Refresh", size="sm", elem_id="records-refresh")
    refresh.click(records_load, None, load_outputs, api_name="records_refresh")
    if ctx.app is not None:
        ctx.app.load(quiet_on_load(records_load, len(load_outputs)), None, load_outputs, api_name="records_load")
