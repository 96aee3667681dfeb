"""The Data tab's "1. Prompts": a prompt file or the shipped movie-review prompts imported, the latest shown; a
prompt picked in the table (or by its number) edited, retired or restored."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from labeler.services.data import prompts
from labeler.errors import InputError
from labeler.services.data.projects import DEFAULT_HELDOUT_SHARE, get_project
from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.roles import requires
from labeler.ui.soft_errors import keep_on_error
from labeler.ui.tabs.data.summary import data_summary

PROMPT_FILE_TYPES = [".csv", ".jsonl", ".json", ".txt", ".parquet"]
LATEST_PROMPTS = 20
TABLE_HEADERS = ["Prompt", "Text", "Source", "Split"]


@dataclass(frozen=True)
class PromptsPart:
    file: gr.File
    import_button: gr.Button
    shipped_button: gr.Button
    heldout_share: gr.Slider  # the project's share of prompts held out for evaluation
    apply_share: gr.Button
    table: gr.Dataframe  # the latest prompts, newest first
    prompt_id: gr.Number  # the prompt to edit, retire or restore: the table's "Prompt" number, filled by a click
    prompt_text: gr.Textbox
    save_text: gr.Button
    retire: gr.Button
    restore: gr.Button


def build_prompts() -> PromptsPart:
    with gr.Accordion("1. Prompts", open=True):
        with gr.Row():
            prompt_file = gr.File(
                label="Prompt file (CSV with a 'prompt' column, JSONL, .txt one per line, Parquet)",
                file_types=PROMPT_FILE_TYPES, elem_id="data-prompt-file",
            )
            with gr.Column():
                import_button = gr.Button("Import prompt file", variant="primary", elem_id="data-import-prompts")
                shipped_button = gr.Button("Import the shipped movie-review prompts", elem_id="data-import-shipped")
        with gr.Row():
            heldout_share = gr.Slider(
                0, 0.5, value=DEFAULT_HELDOUT_SHARE, step=0.05, label="Held-out share",
                info=f"Prompts set aside to evaluate runs on (chosen by a hash of each prompt): never trained on "
                     f"nor labelled; at least {prompts.VERDICT_HELDOUT} (half of a smaller project) so a verdict can "
                     "decide. Imports use it; Apply re-splits before the first label. A file's 'split' column wins.",
                elem_id="data-heldout-share",
            )
            apply_share = gr.Button("Apply held-out share", elem_id="data-apply-heldout-share")
        prompt_table = gr.Dataframe(
            headers=TABLE_HEADERS, label="Latest prompts (newest first; click one to edit or retire it)",
            interactive=False, wrap=True, elem_id="data-prompts",
        )
        with gr.Row(equal_height=True):
            prompt_id = gr.Number(precision=0, minimum=1, label="Prompt number", scale=0, min_width=140,
                                  info="The first column above", elem_id="data-prompt-id")
            prompt_text = gr.Textbox(label="Prompt text", lines=2, scale=4, elem_id="data-prompt-text",
                                     info="Editable while the prompt has no answers")
            with gr.Column(scale=1, min_width=160):
                save_text = gr.Button("Save text", size="sm", elem_id="data-prompt-save")
                retire = gr.Button("Retire", size="sm", variant="stop", elem_id="data-prompt-retire")
                restore = gr.Button("Restore", size="sm", elem_id="data-prompt-restore")
        gr.Markdown("A **retired** prompt leaves the labelling queues, training and evaluation; its answers and labels "
                    "are kept, and **Restore** brings it back.", elem_classes=["studio-note"])
    return PromptsPart(prompt_file, import_button, shipped_button, heldout_share, apply_share, prompt_table,
                       prompt_id, prompt_text, save_text, retire, restore)


def prompt_table(db, project: str) -> list[list]:
    """The newest prompts first: what an import just added is what the admin looks for."""
    offset = max(0, prompts.count_prompts(db, project) - LATEST_PROMPTS)
    rows = prompts.list_prompts(db, project, LATEST_PROMPTS, offset)
    return [[row["id"], row["text"][:200], row.get("source", ""), _SPLIT_NAMES.get(row["split"], row["split"])]
            for row in reversed(rows)]


_SPLIT_NAMES = {"train": "train", "test": "held out", prompts.TYPED_SPLIT: "typed in Chat",
               prompts.RETIRED_SPLIT: "retired"}


def import_message(result: prompts.ImportResult) -> str:
    """What an import did, held-out prompts included."""
    held = f"{result.heldout} held out for evaluation" if result.heldout else (result.note or "none held out")
    return f"Imported {result.added} prompts ({result.duplicates} duplicates skipped; {held})."


def without_upload_path(error: InputError, path: str) -> InputError:
    """The same error naming the uploaded file by its own name: Gradio stores an upload as
    <cache>/<64 hex digits>/<name>, and that server path means nothing to the user (and should not be shown)."""
    full, name = str(path), Path(path).name
    message = error.message.replace(str(Path(full).parent) + "/", "").replace(full, name)
    file = None if error.file is None else str(error.file).replace(str(Path(full).parent) + "/", "")
    return InputError(message, file=file, line=error.line, field=error.field)


@keep_on_error(2)
@requires("admin")
def import_prompt_file(ctx: UIContext, path: str | None, request: gr.Request) -> tuple:
    """The uploaded prompt file imported (duplicates skipped); (summary, latest prompts)."""
    if not path:
        raise InputError("choose a prompt file first", field="prompt file")
    with ctx.connection() as db:
        try:
            result = prompts.import_prompts(db, path, ctx.project, source=Path(path).name)
        except InputError as error:
            raise without_upload_path(error, path) from None
        gr.Info(import_message(result))
        return data_summary(db, ctx.project), prompt_table(db, ctx.project)


@keep_on_error(2)
@requires("admin")
def import_shipped(ctx: UIContext, request: gr.Request) -> tuple:
    """The shipped movie-review prompts imported; (summary, latest prompts)."""
    with ctx.connection() as db:
        result = prompts.import_shipped_prompts(db, ctx.project)
        gr.Info(f"Imported {result.added} prompts ({result.duplicates} already there).")
        return data_summary(db, ctx.project), prompt_table(db, ctx.project)


@keep_on_error(2)
@requires("admin")
def apply_heldout_share(ctx: UIContext, share: float | None, request: gr.Request) -> tuple:
    """The project's prompts re-split at `share` (refused once labels exist); (summary, latest prompts)."""
    if share is None:
        raise InputError("choose a share", field="held-out share")
    with ctx.connection() as db:
        counts = prompts.change_heldout_share(db, ctx.project, float(share))
        gr.Info(f"Held-out share {float(share):.0%}: {counts['train']} prompts to train on, {counts['test']} held out "
                f"({prompts.heldout_status(db, ctx.project)}).")
        return data_summary(db, ctx.project), prompt_table(db, ctx.project)


