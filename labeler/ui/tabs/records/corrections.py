"""The Records tab's changes to labels: correct or delete one (each change kept in the audit log, shown
here), and mark an item's gold answer."""
from __future__ import annotations

import gradio as gr

from labeler.services.labels import records
from labeler.errors import InputError
from labeler.ui.context import UIContext
from labeler.ui.gold import parse_gold
from labeler.ui.roles import requires
from labeler.ui.soft_errors import keep_on_error
from labeler.ui.tabs.records.detail import detail_markdown
from labeler.ui.tabs.records.filters import whole_number

AUDIT_HEADERS = ["When", "Admin", "Action", "Kind", "Label", "Before", "After", "Reason"]


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
    def short(label: dict | None) -> str:
        if label is None:
            return "(deleted)"
        return f"score {label['score']:g}" if "score" in label else f"order {label['order_json']}"

    return [[e["created_at"], e["admin"], e["action"], e["label_kind"], e["label_id"], short(e["before"]),
             short(e["after"]), e["reason"]] for e in records.audit_log(db)]


def changed(db, prompt_id) -> tuple:
    """(the open record read again, the audit log) after a change; the record stays as it is when none is open."""
    prompt_id = whole_number(prompt_id, "record id")
    shown = detail_markdown(records.record_detail(db, prompt_id)) if prompt_id is not None else gr.skip()
    return shown, audit_table(db)


def label_id(text) -> int:
    label = whole_number(text, "label id")
    if label is None:
        raise InputError("enter the label's id (shown in the record)", field="label id")
    return label


# The service checks the corrected value as a score or an order; here both are typed into one box.
@keep_on_error(2, labels={"score": "Corrected value", "order": "Corrected value"})
@requires("admin")
def correct(ctx: UIContext, kind, label, text, why, prompt_id, request: gr.Request) -> tuple:
    label = label_id(label)
    with ctx.connection() as db:
        records.correct_label(db, ctx.username(request), kind, int(label), parse_correction(kind, text), why or "")
        gr.Info(f"{kind.capitalize()} {int(label)} corrected.")
        return changed(db, prompt_id)


@keep_on_error(2)
@requires("admin")
def delete(ctx: UIContext, kind, label, why, prompt_id, request: gr.Request) -> tuple:
    label = label_id(label)
    with ctx.connection() as db:
        records.delete_label(db, ctx.username(request), kind, int(label), why or "")
        gr.Info(f"{kind.capitalize()} {int(label)} deleted.")
        return changed(db, prompt_id)


@keep_on_error(1)
@requires("admin")
def mark_gold(ctx: UIContext, item, text, prompt_id, request: gr.Request) -> str:
    item = whole_number(item, "item id")
    if item is None:
        raise InputError("enter the item's id (shown in the record)", field="item id")
    with ctx.connection() as db:
        records.mark_gold(db, ctx.username(request), int(item), parse_gold(text))
        return changed(db, prompt_id)[0]
