"""labeler/ui/soft_errors.py's `ui_errors`, the one decorator that turns a service's refusal into a red toast:
the message, the title, the service's error as the cause, one log line and no traceback; a full disk said so."""
from __future__ import annotations

import ast
import logging
import sqlite3
from pathlib import Path

import gradio as gr
import pytest

from labeler.errors import InputError, PermissionDenied
from labeler.ui.soft_errors import ui_errors


def raising(error: Exception):
    @ui_errors
    def handler(value, request=None):
        """A handler's docstring."""
        raise error
    return handler


def test_a_refused_input_is_a_toast_with_one_log_line(caplog):
    refusal = InputError("must be 1..7, got 9", field="score")
    with caplog.at_level(logging.WARNING, logger="rlhf_studio.ui"), pytest.raises(gr.Error) as error:
        raising(refusal)(9)
    # The field as the form labels it ("Score"), not as the code names it ("field 'score'").
    assert (error.value.message, error.value.title) == ("Score: must be 1..7, got 9", "Invalid input")
    assert error.value.__cause__ is refusal and error.value.print_exception is False
    assert [record.getMessage() for record in caplog.records] == [f"input refused in handler for -: {refusal}"]


def test_a_refused_permission_says_not_allowed():
    with pytest.raises(gr.Error) as error:
        raising(PermissionDenied("admins only"))(1)
    assert (error.value.message, error.value.title) == ("Not allowed: admins only", "Permission denied")
    assert error.value.print_exception is False


def test_a_full_disk_says_so_and_other_database_errors_stay_unexpected():
    with pytest.raises(gr.Error) as error:
        raising(sqlite3.OperationalError("database or disk is full"))(1)
    assert error.value.title == "Disk full" and error.value.message.startswith("the disk is full; nothing was saved")
    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        raising(sqlite3.OperationalError("database is locked"))(1)


def test_the_handler_keeps_its_name_and_signature():
    handler = raising(ValueError("a bug"))
    assert handler.__name__ == "handler" and handler.__doc__ == "A handler's docstring."
    with pytest.raises(ValueError, match="a bug"):  # not the user's: Gradio's own error path
        handler(1)


def test_one_decorator_is_named_ui_errors():
    ui = Path(__file__).resolve().parents[2] / "labeler" / "ui"
    defined = [path.relative_to(ui).as_posix() for path in sorted(ui.rglob("*.py"))
               for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(node, ast.FunctionDef) and node.name == "ui_errors"]
    assert defined == ["soft_errors.py"]


def test_a_refusal_names_the_user_and_cannot_forge_log_lines(caplog):
    request = gr.Request(username="hana")
    refusal = InputError("got 'x\nFORGED line " + "y" * 5000 + "'", field="comment")
    with caplog.at_level(logging.WARNING, logger="rlhf_studio.ui"), pytest.raises(gr.Error):
        raising(refusal)(9, request=request)
    (line,) = [record.getMessage() for record in caplog.records]
    assert line.startswith("input refused in handler for hana: field 'comment': got 'x FORGED line yyy")
    assert "\n" not in line and len(line) < 400


def test_one_line_errors_log_one_line_and_keep_server_text_from_the_client(caplog):
    import asyncio

    from labeler.ui.soft_errors import MALFORMED_TITLE, one_line_errors

    with gr.Blocks() as app:
        box, number = gr.Textbox(label="Comment"), gr.Slider(0, 10, label="Seconds")

        def crash(text, seconds):
            raise FileNotFoundError("/srv/secret/path.db")

        def loud(text, seconds):
            raise gr.Error("Not allowed: admins only", title="Permission denied")

        box.submit(crash, [box, number], box, api_name="crash")
        box.change(loud, [box, number], box, api_name="loud")
    one_line_errors(app)
    crash_fn, loud_fn = (next(f for f in app.fns.values() if f.api_name == name) for name in ("crash", "loud"))
    request = gr.Request(username="hana")
    with caplog.at_level(logging.WARNING, logger="rlhf_studio.ui"):
        with pytest.raises(gr.Error) as error:
            asyncio.run(app.process_api(crash_fn, ["x", 1], request=request))
        assert error.value.title == MALFORMED_TITLE and "/srv" not in error.value.message
        assert error.value.print_exception is False and "FileNotFoundError" in error.value.message
        with pytest.raises(gr.Error) as error:
            asyncio.run(app.process_api(crash_fn, ["x", "not a number"], request=request))
        assert error.value.message == "Seconds: not a value this input takes (TypeError)"
        with pytest.raises(gr.Error) as error:
            asyncio.run(app.process_api(loud_fn, ["x", 1], request=request))
        assert (error.value.message, error.value.title) == ("Not allowed: admins only", "Permission denied")
        assert error.value.print_exception is False
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 3 and all("hana" in line and "\n" not in line for line in lines), lines
    assert lines[0].startswith("malformed request to crash by hana, field -: FileNotFoundError: /srv/secret/path.db at")
    assert lines[1] == "malformed request to crash by hana, field Seconds: not a value this input takes (TypeError)"
