"""Widgets read in words (issue 49, item 7): Data > Generate's sampling settings, the chat's and the arena's, the
leaderboard's columns, a whole help text (never cut mid-word), registry times without the ISO 'T'."""
from __future__ import annotations

import re

from labeler import forms
from labeler.ui.tabs.admin.snapshot import readable_time
from labeler.ui.tabs.arena import LEADERBOARD_TITLES, leaderboard_note
from rlhf.configs import GenerationSettings

RAW = re.compile(r"\b(max_new_tokens|top_k|top_p|min_length|do_sample|bt_score|ci_low|ci_high)\b")


def test_sampling_widgets_are_labelled_in_words_with_their_whole_help():
    import gradio as gr

    with gr.Blocks():
        widgets = [forms.widget(spec) for spec in forms.field_specs(GenerationSettings)]
    for widget, spec in zip(widgets, forms.field_specs(GenerationSettings)):
        assert not RAW.search(widget.label), widget.label
        assert widget.info == (spec.help or None)  # whole, not cut at 200 characters


def test_a_long_help_is_not_cut():
    import gradio as gr

    spec = forms.field_specs(GenerationSettings)[0]
    long = forms.FieldSpec(**{**spec.__dict__, "help": "x " * 150 + "Blank: the end."})
    with gr.Blocks():
        assert forms.widget(long).info.endswith("Blank: the end.")


def test_the_leaderboard_and_the_registry_read_in_words():
    assert not RAW.search(" ".join(LEADERBOARD_TITLES)) and not RAW.search(leaderboard_note())
    assert readable_time("2026-12-06T10:33:03.123Z") == "2026-12-06 10:33 UTC"
    assert readable_time(None) == ""


def test_a_negative_kl_is_labelled_with_why():
    import pandas as pd

    from labeler.ui.tabs.train.run_views import NEGATIVE_KL_NOTE, metrics_html

    dipped = pd.DataFrame({"name": ["objective/kl"] * 2, "step": [1, 2], "value": [0.2, -0.05]})
    assert "below 0: the batch estimate" in metrics_html(dipped, ["objective/kl"])
    positive = pd.DataFrame({"name": ["objective/kl"] * 2, "step": [1, 2], "value": [0.2, 0.05]})
    assert NEGATIVE_KL_NOTE.strip(" ()")[:10] not in metrics_html(positive, ["objective/kl"])


def test_train_help_texts_name_no_module_variable_or_expression():
    import dataclasses

    from labeler.services.settings.job_settings import JobConfig
    from rlhf import configs

    raw = re.compile(r"\bRLHF_STUDIO_[A-Z_]+\b|None: min\(|\b(train_configs|training_stages)\.[A-Za-z_]+|"
                     r"\bonline_rm\b|split '(test|train)'")
    classes = [JobConfig, *(value for value in vars(configs).values()
                            if isinstance(value, type) and dataclasses.is_dataclass(value))]
    found = [f"{cls.__name__}.{spec.name}: {match.group(0)}" for cls in classes for spec in forms.field_specs(cls)
             for match in raw.finditer(spec.help or "")]
    assert found == []
