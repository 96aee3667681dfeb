"""The words a person reads for a field, on the form and in a refusal's toast; and data text shown as typed
inside the app's own Markdown (`literal`).

The services name a field as the code and the CLI do (`InputError(..., field="heldout_share")`): the CLI prints
that name, which its flags and `--set` take. A toast said "field 'measure'" and "field 'order'" beside forms that
read "Measure" and "Corrected value"; `toast_text` names the field as its form labels it.
"""
from __future__ import annotations

import re
from typing import Mapping

from labeler.field_words import FIELD_LABELS, FORM_LABELS, TRAIN_LABELS, field_label  # noqa: F401 - the UI's names
from labeler.errors import InputError

# "max_new_tokens=5000: must be ..." (rlhf.configs' _check, a dataclass's __post_init__): the value and why.
NAMED_VALUE = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)=(?P<value>.*?): (?P<why>.*)$", re.S)


def toast_text(error: InputError, labels: Mapping[str, str] | None = None) -> str:
    """An InputError as a toast says it: the file and line as they are, the field in the form's words, and a
    message that names the field again as `name=value` said as the value and why."""
    if not isinstance(error, InputError):
        return str(error)
    where = [str(error.file)] if error.file is not None else []
    if error.line is not None:
        where.append(f"line {error.line}")
    message = error.message
    if error.field is not None:
        named = NAMED_VALUE.match(message)
        if named and named.group("name") == error.field:
            message = f"{named.group('why')} (got {named.group('value')})"
        where.append(field_label(error.field, labels))
    return ": ".join([", ".join(where), message]) if where else message


# Markdown's ASCII punctuation: each escaped with a backslash shows as itself (CommonMark, "Backslash escapes").
MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()#+\-.!|~<>])")


def literal(text: object, limit: int | None = None) -> str:
    """Text from the data (a prompt, an answer, a comment) shown as typed inside our own Markdown: on one line,
    cut to `limit` characters before escaping (a cut never splits an escape), every Markdown character escaped. An
    answer's own **bold** cut at 400 characters left a lone "**" that paired with the next bold of the page, and
    its newlines broke the list it sat in."""
    flat = " ".join(str(text).split())
    if limit is not None and len(flat) > limit:
        flat = flat[:limit - 1] + "…"
    return MARKDOWN_SPECIALS.sub(r"\\\1", flat)
