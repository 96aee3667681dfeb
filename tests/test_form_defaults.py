"""labeler/forms.py calls a field's default factory only when the default's value is read: help and settings
listings show the words a factory gives (`default_text`), so printing them runs nothing the factory runs (bf16's
asks the hardware, torch included). The plain kinds: tests/services/test_train_configs.py."""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from labeler import forms
from labeler.services.settings.job_settings import JobConfig
from rlhf import hardware


class CountingFactory:
    """A machine-dependent default: says what it computes in words, and counts how often it was asked."""

    default_text = "auto: whatever this machine runs fast"

    def __init__(self, value: bool):
        self.value, self.calls = value, 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.value


def settings_with(factory: CountingFactory):
    @dataclass(frozen=True)
    class Settings:
        fast: bool = field(default_factory=factory, metadata={"help": "go fast"})
        steps: int = field(default=3, metadata={"help": "how many"})
        tags: list = field(default_factory=list, metadata={"help": "labels"})

    return Settings


def test_a_described_default_is_shown_in_words_and_computed_only_when_read():
    factory = CountingFactory(True)
    specs = {spec.name: spec for spec in forms.field_specs(settings_with(factory))}
    assert [specs[name].shown_default for name in ("fast", "steps", "tags")] == [
        "auto: whatever this machine runs fast", "3", "[]"]
    parser = argparse.ArgumentParser()
    forms.add_flags(parser, settings_with(factory))
    assert "(default: auto: whatever this machine runs fast)" in parser.format_help()
    assert factory.calls == 0
    # Reading the value (a form's checkbox, changed()) asks the factory, once per spec.
    assert (specs["fast"].default, specs["fast"].default, specs["steps"].default) == (True, True, 3)
    assert factory.calls == 1


def test_changed_compares_with_the_computed_default():
    factory = CountingFactory(False)
    cls = settings_with(factory)
    assert forms.changed(forms.build_config(cls, {"fast": "true", "steps": "3"})) == {"fast": True}
    assert forms.changed(forms.build_config(cls, {"fast": "false"})) == {}


def test_two_specs_of_one_field_are_equal():
    cls = settings_with(CountingFactory(True))
    assert forms.field_specs(cls) == forms.field_specs(cls)


def test_bf16_default_is_described_rather_than_asked():
    bf16 = next(spec for spec in forms.field_specs(JobConfig) if spec.name == "bf16")
    assert bf16.shown_default == hardware.bf16_is_fast.default_text
    # The value a built config holds (and a run stores) is still the hardware's answer.
    assert bf16.default is hardware.bf16_is_fast() is JobConfig().bf16
