"""Data tab (admins): prompts in, answers generated, labels out as TRL datasets, preference files in.

Every handler checks the admin role itself; service InputErrors become a red message naming file,
line and field. Uploads are capped by launch(max_file_size=...).
"""
from __future__ import annotations

import shutil
from pathlib import Path

import gradio as gr

from labeler import forms
from labeler.ui import downloads
from labeler.ui.context import UIContext
from labeler.services.errors import InputError, PermissionDenied
from labeler.ui.roles import check_role, requires
from labeler.ui.session import quiet_on_load
from labeler.ui.soft_errors import keep_on_error, ui_errors
from rlhf.configs import GenerationSettings

TITLE = "Data"
PROMPT_FILE_TYPES = [".csv", ".jsonl", ".json", ".txt", ".parquet"]
TARGET_ALL = "all without enough answers"
TARGET_LAST_IMPORT = "the last import batch"
EXPORT_KINDS = ["preferences", "ratings", "unpaired"]
EXPORT_FORMATS = ["jsonl", "parquet", "csv", "hf"]
# Export filters shown as plain widgets; annotators gets a multi-select of the project's users instead.
# Seconds between the admin's Data tab re-reading its counts and latest prompts by itself (answers and labels
# arrive from runs, the CLI and annotators while the tab is open).
REFRESH_SECONDS = 5.0
LATEST_PROMPTS = 20
EXPORT_FIELDS = [
    "since", "until", "min_annotators", "min_agreement", "include_rating_pairs", "conversational",
    "zscore", "threshold", "test_size", "seed", "license",
]


def data_summary(db, project: str) -> str:
    """Counts an admin needs to decide what to do next (import, generate, or label)."""
    from labeler.services.projects import project_counts

    counts = project_counts(db, project)
    prompts, responses, ratings, rankings = (counts[k] for k in ("prompts", "responses", "ratings", "rankings"))
    hint = ""
    if prompts == 0:
        hint = "\n\n➡ No prompts yet: upload a file or import the shipped movie-review prompts."
    elif responses == 0:
        hint = "\n\n➡ No answers yet: generate responses below so annotators have work."
    return (
        f"Project **{project}**: **{prompts}** prompts · **{responses}** answers · "
        f"**{ratings}** ratings · **{rankings}** rankings{hint}"
    )


def _prompt_table(db, project: str) -> list[list]:
    """The newest prompts first: what an import just added is what the admin looks for."""
    from labeler.services import prompts

    offset = max(0, prompts.count_prompts(db, project) - LATEST_PROMPTS)
    rows = prompts.list_prompts(db, project, LATEST_PROMPTS, offset)
    return [[row["id"], row["text"][:200], row.get("source", "")] for row in reversed(rows)]


def _model_choices(db) -> list[str]:
    from labeler.services import models

    return models.chat_model_names(db)


def _without_upload_path(error: InputError, path: str) -> InputError:
    """The same error naming the uploaded file by its own name: Gradio stores an upload as
    <cache>/<64 hex digits>/<name>, and that server path means nothing to the user (and should not be shown)."""
    full, name = str(path), Path(path).name
    message = error.message.replace(str(Path(full).parent) + "/", "").replace(full, name)
    file = None if error.file is None else str(error.file).replace(str(Path(full).parent) + "/", "")
    return InputError(message, file=file, line=error.line, field=error.field)


def _zip_folder(folder: Path) -> Path:
    # A saved `datasets` folder is several files: ship it as one zip the browser can download.
    return Path(shutil.make_archive(str(folder), "zip", root_dir=folder))


