"""The Runs page's judges panel for an online DPO run: how many pairs people judged, how many the model, and how often
the model agreed with people on the pairs both judged (labeler/services/execution/run_judgements.py), read-only.

The monitor shows it as one more output of read_run: a gr.Markdown whose value is judge_markdown(db, run_id); the
value is "" (an empty Markdown) for a run that recorded no judgements (every other stage, or before the first batch).
"""
from __future__ import annotations

import html

from labeler.services.execution import run_judgements


def judge_markdown(db, run_id: int | None) -> str:
    """The panel's Markdown for run `run_id`, or "" when there is nothing to show."""
    summary = run_judgements.judge_summary(db, run_id) if run_id else None
    if summary is None:
        return ""
    lines = run_judgements.summary_lines(summary)
    return "**Who judged the pairs**  \n" + "  \n".join(html.escape(line) for line in lines)


__all__ = ["judge_markdown"]
