"""The label filters a dataset is drawn with, defined once: export's `ExportOptions` and a training job's data
settings (`job_settings.DataSettings`) declare their filter fields from here, default and help, so exporting and
training read the same filters. Standard library only: settings import it, not the export and its writers.
"""
from __future__ import annotations

from dataclasses import MISSING, field

# name -> (default, help)
FILTERS = {
    "annotators": (None, "only these usernames' labels (None: everyone, imported labels included)"),
    "since": (None, "only labels created at or after this ISO date or datetime (UTC)"),
    "until": (None, "only labels created up to this ISO datetime, or to the end of this ISO date (UTC)"),
    "min_annotators": (1, "judgements needed: rankings containing the pair, or ratings of the response"),
    "min_agreement": (None, "0..1; pairs: share of annotators agreeing, ratings: 1 - std / scale range"),
    "include_rating_pairs": (False, "preferences: also pairs of ratings with different means, with a margin column"),
}


def filter_field(name: str, default=MISSING):
    """The dataclass field of filter `name`: its default (or `default`, a config's own) and its help."""
    standard, text = FILTERS[name]
    return field(default=standard if default is MISSING else default, metadata={"help": text})