def build(ctx: UIContext) -> None:
    from labeler.services.chat import ModelCache

    # The generating model stays loaded between clicks (the Chat tab keeps its models the same way); one
    # model, owned by this app, never a module global.
    generation_cache = ModelCache(max_models=1)
    summary = gr.Markdown(elem_id="data-summary")

    with gr.Accordion("1. Prompts", open=True):
        with gr.Row():
            prompt_file = gr.File(
                label="Prompt file (CSV with a 'prompt' column, JSONL, .txt one per line, Parquet)",
                file_types=PROMPT_FILE_TYPES, elem_id="data-prompt-file",
            )
            with gr.Column():
                import_button = gr.Button("Import prompt file", variant="primary", elem_id="data-import-prompts")
                shipped_button = gr.Button("Import the shipped movie-review prompts", elem_id="data-import-shipped")
        prompt_table = gr.Dataframe(
            headers=["id", "prompt", "source"], label="Latest prompts (newest first)", interactive=False, wrap=True,
            elem_id="data-prompts",
        )

    gen_specs = forms.field_specs(GenerationSettings)
    with gr.Accordion("2. Generate answers", open=True):
        with gr.Row():
            model = gr.Dropdown(
                choices=[ctx.settings.model], value=ctx.settings.model, allow_custom_value=True,
                label="Model", info="A registered model, 'default', or a local safetensors folder",
            )
            n_per_prompt = gr.Number(value=2, precision=0, minimum=1, maximum=8, label="Answers per prompt")
            limit = gr.Number(value=0, precision=0, minimum=0, label="Prompts (0 = all that need answers)")
            target = gr.Radio(
                [TARGET_ALL, TARGET_LAST_IMPORT], value=TARGET_ALL, label="Which prompts",
                info="Prompts with fewer answers than asked from this model; or only those of the latest upload",
                elem_id="data-generate-target",
            )
        with gr.Accordion("Sampling settings", open=False):
            with gr.Row():
                gen_widgets = [forms.widget(spec) for spec in gen_specs]
        generate_button = gr.Button("Generate responses", variant="primary", elem_id="data-generate")
        generate_status = gr.Markdown()

    from labeler.services.export import ExportOptions

    export_specs = forms.field_specs(ExportOptions, EXPORT_FIELDS)
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
                    export_by_name[spec.name] = forms.widget(spec)
        with gr.Row(elem_id="data-export-switches"):
            for spec in export_specs:
                if spec.kind == "bool":
                    export_by_name[spec.name] = forms.widget(spec, min_width=260)
        export_widgets = [export_by_name[spec.name] for spec in export_specs]
        export_button = gr.Button("Export", variant="primary", elem_id="data-export")
        export_file = gr.File(label="Download", interactive=False, elem_id="data-export-file")
        export_status = gr.Markdown()

    with gr.Accordion("4. Import labels (TRL preference file)", open=False):
        labels_file = gr.File(label="prompt/chosen/rejected JSONL, CSV or Parquet",
                              file_types=[".jsonl", ".json", ".csv", ".parquet"])
        labels_button = gr.Button("Import labels", elem_id="data-import-labels")
        labels_status = gr.Markdown()

    def threshold_update(db, zscore: bool) -> dict:
        # A number box cannot show "unset" (the browser sent 0 and every row came out good): it shows the
        # export service's own default, the one the CLI uses when --threshold is left out.
        from labeler.services import export
        from labeler.services.projects import get_project

        value = export.default_threshold(get_project(db, ctx.project), bool(zscore))
        return gr.update(value=value, info=f"unpaired: label = score >= threshold (default {value:g}: "
                                            f"{'0 for z-scores' if zscore else 'the scale midpoint'})")

    @ui_errors
    @requires(ctx, "admin")
    def data_refresh(request: gr.Request):
        with ctx.connection() as db:
            users = [u.username for u in _list_users(db)]
            names = _model_choices(db)
            if ctx.settings.model not in names:
                names = [ctx.settings.model, *names]
            return (
                data_summary(db, ctx.project),
                _prompt_table(db, ctx.project),
                gr.update(choices=names),
                gr.update(choices=users),
                *([threshold_update(db, False)] if "threshold" in export_by_name else []),
            )

    refresh_outputs = [summary, prompt_table, model, annotators]
    if "threshold" in export_by_name:
        refresh_outputs.append(export_by_name["threshold"])

    @keep_on_error(2)
    @requires(ctx, "admin")
    def import_prompt_file(path, request: gr.Request):
        from labeler.services import prompts

        if not path:
            raise InputError("choose a prompt file first", field="prompt file")
        with ctx.connection() as db:
            try:
                result = prompts.import_prompts(db, path, ctx.project, source=Path(path).name)
            except InputError as error:
                raise _without_upload_path(error, path) from None
            gr.Info(f"Imported {result.added} prompts ({result.duplicates} duplicates skipped).")
            return data_summary(db, ctx.project), _prompt_table(db, ctx.project)

    @keep_on_error(2)
    @requires(ctx, "admin")
    def import_shipped(request: gr.Request):
        from labeler.services import prompts

        with ctx.connection() as db:
            result = prompts.import_shipped_prompts(db, ctx.project)
            gr.Info(f"Imported {result.added} prompts ({result.duplicates} already there).")
            return data_summary(db, ctx.project), _prompt_table(db, ctx.project)

    @keep_on_error(2)
    @requires(ctx, "admin")
    def generate(values: dict, request: gr.Request, progress=gr.Progress()):
        # Inputs given as a set arrive as {component: value}: the form's length can grow with the dataclass.
        from labeler.services import generation

        model_name, n, limit_value = values[model], values[n_per_prompt], values[limit]
        with ctx.connection() as db:
            raw = forms.from_widgets(gen_specs, [values[w] for w in gen_widgets])
            settings = forms.build_config(GenerationSettings, raw)
            within = None
            if values[target] == TARGET_LAST_IMPORT:
                within = generation.last_import_prompt_ids(db, ctx.project)
                if not within:
                    raise InputError("the project has no imported prompts yet", field="which prompts")
            progress(0, desc="Loading the model (kept loaded for the next run)")

            def report(done: int, total: int) -> None:
                batches = -(-total // settings.batch_size)
                batch = min(batches, done // settings.batch_size + 1)
                desc = (f"Generating batch {batch} of {batches}" if done < total else "Queueing the last answers")
                progress(done / total, desc=f"{desc} ({done} of {total} answers done)")

            ids = generation.generate_responses(
                db, ctx.project, model=(model_name or ctx.settings.model).strip(), n_per_prompt=int(n or 1),
                settings=settings, limit=int(limit_value) if limit_value else None, progress=report,
                within_prompt_ids=within, loader=generation_cache.get,
            )
            scope = f" for the last import batch ({len(within)} prompts)" if within is not None else ""
            message = f"Generated **{len(ids)}** answers{scope}; they are in the Rate and Rank queues now."
            if not ids:
                message = f"Nothing to generate{scope}: every prompt already has that many answers from this model."
            return message, data_summary(db, ctx.project)

    @ui_errors
    @requires(ctx, "admin")
    def export_labels(inputs: dict, request: gr.Request):
        from labeler.services import export

        kind_value, fmt_value = inputs[kind], inputs[fmt]
        with ctx.connection() as db:
            values = forms.from_widgets(export_specs, [inputs[w] for w in export_widgets])
            values["annotators"] = list(inputs[annotators] or []) or None
            options = forms.build_config(export.ExportOptions, values)
            out_dir = downloads.new_folder("export-")
            suffix = "" if fmt_value == "hf" else f".{fmt_value}"
            result = export.export(db, ctx.project, kind_value, fmt_value, out_dir / f"{kind_value}{suffix}", options)
            path = Path(result.path)
            if path.is_dir():
                path = _zip_folder(path)
            return str(path), f"Exported **{result.rows}** {kind_value} rows as {fmt_value}."

    @keep_on_error(2)
    @requires(ctx, "admin")
    def import_labels(path, request: gr.Request):
        from labeler.services import labels_import

        if not path:
            raise InputError("choose a preference file first", field="preference file")
        with ctx.connection() as db:
            try:
                result = labels_import.import_preferences(db, path, ctx.project)
            except InputError as error:
                raise _without_upload_path(error, path) from None
            message = f"Imported **{result.added}** preference pairs ({result.duplicates} duplicates skipped"
            skipped = getattr(result, "skipped", 0)
            message += f", {skipped} with chosen = rejected dropped)." if skipped else ")."
            return message, data_summary(db, ctx.project)

    import_button.click(import_prompt_file, [prompt_file], [summary, prompt_table], api_name="data_import_prompts")
    shipped_button.click(import_shipped, None, [summary, prompt_table], api_name="data_import_shipped")
    generate_button.click(
        generate, {model, n_per_prompt, limit, target, *gen_widgets}, [generate_status, summary],
        api_name="data_generate", trigger_mode="once", concurrency_limit=1,
    )
    export_button.click(
        export_labels, {kind, fmt, annotators, *export_widgets}, [export_file, export_status], api_name="data_export"
    )
    if "threshold" in export_by_name and "zscore" in export_by_name:

        @ui_errors
        @requires(ctx, "admin")
        def export_threshold(zscore: bool, request: gr.Request):
            # Switching z-scores on or off moves the scale, so the default threshold moves with it.
            with ctx.connection() as db:
                return threshold_update(db, zscore)

        export_by_name["zscore"].change(
            export_threshold, export_by_name["zscore"], export_by_name["threshold"], api_name="data_export_threshold"
        )
    labels_button.click(import_labels, [labels_file], [labels_status, summary], api_name="data_import_labels")
    refresh = gr.Button("Refresh", size="sm", elem_id="data-refresh")
    refresh.click(data_refresh, None, refresh_outputs, api_name="data_refresh")
    # The counts and the latest prompts follow the database by themselves, with no Refresh click. The timer starts
    # off and the page load turns it on for admins only: an annotator's page sends no ticks.
    timer = gr.Timer(REFRESH_SECONDS, active=False)

    def data_tick(request: gr.Request):
        try:
            check_role(ctx, request, "admin")  # here, not @requires: a refused tick changes nothing
            with ctx.connection() as db:
                return data_summary(db, ctx.project), _prompt_table(db, ctx.project)
        except (InputError, PermissionDenied):
            return gr.skip(), gr.skip()

    def data_load(request: gr.Request):
        return (gr.Timer(active=True), *data_refresh(request))

    timer.tick(data_tick, None, [summary, prompt_table], api_name="data_tick", show_progress="hidden")
    if ctx.app is not None:
        ctx.app.load(quiet_on_load(data_load, len(refresh_outputs) + 1), None, [timer, *refresh_outputs],
                     api_name="data_load")


def _list_users(db):
    from labeler.services import accounts

    return accounts.list_users(db)
