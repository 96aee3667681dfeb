"""One mapping from a config dataclass's fields to CLI `--set key=value` flags and to Gradio form widgets.

The Train tab's form and `rlhf-studio train --set` both come from `field_specs(cls)` and read back through
`build_config`, which parses every value the same way and lets the dataclass's own `__post_init__` validate
it. Adding a hyperparameter is adding one field to the dataclass. Gradio is imported only inside `widget()`,
so the CLI and the services never import it.
"""
from __future__ import annotations

import argparse
import dataclasses
import enum
import functools
import json
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Literal

from labeler.errors import InputError

SCALARS = (bool, int, float, str)


@dataclass(frozen=True)
class FieldSpec:
    """What a form or a flag needs to know about one config field."""

    name: str
    kind: str  # "bool" | "int" | "float" | "str" | "choice" | "json"
    # Makes the field's default (its dataclass default_factory, or a function returning its default), called
    # only when `default` is read: bf16's factory asks the hardware, torch included, which help and settings
    # listings must not import (they print `shown_default`).
    make_default: Callable[[], Any]
    help: str
    choices: tuple = ()
    optional: bool = False  # None is an accepted value
    # The form control when the kind's own is not the best one, from the field's metadata["widget"]:
    # "radio": a choice shown as buttons, every option in view (a few options that change what else matters);
    # "dropdown": text picked from options the app fills when a page loads (registry names), or typed.
    widget: str = ""
    # Words for a default that a factory works out when a config is built (its `default_text` attribute, e.g.
    # rlhf.hardware.bf16_is_fast's); blank: the default's value says it.
    default_text: str = ""

    @functools.cached_property
    def default(self) -> Any:
        value = self.make_default()
        return value.value if isinstance(value, enum.Enum) else value

    @property
    def shown_default(self) -> str:
        """The default as help and settings listings print it, without calling a described factory."""
        return self.default_text or repr(self.default)


# metadata["widget"] -> the field kind it draws.
WIDGET_KINDS = {"radio": "choice", "dropdown": "str"}


def _kind_of(annotation) -> tuple[str, tuple, bool]:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        return "choice", tuple(args), False
    if origin in (typing.Union, types.UnionType):
        optional = type(None) in args
        rest = [a for a in args if a is not type(None)]
        # `SchedulerType | str` (TrainingArguments): an enum widened to str is a choice of the enum's values.
        enums = [a for a in rest if isinstance(a, type) and issubclass(a, enum.Enum)]
        if enums:
            return "choice", tuple(member.value for member in enums[0]), optional
        scalars = [a for a in rest if a in SCALARS]
        if len(rest) == 1:
            kind, choices, _ = _kind_of(rest[0])
            return kind, choices, optional
        if scalars and all(a in SCALARS for a in rest):
            return "str" if str in scalars else scalars[0].__name__, (), optional
        return "json", (), optional
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "choice", tuple(member.value for member in annotation), False
    if annotation in SCALARS:
        return annotation.__name__, (), False
    return "json", (), False


def _default_maker(f: dataclasses.Field) -> tuple[Callable[[], Any], str]:
    """(what makes the field's default, the words that describe it where its factory has them)."""
    if f.default is not dataclasses.MISSING:
        return _Constant(f.default), ""
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory, getattr(f.default_factory, "default_text", "")
    return _Constant(None), ""


@dataclass(frozen=True)
class _Constant:
    """A plain default as a maker (equal by value, so two specs of one field compare equal)."""

    value: Any

    def __call__(self) -> Any:
        return self.value


def field_specs(cls, only: list[str] | tuple[str, ...] | None = None) -> list[FieldSpec]:
    """Specs of the dataclass's init fields (in declaration order, or in the order of `only`)."""
    hints = typing.get_type_hints(cls)
    by_name = {}
    for f in dataclasses.fields(cls):
        if not f.init or f.name.startswith("_"):
            continue
        kind, choices, optional = _kind_of(hints.get(f.name, str))
        control = f.metadata.get("widget", "")
        if control and WIDGET_KINDS.get(control) != kind:
            raise TypeError(f"{cls.__name__}.{f.name}: metadata widget={control!r} does not fit a field of kind {kind} "
                            f"(radio: a Literal or Enum; dropdown: a str)")
        make_default, default_text = _default_maker(f)
        by_name[f.name] = FieldSpec(f.name, kind, make_default, f.metadata.get("help", ""), choices, optional, control,
                                    default_text)
    if only is None:
        return list(by_name.values())
    missing = [name for name in only if name not in by_name]
    if missing:
        raise KeyError(f"{cls.__name__} has no field(s) {missing}")
    return [by_name[name] for name in only]


