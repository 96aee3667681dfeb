"""The Records tab's filter boxes read as a RecordFilters: "(any)" and blank mean no filter; the score and id
boxes are text (a number box cannot be blank in the browser), so their text is checked here."""
from __future__ import annotations

from labeler.errors import InputError
from labeler.services.labels.records import RecordFilters

ANY = "(any)"


def optional(value):
    return None if value in (None, "", ANY) else value


def score_bound(text, field: str) -> float | None:
    """A score filter box's text: blank is no filter, anything else must be a number."""
    if text is None or str(text).strip() == "":
        return None
    try:
        return float(str(text).strip())
    except ValueError:
        raise InputError(f"must be a number or blank, got {text!r}", field=field) from None


def whole_number(text, field: str) -> int | None:
    """An id box's text (or a number from an API client): blank is None, anything else a whole number."""
    if text is None or str(text).strip() == "":
        return None
    try:
        value = float(str(text).strip())
    except ValueError:
        value = float("nan")
    if not value.is_integer():
        raise InputError(f"must be a whole number, got {text!r}", field=field)
    return int(value)


def filters_from(project, search, annotator, state, low, high, split, source) -> RecordFilters:
    return RecordFilters(
        project=project, search=search or "", annotator=optional(annotator), label_state=state or "any",
        min_score=optional(low), max_score=optional(high), split=optional(split), source=optional(source),
    )
