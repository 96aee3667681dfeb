"""The Admin tab's "Quality": per-annotator statistics, inter-annotator agreement, and gold items (an item shown,
its gold answer set)."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from labeler.services import labeling
from labeler.services.errors import InputError
from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.gold import parse_gold
from labeler.ui.roles import requires
from labeler.ui.soft_errors import keep_on_error
from labeler.ui.tabs.admin.snapshot import STATS_HEADERS


@dataclass(frozen=True)
class QualityPart:
    stats: gr.Dataframe
    agreement: gr.Markdown
    gold_item: gr.Number
    gold_value: gr.Textbox
    show_item: gr.Button
    mark_gold: gr.Button
    gold_preview: gr.Markdown


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


def item_preview(db, item_id: int) -> str:
    item = labeling.item_detail(db, item_id)
    lines = [f"**{item['kind']} item {item_id}**, prompt: {item['prompt'][:300]}"]
    lines += [f"- response **{response_id}**: {text[:200]}" for response_id, text in item["responses"]]
    lines.append(f"\nGold now: `{item['gold_json'] or 'none'}`")
    if item["selection_reason"]:
        lines.append(f"\nWhy the queue serves it here: {item['selection_reason']}.")
    return "\n".join(lines)


@keep_on_error(1)
@requires("admin")
def show_item(ctx: UIContext, item_id, request: gr.Request) -> str:
    with ctx.connection() as db:
        if item_id is None:
            raise InputError("enter an item id", field="item_id")
        return item_preview(db, int(item_id))


@keep_on_error(1)
@requires("admin")
def mark_gold(ctx: UIContext, item_id, value, request: gr.Request) -> str:
    with ctx.connection() as db:
        if item_id is None:
            raise InputError("enter an item id", field="item_id")
        labeling.set_gold(db, int(item_id), parse_gold(value))
        return item_preview(db, int(item_id))


def wire(ctx: UIContext, part: QualityPart) -> None:
    part.show_item.click(bind(show_item, ctx), [part.gold_item], [part.gold_preview], api_name="admin_show_item")
    part.mark_gold.click(bind(mark_gold, ctx), [part.gold_item, part.gold_value], [part.gold_preview],
                         api_name="admin_mark_gold")