def parse_value(spec: FieldSpec, value: Any, source: str | None = None) -> Any:
    """Text from a flag (or a value from a widget or a JSON file) as the field's type."""
    where = {"file": source, "field": spec.name}
    # "none" is a value of some text fields (report_to="none"), so only "null" means None for those.
    nulls = ("null",) if spec.kind in ("str", "json") else ("none", "null")
    if value is None or (isinstance(value, str) and value.strip().lower() in nulls and spec.optional):
        if spec.optional or spec.kind == "json":
            return None
        raise InputError(f"a value is required ({spec.help or spec.kind})", **where)
    try:
        if spec.kind == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"expected true or false, got {value!r}")
        if spec.kind == "int":
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(f"expected a whole number, got {value!r}")
            if isinstance(value, bool):
                raise ValueError(f"expected a whole number, got {value!r}")
            return int(value) if not isinstance(value, str) else int(value.strip())
        if spec.kind == "float":
            if isinstance(value, bool):
                raise ValueError(f"expected a number, got {value!r}")
            return float(value)
        if spec.kind == "choice":
            for choice in spec.choices:
                if str(choice) == str(value):
                    return choice
            raise ValueError(f"expected one of {', '.join(map(str, spec.choices))}; got {value!r}")
        if spec.kind == "json":
            if not isinstance(value, str):
                return value
            try:
                return json.loads(value)
            except json.JSONDecodeError:
                return value  # a plain word for a `str | list[str]` field
        return str(value)
    except (ValueError, json.JSONDecodeError) as error:
        raise InputError(str(error), **where) from None
    except TypeError:  # a list or a mapping from a JSON/YAML file where a number goes: one line
        raise InputError(f"expected {spec.kind}, got {type(value).__name__}", **where) from None


def add_flags(parser, cls) -> None:
    """One `--field-name VALUE` flag per field of `cls` (bools: `--name` / `--no-name`), defaults and help from
    the field; `flag_values` reads them back. For commands whose few settings read better as flags than as
    `--set key=value`."""
    for spec in field_specs(cls):
        flag = "--" + spec.name.replace("_", "-")
        help_text = f"{spec.help} (default: {spec.default_text or spec.default})"
        if spec.kind == "bool":
            parser.add_argument(flag, dest=spec.name, action=argparse.BooleanOptionalAction, default=None,
                                help=help_text)
        else:
            parser.add_argument(flag, dest=spec.name, metavar=spec.kind.upper(), default=None, help=help_text)


def flag_values(cls, args) -> dict[str, Any]:
    """The flags of `add_flags` that were given, by field name (still text: build_config parses them)."""
    return {spec.name: getattr(args, spec.name) for spec in field_specs(cls) if getattr(args, spec.name) is not None}


def parse_sets(pairs: list[str] | None) -> dict[str, str]:
    """`["lr=1e-5", "bf16=true"]` -> {"lr": "1e-5", "bf16": "true"}; the values are parsed later, per field."""
    out: dict[str, str] = {}
    for position, pair in enumerate(pairs or [], start=1):
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--set expects key=value, got {pair!r}", field=f"--set #{position}")
        out[key.strip()] = value
    return out


def build_config(cls, values: dict[str, Any], source: str | None = None, ignore_unknown: bool = False):
    """An instance of `cls` from raw values (flag text, widget values or JSON), through one validation path.

    Unknown keys raise InputError naming them (a typo in --set must not be silently ignored) unless
    `ignore_unknown`. The dataclass's own __post_init__ errors become InputError too.
    """
    specs = {spec.name: spec for spec in field_specs(cls)}
    unknown = sorted(set(values) - set(specs))
    if unknown and not ignore_unknown:
        raise InputError(f"unknown setting(s) for {cls.__name__}: {', '.join(unknown)}", file=source, field=unknown[0])
    kwargs = {name: parse_value(specs[name], value, source) for name, value in values.items() if name in specs}
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as error:
        message = str(error)
        field = next((name for name in kwargs if message.startswith(f"{name}=") or f"`{name}`" in message), None)
        raise InputError(message, file=source, field=field) from None


