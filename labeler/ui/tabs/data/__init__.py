"""Data tab (admins): prompts in, answers generated, labels out as TRL datasets, preference files in.

Built from parts, each a module with its widgets and its handlers (named functions taking the UIContext first):
prompts.py (1. Prompts), generate.py (2. Generate answers), export.py (3. Export), label_files.py (4. Import
labels); the summary line above them (summary.py) and its Refresh button and timer here. Every handler checks
the admin role itself; service InputErrors become a red message naming file, line and field. Uploads are capped
by launch(max_file_size=...).
"""
from __future__ import annotations

import gradio as gr

from labeler.services.data import accounts
from labeler.errors import InputError, PermissionDenied
from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.roles import check_role, requires
from labeler.ui.session import quiet_on_load
from labeler.ui.soft_errors import ui_errors
from labeler.ui.tabs.data import export, generate, label_files, prompts
from labeler.ui.tabs.data.prompts import prompt_table
from labeler.ui.tabs.data.summary import data_summary

TITLE = "Data"
# Seconds between the admin's Data tab re-reading its counts and latest prompts by itself (answers and labels
# arrive from runs, the CLI and annotators while the tab is open).
REFRESH_SECONDS = 5.0


@ui_errors
@requires("admin")
def refresh(ctx: UIContext, request: gr.Request) -> tuple:
    """Everything the tab reads from the database: the summary, the latest prompts, the model and annotator
    pickers' choices, the export threshold's default, the held-out share, the answer length and where it came
    from (outputs: refresh_outputs)."""
    with ctx.connection() as db:
        users = [u.username for u in accounts.list_users(db)]
        return (
            data_summary(db, ctx.project),
            prompt_table(db, ctx.project),
            gr.update(choices=generate.model_choices(ctx, db)),
            gr.update(choices=users),
            export.threshold_update(db, ctx.project, False),
            prompts.heldout_share_value(db, ctx.project),
            generate.answer_tokens_value(db, ctx.project),
            generate.answer_length_note(db, ctx.project),
        )


def tick(ctx: UIContext, request: gr.Request) -> tuple:
    """The timer's tick: the summary and the latest prompts again."""
    try:
        check_role(ctx, request, "admin")  # here, not ui_errors: a refused tick changes nothing
        with ctx.connection() as db:
            return data_summary(db, ctx.project), prompt_table(db, ctx.project)
    except (InputError, PermissionDenied):
        return gr.skip(), gr.skip()


def load(ctx: UIContext, request: gr.Request) -> tuple:
    """The page load: the timer on (for admins: `refresh` refuses anyone else) and everything `refresh` reads."""
    return (gr.Timer(active=True), *refresh(ctx, request))


def build(ctx: UIContext) -> None:
    summary = gr.Markdown(elem_id="data-summary")
    prompts_part = prompts.build_prompts()
    generate_part = generate.build_generate(ctx)
    export_part = export.build_export()
    label_file_part = label_files.build_label_file()

    imported = prompts.wire(ctx, prompts_part, summary)
    generate.wire(ctx, generate_part, summary)
    generate.wire_after_import(ctx, generate_part, imported, summary)
    export.wire(ctx, export_part)
    label_files.wire(ctx, label_file_part, summary)
    refresh_outputs = [summary, prompts_part.table, generate_part.model, export_part.annotators,
                       export_part.options["threshold"], prompts_part.heldout_share, generate_part.answer_tokens,
                       generate_part.length_note]
    refresh_button = gr.Button("Refresh", size="sm", elem_id="data-refresh")
    refresh_button.click(bind(refresh, ctx), None, refresh_outputs, api_name="data_refresh")
    # The counts and the latest prompts follow the database by themselves, with no Refresh click. The timer starts
    # off and the page load turns it on for admins only: an annotator's page sends no ticks.
    timer = gr.Timer(REFRESH_SECONDS, active=False)
    timer.tick(bind(tick, ctx), None, [summary, prompts_part.table], api_name="data_tick", show_progress="hidden")
    if ctx.app is not None:
        ctx.app.load(quiet_on_load(bind(load, ctx), len(refresh_outputs) + 1), None, [timer, *refresh_outputs],
                     api_name="data_load")
