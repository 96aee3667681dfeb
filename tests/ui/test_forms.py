"""labeler/forms.py's widget kinds chosen by a field's metadata["widget"]: a choice shown as a radio, and text
picked from a dropdown whose options the app fills on load. The plain kinds: tests/services/test_train_configs.py."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import gradio as gr
import pytest

from labeler import forms


@dataclass(frozen=True)
class Picks:
    source: Literal["rm", "human", "function"] = field(default="rm", metadata={"help": "where", "widget": "radio"})
    model: str = field(default="", metadata={"help": "which", "widget": "dropdown"})
    policy: Literal["skip", "wait"] = field(default="skip", metadata={"help": "then"})


def _specs():
    return {spec.name: spec for spec in forms.field_specs(Picks)}


def test_radio_metadata_gives_a_radio_with_the_literal_choices():
    specs = _specs()
    assert specs["source"].widget == "radio" and specs["policy"].widget == ""
    radio = forms.widget(specs["source"], elem_id="picks-source")
    assert isinstance(radio, gr.Radio)
    assert [value for _, value in radio.choices] == ["rm", "human", "function"]
    assert radio.value == "rm" and radio.label == "source" and radio.info == "where" and radio.elem_id == "picks-source"
    # Without the metadata a Literal stays a dropdown.
    assert type(forms.widget(specs["policy"])) is gr.Dropdown


def test_dropdown_metadata_gives_an_empty_dropdown_that_takes_typed_values():
    picker = forms.widget(_specs()["model"])
    assert isinstance(picker, gr.Dropdown)
    assert picker.choices == [] and picker.value is None and picker.allow_custom_value
    assert forms.widget(_specs()["model"], value="rm-run3").value == "rm-run3"


def test_nothing_picked_reads_back_as_the_blank_default():
    specs = _specs()
    values = forms.from_widgets([specs["model"], specs["source"]], [None, "function"])
    assert values == {"model": "", "source": "function"}
    assert forms.build_config(Picks, values) == Picks(source="function")


def test_a_widget_metadata_the_forms_cannot_draw_is_refused_naming_the_field():
    @dataclass
    class Bad:
        steps: int = field(default=1, metadata={"widget": "radio"})  # radio needs choices

    @dataclass
    class Typo:
        name: str = field(default="", metadata={"widget": "combo"})

    with pytest.raises(TypeError, match=r"Bad\.steps: metadata widget='radio' does not fit a field of kind int"):
        forms.field_specs(Bad)
    with pytest.raises(TypeError, match=r"Typo\.name: metadata widget='combo' does not fit a field of kind str"):
        forms.field_specs(Typo)