def to_dict(config, only: list[str] | None = None) -> dict[str, Any]:
    """The init fields' values as JSON-ready data (enums as their values)."""
    out = {}
    for spec in field_specs(type(config), only):
        value = getattr(config, spec.name)
        out[spec.name] = value.value if isinstance(value, enum.Enum) else value
    return json.loads(json.dumps(out, default=str))


def changed(config, only: list[str] | None = None) -> dict[str, Any]:
    """Only the fields that differ from their defaults: what a run's config_json needs to rebuild the config."""
    specs = {spec.name: spec for spec in field_specs(type(config), only)}
    values = to_dict(config, only)
    return {name: value for name, value in values.items() if value != specs[name].default}


# The words a person reads for fields whose names are code (GenerationSettings': Data > Generate's sampling).
READABLE_LABELS = {
    "max_new_tokens": "Answer length (new tokens)", "do_sample": "Sample (off: always the likeliest token)",
    "temperature": "Temperature", "top_k": "Top-k (most likely tokens kept)", "top_p": "Top-p (nucleus mass)",
    "min_length": "Minimum answer length (tokens)", "batch_size": "Prompts per batch", "seed": "Seed",
    "bf16": "bfloat16 on the CPU",
}


def widget(spec: FieldSpec, value: Any = None, label: str | None = None, info: str | None = None, **layout: Any):
    """The Gradio component for one field: a checkbox, a number, a dropdown, a radio or a textbox. Numbers get
    gr.Number (precision 0 for ints), except an optional one left blank (None: automatic), which gets a textbox.
    A "dropdown" field starts with no options: the tab fills them on load (gr.update(choices=...)).
    `label`: the words a person reads (default: the field's name, as the CLI's --set takes it); `info`: the line
    under it (default: the field's help).
    `layout` (min_width, scale, elem_id, ...) is passed on."""
    import gradio as gr

    value = spec.default if value is None else value
    # The whole help: cut at 200 characters it ended mid-word ("Blank: t").
    label, info = label or READABLE_LABELS.get(spec.name, spec.name), (info if info is not None else (spec.help or None))
    if spec.kind == "bool":
        return gr.Checkbox(value=bool(value), label=label, info=info, **layout)
    if spec.kind in ("int", "float") and spec.optional and value is None:
        # A gr.Number cannot be blank in the browser (it sends 0), and blank is this field's "automatic"; the
        # text is parsed as a number by build_config like a CLI --set value.
        return gr.Textbox(value="", placeholder="blank: automatic", label=label, info=info, **layout)
    if spec.kind == "int":
        return gr.Number(value=value, label=label, info=info, precision=0, **layout)
    if spec.kind == "float":
        return gr.Number(value=value, label=label, info=info, **layout)
    if spec.widget == "radio":
        return gr.Radio(choices=[str(c) for c in spec.choices], value=str(value), label=label, info=info, **layout)
    if spec.widget == "dropdown":
        return gr.Dropdown(choices=[], value=value or None, allow_custom_value=True, label=label, info=info, **layout)
    if spec.kind == "choice":
        return gr.Dropdown(choices=[str(c) for c in spec.choices], value=str(value), label=label, info=info, **layout)
    text = json.dumps(value) if spec.kind == "json" else ("" if value is None else str(value))
    return gr.Textbox(value=text, label=label, info=info, **layout)


def from_widgets(specs: list[FieldSpec], values: list[Any]) -> dict[str, Any]:
    """Widget values back to the raw dict that `build_config` parses (blank optional text means None)."""
    out = {}
    for spec, value in zip(specs, values):
        if spec.optional and (value is None or value == ""):
            out[spec.name] = None
        elif spec.kind == "str" and value is None:  # a dropdown with nothing picked: blank text
            out[spec.name] = ""
        else:
            out[spec.name] = value
    return out