def _picked_id(prompt_id) -> int:
    if prompt_id is None:
        raise InputError("click a prompt in the table (or type its number) first", field="prompt number")
    return int(prompt_id)


@keep_on_error(2)
@requires("admin")
def save_prompt_text(ctx: UIContext, prompt_id, text, request: gr.Request) -> tuple:
    """The picked prompt's text replaced (refused once it has answers); (summary, latest prompts)."""
    with ctx.connection() as db:
        row = prompts.edit_prompt(db, ctx.project, _picked_id(prompt_id), text or "")
        gr.Info(f"Prompt {row['id']} saved.")
        return data_summary(db, ctx.project), prompt_table(db, ctx.project)


@keep_on_error(2)
@requires("admin")
def retire_prompt(ctx: UIContext, prompt_id, request: gr.Request) -> tuple:
    """The picked prompt out of the queues, training and evaluation, its labels kept; (summary, latest prompts)."""
    with ctx.connection() as db:
        picked = _picked_id(prompt_id)
        done = prompts.retire_prompts(db, ctx.project, [picked])
        gr.Info(f"Prompt {picked} retired: its answers and labels are kept." if done
                else f"Prompt {picked} was already retired.")
        return data_summary(db, ctx.project), prompt_table(db, ctx.project)


@keep_on_error(2)
@requires("admin")
def restore_prompt(ctx: UIContext, prompt_id, request: gr.Request) -> tuple:
    """A retired prompt back in the split it had; (summary, latest prompts)."""
    with ctx.connection() as db:
        picked = _picked_id(prompt_id)
        done = prompts.restore_prompts(db, ctx.project, [picked])
        gr.Info(f"Prompt {picked} restored." if done else f"Prompt {picked} is not retired.")
        return data_summary(db, ctx.project), prompt_table(db, ctx.project)


@keep_on_error(2)
@requires("admin")
def pick_prompt(ctx: UIContext, evt: gr.SelectData, request: gr.Request) -> tuple:
    """A click on a row of the table: its prompt number and full text in the editor."""
    row = evt.row_value if evt is not None else None
    if not row:
        return gr.skip(), gr.skip()
    with ctx.connection() as db:
        picked = prompts.prompt_row(db, ctx.project, int(row[0]))
    return picked["id"], picked["text"]


def heldout_share_value(db, project: str) -> float:
    return get_project(db, project).heldout_share


def wire(ctx: UIContext, part: PromptsPart, summary: gr.Markdown):
    """The part's events; returns the prompt import's, which the Generate part follows with the answer length's
    fit (generate.wire_after_import)."""
    part.apply_share.click(bind(apply_heldout_share, ctx), [part.heldout_share], [summary, part.table],
                           api_name="data_apply_heldout_share")
    imported = part.import_button.click(bind(import_prompt_file, ctx), [part.file], [summary, part.table],
                                        api_name="data_import_prompts")
    part.shipped_button.click(bind(import_shipped, ctx), None, [summary, part.table], api_name="data_import_shipped")
    part.table.select(bind(pick_prompt, ctx), None, [part.prompt_id, part.prompt_text], api_name="data_pick_prompt")
    part.save_text.click(bind(save_prompt_text, ctx), [part.prompt_id, part.prompt_text], [summary, part.table],
                         api_name="data_save_prompt")
    part.retire.click(bind(retire_prompt, ctx), [part.prompt_id], [summary, part.table], api_name="data_retire_prompt")
    part.restore.click(bind(restore_prompt, ctx), [part.prompt_id], [summary, part.table],
                       api_name="data_restore_prompt")
    return imported
