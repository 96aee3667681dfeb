"""The Admin tab's "Backup": a consistent copy of the database to download."""
from __future__ import annotations

import time
from dataclasses import dataclass

import gradio as gr

from labeler.ui import downloads
from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.roles import requires
from labeler.ui.soft_errors import keep_on_error
from storage import backup


@dataclass(frozen=True)
class BackupPart:
    button: gr.Button
    file: gr.File


def build_backup() -> BackupPart:
    with gr.Accordion("Backup", open=False):
        backup_button = gr.Button("Download a consistent copy of the database", elem_id="admin-backup")
        backup_file = gr.File(label="Backup", interactive=False)
    return BackupPart(backup_button, backup_file)


@keep_on_error(1)
@requires("admin")
def download_backup(ctx: UIContext, request: gr.Request) -> str:
    """The database copied (storage.backup) into a new download folder; the copy's path."""
    with ctx.connection() as db:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        out = downloads.new_folder("backup-") / f"studio-{stamp}.db"
        return str(backup(db, out))


def wire(ctx: UIContext, part: BackupPart) -> None:
    part.button.click(bind(download_backup, ctx), None, [part.file], api_name="admin_backup")
