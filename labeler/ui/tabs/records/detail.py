"""The Records tab's open record: everything on one prompt, opened by its id or by clicking its row."""
from __future__ import annotations

import gradio as gr

from labeler.services.labels import records
from labeler.errors import InputError
from labeler.ui.context import UIContext
from labeler.ui.field_labels import literal
from labeler.ui.roles import requires
from labeler.ui.soft_errors import keep_on_error
from labeler.ui.tabs.records.filters import whole_number


def detail_markdown(detail: dict) -> str:
    """Everything on one record: its answers, each label with its id (what Correct/Delete take) and annotator,
    and its items with their gold answers (what Mark gold takes)."""
    lines = [f"### Record {detail['id']} ({detail['split']}, source `{detail['source'] or '-'}`)",
             f"**Prompt**: {literal(detail['text'])}", "", "**Answers**"]
    for answer in detail["answers"]:
        lines.append(f"- answer **{answer['id']}** ({literal(answer['model'] or answer['source'])}): "
                     f"{literal(answer['text'], 400)}")
    lines += ["", "**Ratings**"]
    lines += [f"- rating **{r['id']}** by {r['username'] or '(imported)'}: answer {r['response_id']} scored "
              f"**{r['score']:g}**" + (f" · _{literal(r['comment'])}_" if r["comment"] else "")
              for r in detail["ratings"]]
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


@keep_on_error(1)
@requires("admin")
def open_record(ctx: UIContext, prompt_id, request: gr.Request) -> str:
    prompt_id = whole_number(prompt_id, "record id")
    if prompt_id is None:
        raise InputError("enter a record id or click a row", field="record id")
    with ctx.connection() as db:
        return detail_markdown(records.record_detail(db, int(prompt_id)))


@keep_on_error(2)
def select(ctx: UIContext, event: gr.SelectData, request: gr.Request) -> tuple:
    """A click on a table row: its id in the record box, and the record opened."""
    row = event.row_value or []
    if not row:
        return gr.skip(), gr.skip()
    return str(row[0]), open_record(ctx, row[0], request=request)
