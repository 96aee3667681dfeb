"""Admin tab: accounts, the project's labelling settings, annotator quality, gold items, models, backup.

Built from parts, each a module with its widgets and its handlers (named functions taking the UIContext first):
users.py, project_settings.py, quality.py (statistics, agreement, gold items), model_registry.py, backup.py;
what the tab reads back after every change is snapshot.py's. Every handler checks the admin role itself
(roles.check_role): the tab is hidden from annotators, but its endpoints are not, so the check is the only thing
that counts.
"""
from __future__ import annotations

import gradio as gr

from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.gradio_internals import QUIET
from labeler.ui.roles import requires
from labeler.ui.session import quiet_on_load
from labeler.ui.soft_errors import keep_on_error
from labeler.ui.tabs.admin import backup, model_registry, project_settings, quality, users
from labeler.ui.tabs.admin.snapshot import SHOWN, snapshot

TITLE = "Admin"


@keep_on_error(len(SHOWN))
@requires("admin")
def refresh(ctx: UIContext, request: gr.Request) -> tuple:
    """Everything the tab shows, read again (snapshot)."""
    with ctx.connection() as db:
        return snapshot(db, ctx.project)


def build(ctx: UIContext):
    """The tab's widgets and events; returns the hook app.build_app calls with the gr.Tab (its select event)."""
    users_part = users.build_users()
    project_part = project_settings.build_project_settings()
    quality_part = quality.build_quality()
    models_part = model_registry.build_models()
    backup_part = backup.build_backup()
    refresh_button = gr.Button("Refresh", size="sm", elem_id="admin-refresh")
    widgets = {"users": users_part.users, "who": users_part.who, "likert_min": project_part.likert_min,
               "likert_max": project_part.likert_max, "overlap": project_part.overlap,
               "guidelines": project_part.guidelines, "ranking_guidelines": project_part.ranking_guidelines,
               "stats": quality_part.stats, "agreement": quality_part.agreement, "models_table": models_part.table,
               "model_base": models_part.base, "prompt_format": project_part.prompt_format,
               "selection": project_part.selection, "answer_tokens": project_part.answer_tokens,
               "measure": project_part.measure}
    shown = [widgets[name] for name in SHOWN]

    refresh_button.click(bind(refresh, ctx), None, shown, api_name="admin_refresh")
    users.wire(ctx, users_part, shown)
    project_settings.wire(ctx, project_part, shown)
    model_registry.wire(ctx, models_part, shown)
    quality.wire(ctx, quality_part)
    backup.wire(ctx, backup_part)
    if ctx.app is not None:
        ctx.app.load(quiet_on_load(bind(refresh, ctx), len(shown)), None, shown, api_name="admin_load")

    def on_tab(tab: gr.Tab) -> None:
        tab.select(quiet_on_load(bind(model_registry.models_view, ctx), 2), None, [models_part.table, models_part.base],
                   api_name="admin_models_view", **QUIET)
        quality.on_tab(ctx, quality_part, tab)

    return on_tab
