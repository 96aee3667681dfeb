"""The Admin tab's "Quality": per-annotator statistics, inter-annotator agreement, and gold items (an item shown,
its gold answer set)."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from labeler.services.data import labeling
from labeler.errors import InputError, PermissionDenied
from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.field_labels import literal
from labeler.ui.gold import parse_gold
from labeler.ui.gradio_internals import QUIET
from labeler.ui.roles import check_role, requires
from labeler.ui.soft_errors import keep_on_error
from labeler.ui.tabs.admin.snapshot import STATS_HEADERS, agreement_markdown, stats_table

# How often the per-annotator table and the agreement are read again while the Admin tab is in front: they
# change with every label people store elsewhere (the table once showed an annotator with 0 labels, read at the
# admin's page load, while the labels came in).
QUALITY_REFRESH_S = 15
# The timer's input: "shown" while the Admin tab is in front and the browser tab visible, else "" (nothing read).
SHOWN_JS = """() => {
  const el = document.getElementById("admin-refresh");
  return document.visibilityState === "visible" && el && el.offsetParent !== null ? "shown" : "";
}"""


@dataclass(frozen=True)
class QualityPart:
    stats: gr.Dataframe
    agreement: gr.Markdown
    gold_item: gr.Number
    gold_value: gr.Textbox
    show_item: gr.Button
    mark_gold: gr.Button
    gold_preview: gr.Markdown


def on_tab(ctx: UIContext, part: QualityPart, tab: gr.Tab) -> None:
    """Selecting the Admin tab reads the table and the agreement again."""
    tab.select(bind(quality_view, ctx, "shown"), None, [part.stats, part.agreement], api_name="admin_quality_view",
               **QUIET)


def build_quality() -> QualityPart:
    with gr.Accordion("Quality", open=True):
        stats = gr.Dataframe(headers=STATS_HEADERS, interactive=False, label="Per annotator")
        agreement = gr.Markdown()
        with gr.Row():
            gold_item = gr.Number(precision=0, label="Item number",
                                  info="Records: open a prompt, its items are listed with their numbers")
            gold_value = gr.Textbox(label="Gold answer", info="rating: a score, e.g. 6; ranking: '3 > 1 = 2'; blank clears")
            show_item = gr.Button("Show item")
            mark_gold = gr.Button("Mark gold", elem_id="admin-mark-gold")
        gold_preview = gr.Markdown()
    return QualityPart(stats, agreement, gold_item, gold_value, show_item, mark_gold, gold_preview)


def quality_view(ctx: UIContext, shown, request: gr.Request) -> tuple:
    """The per-annotator table and the agreement read again (Admin selected, or its timer while it is in front:
    `shown` "" leaves them as they are). A refusal (an annotator's page has the tab's widgets too) changes
    nothing."""
    if shown == "":
        return gr.skip(), gr.skip()
    try:
        check_role(ctx, request, "admin")
    except PermissionDenied:
        return gr.skip(), gr.skip()
    with ctx.connection() as db:
        return stats_table(db, ctx.project), agreement_markdown(db, ctx.project)


def item_preview(db, item_id: int) -> str:
    item = labeling.item_detail(db, item_id)
    lines = [f"**{item['kind']} item {item_id}**, prompt: {literal(item['prompt'], 300)}"]
    lines += [f"- response **{response_id}**: {literal(text, 200)}" for response_id, text in item["responses"]]
    lines.append(f"\nGold now: `{item['gold_json'] or 'none'}`")
    if item["selection_reason"]:
        lines.append(f"\nWhy the queue serves it here: {item['selection_reason']}.")
    return "\n".join(lines)


@keep_on_error(1)
@requires("admin")
def show_item(ctx: UIContext, item_id, request: gr.Request) -> str:
    with ctx.connection() as db:
        if item_id is None:
            raise InputError("enter an item number", field="item_id")
        return item_preview(db, int(item_id))


@keep_on_error(1)
@requires("admin")
def mark_gold(ctx: UIContext, item_id, value, request: gr.Request) -> str:
    with ctx.connection() as db:
        if item_id is None:
            raise InputError("enter an item number", field="item_id")
        labeling.set_gold(db, int(item_id), parse_gold(value))
        return item_preview(db, int(item_id))


def wire(ctx: UIContext, part: QualityPart) -> None:
    timer = gr.Timer(QUALITY_REFRESH_S)
    # The agreement Markdown is only the carrier of SHOWN_JS's answer (a timer event needs an input for it).
    timer.tick(bind(quality_view, ctx), [part.agreement], [part.stats, part.agreement], api_name="admin_quality_tick",
               js=SHOWN_JS, trigger_mode="once", **QUIET)
    part.show_item.click(bind(show_item, ctx), [part.gold_item], [part.gold_preview], api_name="admin_show_item")
    part.mark_gold.click(bind(mark_gold, ctx), [part.gold_item, part.gold_value], [part.gold_preview],
                         api_name="admin_mark_gold")
