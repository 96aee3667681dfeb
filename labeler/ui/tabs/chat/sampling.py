"""The chat's sampling settings: one widget per GenerationSettings field the user may change (initial values
from the chat's defaults, help from the field), and the widgets' values read back through the same validation
as every other config."""
from __future__ import annotations

import gradio as gr

from labeler import forms
from labeler.services.serving.chat import CHAT_SETTINGS
from rlhf.configs import GenerationSettings

# The widgets' order, which is also the order of their values in every handler's inputs.
SETTING_NAMES = ["max_new_tokens", "do_sample", "temperature", "top_p", "top_k", "seed"]


def settings_widgets() -> list:
    """Sliders for the chat's sampling settings, initial values and help from GenerationSettings."""
    help_of = {name: f.metadata.get("help") for name, f in GenerationSettings.__dataclass_fields__.items()}
    return [
        gr.Slider(1, 1024, value=CHAT_SETTINGS.max_new_tokens, step=1, label="Answer length (new tokens)", info=help_of["max_new_tokens"], elem_id="chat-max-new-tokens"),
        gr.Checkbox(value=CHAT_SETTINGS.do_sample, label="Sample (off: always the likeliest token)", info=help_of["do_sample"], elem_id="chat-do-sample"),
        gr.Slider(0.05, 2.0, value=CHAT_SETTINGS.temperature, step=0.05, label="Temperature", info=help_of["temperature"], elem_id="chat-temperature"),
        gr.Slider(0.05, 1.0, value=CHAT_SETTINGS.top_p, step=0.05, label="Top-p (nucleus mass)", info=help_of["top_p"], elem_id="chat-top-p"),
        gr.Slider(0, 200, value=CHAT_SETTINGS.top_k, step=1, label="Top-k (most likely tokens kept)", info=help_of["top_k"], elem_id="chat-top-k"),
        gr.Number(value=CHAT_SETTINGS.seed, precision=0, label="Seed", info=help_of["seed"], elem_id="chat-seed"),
    ]


def settings_from(values: tuple) -> GenerationSettings:
    """The widgets' values (SETTING_NAMES order) as GenerationSettings for one answer at a time; InputError
    naming the field for a bad value."""
    raw = {**forms.to_dict(CHAT_SETTINGS), **dict(zip(SETTING_NAMES, values)), "batch_size": 1}
    return forms.build_config(GenerationSettings, raw)
