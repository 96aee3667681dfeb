"""The Records tab's list: one page of records matching the filters, searched from page 1 or paged back and
forth (the page number lives in its own widget, so nothing but widget values travels between calls)."""
from __future__ import annotations

import gradio as gr

from labeler.services.labels import records
from labeler.errors import InputError
from labeler.ui.context import UIContext
from labeler.ui.roles import requires
from labeler.ui.soft_errors import keep_on_error
from labeler.ui.tabs.records.filters import filters_from, score_bound

# In words, with spaces: a header of a field name ("mean_score") wrapped mid-word in a narrow column.
LIST_HEADERS = ["Id", "Prompt", "Split", "Source", "Answers", "Ratings", "Mean score", "Rankings", "Gold"]
PAGE_SIZE = 20
LIST_OUTPUTS = 3  # the table, the note, the page number


def list_table(page) -> list[list]:
    rows = []
    for r in page.rows:
        rows.append([r["id"], r["text"][:160], r["split"], r["source"], r["answers"], r["ratings"],
                     "" if r["mean_score"] is None else r["mean_score"], r["rankings"], "yes" if r["gold"] else ""])
    return rows


def page_note(page) -> str:
    return f"**{page.total}** records · page **{page.page}** of **{page.pages}**"


def listing(db, values, page: int) -> tuple:
    """(the table, the note, the page number) of page `page` for the filter `values` (filters_from's order)."""
    result = records.list_records(db, filters_from(*values), page=max(1, int(page or 1)), page_size=PAGE_SIZE)
    return list_table(result), page_note(result), result.page


# Every input spelled out: Gradio fills `request` only when it is a positional parameter (its special_args stops
# at *args), so `*args, request` failed every search with a TypeError.
# The filter boxes' words: the service names its fields min_score and max_score.
SCORE_BOXES = {"min_score": "Some rating >=", "max_score": "Some rating <="}


@keep_on_error(LIST_OUTPUTS, labels=SCORE_BOXES)
@requires("admin")
def search(ctx: UIContext, step: int, project_name, text, annotator_name, state_name, low_text, high_text,
           split_name, source_name, page, request: gr.Request) -> tuple:
    """One page of the records matching the filters: the first (Search), or the one before or after `page`
    (Previous, Next; clamped to the pages)."""
    # `step` (bound by the tab's build): 0 searches from page 1, -1 / +1 move from the page shown.
    low, high = score_bound(low_text, "min_score"), score_bound(high_text, "max_score")
    if low is not None and high is not None and low > high:  # said before the service says it in its names
        raise InputError(f"{low:g} is above the other bound, {SCORE_BOXES['max_score']} {high:g}", field="min_score")
    values = [project_name, text, annotator_name, state_name, low, high, split_name, source_name]
    with ctx.connection() as db:
        if step == 0:
            return listing(db, values, 1)
        total_pages = records.list_records(db, filters_from(*values), page=1, page_size=PAGE_SIZE).pages
        return listing(db, values, min(max(1, int(page or 1) + step), total_pages))
