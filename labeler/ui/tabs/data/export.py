"""The Data tab's "3. Export labels as a dataset": preferences, ratings or unpaired labels as a TRL dataset
file (or a zipped `datasets` folder), filtered by the export service's options."""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from labeler import forms
from labeler.services.labels import export
from labeler.services.data.projects import get_project
from labeler.ui import downloads
from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.roles import requires
from labeler.ui.soft_errors import ui_errors

EXPORT_KINDS = ["preferences", "ratings", "unpaired"]
EXPORT_FORMATS = ["jsonl", "parquet", "csv", "hf"]
# Export filters shown as plain widgets; annotators gets a multi-select of the project's users instead. Each is
# labelled in words (the field name, as `rlhf-studio export --set` takes it, is in its help's place no more).
EXPORT_FIELDS = [
    "since", "until", "min_annotators", "min_agreement", "include_rating_pairs", "conversational",
    "zscore", "threshold", "test_size", "seed", "license",
]
EXPORT_LABELS = {
    "since": "Labelled on or after (date)", "until": "Labelled before (date)",
    "min_annotators": "Labelled by at least N people", "min_agreement": "Minimum agreement between annotators",
    "include_rating_pairs": "Also turn ratings into preference pairs", "conversational": "Chat format (messages)",
    "zscore": "Standardise each annotator's scores (z-scores)", "threshold": "Good-answer threshold (score)",
    "test_size": "Share held out for testing", "seed": "Random seed (the split)", "license": "License (dataset card)",
}


@dataclass(frozen=True)
class ExportPart:
    kind: gr.Radio
    fmt: gr.Radio
    annotators: gr.Dropdown  # the project's users, filled on load
    specs: list[forms.FieldSpec]  # ExportOptions' EXPORT_FIELDS
    options: dict[str, gr.components.Component]  # one widget per spec, by field name
    button: gr.Button
    file: gr.File
    status: gr.Markdown

    @property
    def option_widgets(self) -> list:
        return [self.options[spec.name] for spec in self.specs]

    @property
    def inputs(self) -> set:
        return {self.kind, self.fmt, self.annotators, *self.option_widgets}


def build_export() -> ExportPart:
    export_specs = forms.field_specs(export.ExportOptions, EXPORT_FIELDS)
    with gr.Accordion("3. Export labels as a dataset", open=False):
        with gr.Row():
            kind = gr.Radio(EXPORT_KINDS, value="preferences", label="Kind",
                            info="preferences: prompt/chosen/rejected (RM, DPO); ratings: scores; unpaired: KTO-style")
            fmt = gr.Radio(EXPORT_FORMATS, value="jsonl", label="Format", info="hf = a saved `datasets` folder (zipped)")
            annotators = gr.Dropdown(choices=[], multiselect=True, label="Only these annotators (empty = all)")
        # The switches get a row of their own, each wide enough for its whole name and help: squeezed between
        # the number boxes, their labels were cut to "include" and "conver".
        export_by_name = {}
        with gr.Row():
            for spec in export_specs:
                if spec.kind != "bool":
                    export_by_name[spec.name] = forms.widget(spec, label=EXPORT_LABELS[spec.name])
        with gr.Row(elem_id="data-export-switches"):
            for spec in export_specs:
                if spec.kind == "bool":
                    export_by_name[spec.name] = forms.widget(spec, label=EXPORT_LABELS[spec.name], min_width=260)
        export_button = gr.Button("Export", variant="primary", elem_id="data-export")
        export_file = gr.File(label="Download", interactive=False, elem_id="data-export-file")
        export_status = gr.Markdown()
    return ExportPart(kind, fmt, annotators, export_specs, export_by_name, export_button, export_file, export_status)


def threshold_update(db, project: str, zscore: bool) -> dict:
    """The threshold box showing the export service's own default for the scale (the one the CLI uses when
    --threshold is left out): a number box cannot show "unset" (the browser sent 0 and every row came out good)."""
    value = export.default_threshold(get_project(db, project), bool(zscore))
    return gr.update(value=value, info=f"unpaired: label = score >= threshold (default {value:g}: "
                                        f"{'0 for z-scores' if zscore else 'the scale midpoint'})")


def zip_folder(folder: Path) -> Path:
    # A saved `datasets` folder is several files: ship it as one zip the browser can download. Private (0600,
    # like the other exports' files), also the copy Gradio keeps in its cache (it copies the mode).
    archive = Path(shutil.make_archive(str(folder), "zip", root_dir=folder))
    archive.chmod(0o600)
    return archive


@ui_errors
@requires("admin")
def export_labels(ctx: UIContext, part: ExportPart, inputs: dict, request: gr.Request) -> tuple[str, str]:
    """The labels exported into a new download folder; (the file to download, a line saying how many rows)."""
    kind_value, fmt_value = inputs[part.kind], inputs[part.fmt]
    with ctx.connection() as db:
        values = forms.from_widgets(part.specs, [inputs[w] for w in part.option_widgets])
        values["annotators"] = list(inputs[part.annotators] or []) or None
        options = forms.build_config(export.ExportOptions, values)
        out_dir = downloads.new_folder("export-")
        suffix = "" if fmt_value == "hf" else f".{fmt_value}"
        result = export.export(db, ctx.project, kind_value, fmt_value, out_dir / f"{kind_value}{suffix}", options)
        path = Path(result.path)
        if path.is_dir():
            path = zip_folder(path)
        return str(path), f"Exported **{result.rows}** {kind_value} rows as {fmt_value}."


@ui_errors
@requires("admin")
def export_threshold(ctx: UIContext, zscore: bool, request: gr.Request) -> dict:
    """Switching z-scores on or off moves the scale, so the default threshold moves with it."""
    with ctx.connection() as db:
        return threshold_update(db, ctx.project, zscore)


def wire(ctx: UIContext, part: ExportPart) -> None:
    part.button.click(bind(export_labels, ctx, part), part.inputs, [part.file, part.status], api_name="data_export")
    # Both are in EXPORT_FIELDS (field_specs refuses a name ExportOptions lacks).
    part.options["zscore"].change(bind(export_threshold, ctx), part.options["zscore"], part.options["threshold"],
                                  api_name="data_export_threshold")
