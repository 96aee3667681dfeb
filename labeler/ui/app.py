"""build_app(settings): the Gradio app, assembled from one module per tab. No module-level state."""
from __future__ import annotations

import importlib

import gradio as gr

from labeler.ui.context import ServeSettings, UIContext

# (module, title). A tab module exposes build(ctx) and is called inside its gr.Tab.
TAB_MODULES = [
    "labeler.ui.tabs.rate",
    "labeler.ui.tabs.rank",
    "labeler.ui.tabs.arena",
    "labeler.ui.tabs.chat",
    "labeler.ui.tabs.data",
    "labeler.ui.tabs.train",
    "labeler.ui.tabs.admin",
]


def build_app(settings: ServeSettings) -> gr.Blocks:
    ctx = UIContext(settings)
    with gr.Blocks(title="RLHF Studio") as app:
        gr.Markdown("# RLHF Studio")
        with gr.Tabs():
            for module_name in TAB_MODULES:
                try:
                    module = importlib.import_module(module_name)
                except ModuleNotFoundError as error:
                    if error.name == module_name:  # tab not written yet
                        continue
                    raise
                with gr.Tab(module.TITLE, id=module_name.rsplit(".", 1)[-1]):
                    module.build(ctx)
    return app
