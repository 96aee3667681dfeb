"""The Data tab's "4. Import labels": a TRL preference file (prompt/chosen/rejected) stored as rankings."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from labeler.services.labels import labels_import
from labeler.errors import InputError
from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.roles import requires
from labeler.ui.soft_errors import keep_on_error
from labeler.ui.tabs.data.prompts import without_upload_path
from labeler.ui.tabs.data.summary import data_summary


@dataclass(frozen=True)
class LabelFilePart:
    file: gr.File
    button: gr.Button
    status: gr.Markdown


def build_label_file() -> LabelFilePart:
    with gr.Accordion("4. Import labels (TRL preference file)", open=False):
        labels_file = gr.File(label="prompt/chosen/rejected JSONL, CSV or Parquet",
                              file_types=[".jsonl", ".json", ".csv", ".parquet"])
        labels_button = gr.Button("Import labels", elem_id="data-import-labels")
        labels_status = gr.Markdown()
    return LabelFilePart(labels_file, labels_button, labels_status)


@keep_on_error(2)
@requires("admin")
def import_labels(ctx: UIContext, path: str | None, request: gr.Request) -> tuple[str, str]:
    """The uploaded preference file imported (duplicates and chosen = rejected pairs skipped); (status, summary)."""
    if not path:
        raise InputError("choose a preference file first", field="preference file")
    with ctx.connection() as db:
        try:
            result = labels_import.import_preferences(db, path, ctx.project)
        except InputError as error:
            raise without_upload_path(error, path) from None
        message = f"Imported **{result.added}** preference pairs ({result.duplicates} duplicates skipped"
        skipped = getattr(result, "skipped", 0)
        message += f", {skipped} with chosen = rejected dropped)." if skipped else ")."
        return message, data_summary(db, ctx.project)


def wire(ctx: UIContext, part: LabelFilePart, summary: gr.Markdown) -> None:
    part.button.click(bind(import_labels, ctx), [part.file], [part.status, summary], api_name="data_import_labels")
