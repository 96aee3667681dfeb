"""The Admin tab's "Models": a policy registered from a folder on the server, a LoRA adapter merged into a full
model."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from labeler.services.training import hub
from labeler.services.serving import models
from labeler.ui.binding import bind
from labeler.ui.context import UIContext
from labeler.ui.roles import requires
from labeler.ui.soft_errors import keep_on_error
from labeler.ui.tabs.admin.snapshot import MODEL_TITLES, SHOWN, models_outputs, snapshot


@dataclass(frozen=True)
class ModelsPart:
    table: gr.Dataframe
    name: gr.Textbox
    path: gr.Textbox
    base: gr.Dropdown  # the KL reference (optional)
    register: gr.Button
    merge_name: gr.Textbox
    merge: gr.Button


def build_models() -> ModelsPart:
    with gr.Accordion("Models", open=False):
        gr.Markdown(
            "Chat models for **Generate**, **Chat** and the **Arena** (which needs two). Finished SFT, DPO and PPO "
            "runs register theirs; register another policy here from a folder on the server holding safetensors "
            "weights (hub ids and reward models: `rlhf-studio models add`)."
        )
        models_table = gr.Dataframe(headers=MODEL_TITLES, interactive=False, label="Registered models",
                                    elem_id="admin-models")
        with gr.Row():
            model_name = gr.Textbox(label="Name", elem_id="admin-model-name")
            model_path = gr.Textbox(label="Folder on the server", elem_id="admin-model-path")
            model_base = gr.Dropdown(choices=[], label="Base model (optional: the KL reference)", elem_id="admin-model-base")
            register_model = gr.Button("Register policy", elem_id="admin-register-model")
        with gr.Row():  # `rlhf-studio models merge`: an SFT/DPO run with lora=true registers an adapter
            merge_name = gr.Textbox(label="LoRA adapter to merge into a full model (its registry name)",
                                    elem_id="admin-merge-name")
            merge_adapter = gr.Button("Merge adapter", elem_id="admin-merge-adapter")
    return ModelsPart(models_table, model_name, model_path, model_base, register_model, merge_name, merge_adapter)


@keep_on_error(len(SHOWN) + 2)
@requires("admin")
def register_model(ctx: UIContext, name, folder, base, request: gr.Request) -> tuple:
    with ctx.connection() as db:
        row = models.register_policy_from_web(db, (name or "").strip(), folder, base or None)
        hub.write_registered_model_card(db, row["name"])  # README.md in the new folder
        gr.Info(f"Registered policy '{row['name']}': it is in Chat, Generate and the Arena now.")
        return (*snapshot(db, ctx.project), "", "")


@keep_on_error(len(SHOWN) + 1)
@requires("admin")
def merge_adapter(ctx: UIContext, name, request: gr.Request) -> tuple:
    with ctx.connection() as db:
        row = models.merge_adapter_model(db, (name or "").strip())
        hub.write_registered_model_card(db, row["name"])  # README.md in the new folder
        gr.Info(f"Merged into policy '{row['name']}' ({row['path']}): plain transformers loads it.")
        return (*snapshot(db, ctx.project), "")


@keep_on_error(2)
@requires("admin")
def models_view(ctx: UIContext, request: gr.Request) -> tuple:
    """The registry table and the base-model choices read again (the Admin tab selected): models registered
    since the page loaded (a finished run, the CLI) show up; nothing else on the tab, an edit there, is touched."""
    with ctx.connection() as db:
        return models_outputs(db)


def wire(ctx: UIContext, part: ModelsPart, shown: list) -> None:
    part.register.click(bind(register_model, ctx), [part.name, part.path, part.base],
                        [*shown, part.name, part.path], api_name="admin_register_model")
    part.merge.click(bind(merge_adapter, ctx), [part.merge_name], [*shown, part.merge_name],
                     api_name="admin_merge_adapter")
