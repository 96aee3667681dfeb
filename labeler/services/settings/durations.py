"""Durations as people type them in settings ("20m", "1h30m", "90s"; a bare number is minutes) and as the app
says them ("20 min 34 s"). Standard library only: job settings validate time_budget with it and import nothing
that does the work.
"""
from __future__ import annotations

import re

_NUMBER = r"(\d+(?:\.\d+)?)"
_DURATION = re.compile(rf"(?:{_NUMBER}h)?(?:{_NUMBER}m(?:in)?)?(?:{_NUMBER}s)?")  # hours, minutes, seconds in order


def parse_duration(text: str, name: str = "time_budget") -> float:
    """'20m', '1h30m', '90s', '1.5h' (or a bare number of minutes, '20') -> seconds. ValueError naming `name`."""
    cleaned = str(text).strip().lower().replace(" ", "")
    match = _DURATION.fullmatch(cleaned)
    if re.fullmatch(_NUMBER, cleaned):
        seconds = float(cleaned) * 60.0
    elif cleaned and match:
        hours, minutes, secs = (float(g) if g else 0.0 for g in match.groups())
        seconds = hours * 3600 + minutes * 60 + secs
    else:
        raise ValueError(f"{name}={text!r}: expected a duration such as 20m, 1h30m or 90s (a bare number is minutes)")
    if seconds <= 0:
        raise ValueError(f"{name}={text!r}: must be more than zero")
    return seconds


def budget_seconds(text: str | None) -> float | None:
    """A time_budget setting in seconds; None when it is not set (None or blank)."""
    if text is None or not str(text).strip():
        return None
    return parse_duration(text)


def format_duration(seconds: float) -> str:
    """1234 -> '20 min 34 s'; 75 -> '1 min 15 s'; 42 -> '42 s'; 3700 -> '1 h 1 min'."""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds} s"
