"""What a run has recorded, as the Train tab, `runs show` and `train --wait` read it: its metrics (a pandas
DataFrame for plots), the PPO generations it sampled (`run_samples`), and the tail of its log.

`metrics_sink.MetricsSink` writes the `metrics` and `run_samples` rows; this module only reads them.
"""
from __future__ import annotations

import os
import re
from typing import Any

import pandas as pd

from labeler.services.execution.runs import Run

_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # cursor moves and colours that progress bars write


def metrics_frame(db, run_id: int, names: list[str] | None = None) -> pd.DataFrame:
    """A pandas DataFrame (step, name, value) of the run's metrics, ordered by step, for gr.LinePlot."""
    query = "SELECT step, name, value FROM metrics WHERE run_id = ?"
    params: list[Any] = [int(run_id)]
    if names:
        query += f" AND name IN ({', '.join('?' * len(names))})"
        params += list(names)
    rows = db.execute(query + " ORDER BY name, step", params).fetchall()
    return pd.DataFrame([tuple(row) for row in rows], columns=["step", "name", "value"])


def metric_names(db, run_id: int) -> list[str]:
    """The names of the metrics the run has logged, sorted."""
    return [row[0] for row in db.execute("SELECT DISTINCT name FROM metrics WHERE run_id = ? ORDER BY name", [run_id])]


def metric_history(db, run_id: int, name: str) -> list[tuple[int, float, str]]:
    """(step, value, created_at) of one metric of the run, by step."""
    return [(row[0], float(row[1]), row[2]) for row in db.execute(
        "SELECT step, value, created_at FROM metrics WHERE run_id = ? AND name = ? ORDER BY step",
        [int(run_id), name]).fetchall()]


def metrics_at(db, run_id: int, step: int) -> dict[str, float]:
    """The last value of every metric of the run logged at or before `step`."""
    rows = db.execute(
        "SELECT m.name, m.value FROM metrics m JOIN (SELECT name, MAX(step) AS step FROM metrics WHERE run_id = ?"
        " AND step <= ? GROUP BY name) last ON last.name = m.name AND last.step = m.step WHERE m.run_id = ?",
        [run_id, step, run_id]).fetchall()
    return {row[0]: row[1] for row in rows}


def samples(db, run_id: int, limit: int = 20) -> list[dict]:
    """The run's newest sampled generations (step, query, response, reward), newest step first."""
    rows = db.execute(
        "SELECT step, query, response, reward FROM run_samples WHERE run_id = ? ORDER BY step DESC, id LIMIT ?",
        [int(run_id), int(limit)],
    ).fetchall()
    return [dict(row) for row in rows]


def log_tail(run: Run, lines: int = 40) -> str:
    """The last `lines` lines of the run's log as a terminal last showed them ("" when there is no log)."""
    try:
        with open(run.log_path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64_000))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    # Progress bars rewrite their line with \r and move the cursor with ANSI escapes: keep the last state of
    # each line, without the escapes, and drop a line repeated right after itself.
    cleaned = []
    for line in _ANSI_ESCAPE.sub("", text).rstrip("\n").split("\n"):  # not splitlines(): it splits at \r too
        line = line.rstrip("\r").rsplit("\r", 1)[-1]
        if not cleaned or line != cleaned[-1]:
            cleaned.append(line)
    return "\n".join(cleaned[-lines:])
