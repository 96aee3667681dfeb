"""A full disk is one log line per refused label (issue 36, item 10): Gradio printed the chained traceback
(sqlite3.OperationalError -> DiskFull -> gr.Error) for each, 660 lines for 220 refused labels."""
from __future__ import annotations

import logging
import sqlite3

import gradio as gr
import pytest

from labeler.ui.soft_errors import ui_errors
from storage.db import DiskFull

pytestmark = pytest.mark.reliability


@ui_errors
def rate_submit(kind: str):
    if kind == "sqlite":  # what a write hits before storage turns it into DiskFull
        raise sqlite3.OperationalError("database or disk is full")
    try:
        raise sqlite3.OperationalError("database or disk is full")
    except sqlite3.OperationalError as error:
        raise DiskFull() from error


@pytest.mark.parametrize("kind", ["storage", "sqlite"])
def test_a_label_refused_by_a_full_disk_is_one_log_line_and_no_traceback(kind, caplog):
    caplog.set_level(logging.DEBUG)
    with pytest.raises(gr.Error, match="the disk is full; nothing was saved") as refused:
        rate_submit(kind)
    # Gradio's queue prints a traceback for a gr.Error unless print_exception is False (gradio/queueing.py).
    assert refused.value.print_exception is False and refused.value.title == "Disk full"
    lines = [record.getMessage() for record in caplog.records]
    assert lines == ["disk full: rate_submit refused: the disk is full; nothing was saved (free some space on the "
                     "server, then try again)"]
    assert all(record.exc_info is None for record in caplog.records)


def test_other_database_errors_stay_unexpected():
    @ui_errors
    def broken():
        raise sqlite3.OperationalError("no such table: ratings")

    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        broken()
