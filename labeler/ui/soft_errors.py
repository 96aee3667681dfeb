"""`keep_on_error(n)`: a wrong field is a yellow toast, and the tab keeps what it showed.

Raising gr.Error marks every output of the event as failed: Gradio's front end (6.31, StatusTracker) covers
each one with a red "Error" badge, so one typo in Admin's settings blanked the users table, the settings and
the quality table. For forms whose outputs are a whole tab, an InputError instead becomes gr.Warning (a toast
with the service's message, naming the field as the form labels it) and every output is left as it was
(gr.skip()).

PermissionDenied still raises: a hidden admin endpoint called by a non-admin must fail loudly, and its
caller has nothing on screen to keep.

A refusal is the user's mistake, not the server's: the terminal gets one log line naming it (`log_refusal`),
not the traceback Gradio prints for every gr.Error by default. `ui_errors` is the other way to show one: a red
toast, the event fails (and a full disk says so).

`one_line_errors(app)` does the same for what never reaches a handler's refusal: a request Gradio cannot even
hand to the handler (a chat history that is not a list of messages, None for a number, a file input naming a
server path) or that the handler did not expect. Gradio printed the whole traceback of each (a 1,000-message
history wrote 3,017 lines, every message's validation error) and told the client only "Error"; now one log line
names the event, the user and the field, and the client gets the same one-line reason.
"""
from __future__ import annotations

import functools
import logging
import re
import sqlite3
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping

import gradio as gr
import pydantic
from gradio.exceptions import ComponentProcessingError

from labeler.errors import InputError, PermissionDenied
from labeler.ui.field_labels import toast_text
from storage.db import DiskFull, is_disk_full

WARNING_TITLE = "Invalid input"
MALFORMED_TITLE = "Malformed request"
LOG = logging.getLogger("rlhf_studio.ui")
LINE_CHARS = 300  # of a log line's or a reason's text taken from the request: a value can be megabytes


def one_line(text: object, limit: int = LINE_CHARS) -> str:
    """`text` on one line (newlines and control characters collapsed: a value cannot forge a second log line),
    cut to `limit` characters."""
    flat = " ".join(re.sub(r"[\x00-\x1f\x7f]", " ", str(text)).split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


def request_user(args: tuple, kwargs: dict) -> str:
    """The logged-in user of a handler's gr.Request among its arguments ('-' when none)."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, gr.Request):
            return getattr(value, "username", None) or "-"
    return "-"


def log_refusal(handler: Callable[..., Any], error: Exception, user: str = "-") -> None:
    """One line in the server's log for a refused input: which event, whose, and what the user was told (the
    field is in the InputError's message). Refused permissions only at debug level: every annotator's page load
    is refused the admin tabs' loads."""
    level = logging.DEBUG if isinstance(error, PermissionDenied) else logging.WARNING
    LOG.log(level, "%s refused in %s for %s: %s", "permission" if isinstance(error, PermissionDenied) else "input",
            getattr(handler, "__name__", "?"), user, one_line(error))


def _input_name(block) -> str:
    return str(getattr(block, "label", None) or getattr(block, "elem_id", None) or type(block).__name__.lower())


def _causes(error: BaseException):
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def malformed_reason(fn, error: BaseException) -> tuple[str, str, str]:
    """(the input it is about, one line for the client, one line for the log) for an event that failed before or
    outside a handler's own refusals. Gradio names a value its component could not read by the input's index
    (ComponentProcessingError) or by the component's data model (a pydantic ValidationError), whose messages say
    what is wrong with the value. Anything else is the handler's: the client is told only its type (its text may
    hold server paths, which show_error=False keeps from the browser) and the log places it where it was raised,
    so that a server bug stays findable from its one line."""
    inputs = list(getattr(fn, "inputs", None) or [])
    for cause in _causes(error):
        if isinstance(cause, ComponentProcessingError):
            found = re.search(r"at index (\d+)", str(cause))
            if found and int(found.group(1)) < len(inputs):
                original = cause.__cause__
                reason = f"not a value this input takes ({type(original).__name__ if original else 'unreadable'})"
                return _input_name(inputs[int(found.group(1))]), reason, reason
        if isinstance(cause, pydantic.ValidationError):
            field = next((_input_name(block) for block in inputs
                          if getattr(getattr(block, "data_model", None), "__name__", None) == cause.title), cause.title)
            first = cause.errors()[0] if cause.errors() else {}
            where = ".".join(str(part) for part in first.get("loc", ()))
            count = cause.error_count()
            more = f" (and {count - 1} more)" if count > 1 else ""
            reason = f"{first.get('msg', 'not valid')}{' at ' + where if where else ''}{more}"
            return field, reason, reason
    frames = traceback.extract_tb(error.__traceback__)
    at = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return ("-", f"the server could not handle this request ({type(error).__name__}); it was logged",
            f"{type(error).__name__}: {error}{at}")


def refused_number(fn, inputs, message: str) -> str | None:
    """The label of the event's number box whose value Gradio's gr.Number.preprocess refuses with `message`
    (its minimum and maximum), checked again on the sent values; None when no number box says so."""
    values = inputs if isinstance(inputs, list) else []
    for block, value in zip(getattr(fn, "inputs", None) or [], values):
        if isinstance(block, gr.Number) and isinstance(value, (int, float)):
            try:
                block.preprocess(value)
            except gr.Error as error:
                if error.message == message:
                    return _input_name(block)
            except Exception:  # noqa: BLE001 - not this box
                continue
    return None


def one_line_errors(app: gr.Blocks) -> None:
    """Every event of `app` that fails other than by our own refusals (gr.Error with print_exception=False: they
    logged their line) writes one log line, `malformed request to EVENT by USER, field FIELD: REASON`, and
    answers the client with a one-line reason as a gr.Error, which Gradio does not print. A gr.Error raised to be
    printed keeps its message and title and is logged as one line instead. Wraps the app's `process_api`, where
    Gradio turns the request's values into the handler's arguments, calls it and reads its outputs
    (route_utils.call_process_api calls it)."""
    original = app.process_api

    @functools.wraps(original)
    async def process_api(block_fn, inputs, state=None, request=None, *args, **kwargs):
        try:
            return await original(block_fn, inputs, state, request, *args, **kwargs)
        except Exception as error:  # noqa: BLE001 - each becomes one line and a one-line answer
            failed: BaseException = error
        if isinstance(failed, gr.Error) and not failed.print_exception:
            raise failed  # ours: its line is logged
        fn = app.fns.get(block_fn) if isinstance(block_fn, int) else block_fn
        event = getattr(fn, "api_name", None) or "?"
        first = request[0] if isinstance(request, list) and request else request
        user = getattr(first, "username", None) or "-"
        if isinstance(failed, gr.Error):
            # Gradio's own check of a number box ("Value 0 is less than minimum value 1.") names no box: the toast
            # names it as the form labels it.
            label = refused_number(fn, inputs, failed.message)
            if label:
                failed.message = f"{label}: {failed.message}"
            LOG.warning("refused in %s for %s: %s", event, user, one_line(failed.message))
            failed.print_exception = False
            raise failed
        field, answer, detail = malformed_reason(fn, failed)
        LOG.warning("malformed request to %s by %s, field %s: %s", event, user, one_line(field, 80), one_line(detail))
        answer = one_line(answer)
        raise gr.Error(f"{one_line(field, 80)}: {answer}" if field != "-" else answer, title=MALFORMED_TITLE,
                       print_exception=False) from None

    app.process_api = process_api


def ui_errors(handler: Callable[..., Any] | None = None, *,
              labels: Mapping[str, str] | None = None) -> Callable[..., Any]:
    """Show InputError / PermissionDenied as a red toast (gr.Error, the service's error as its __cause__) with the
    service's own message, the field named as the form labels it (field_labels.toast_text; `labels`: the form's
    own words where they differ from FIELD_LABELS), logged as one line: Gradio does not print its traceback (a
    user's mistake is not the server's). A full disk says so instead of Gradio's "upstream app has raised an exception".
    functools.wraps keeps the signature, so Gradio still sees `request: gr.Request` and `progress=gr.Progress()`
    parameters and fills them in."""
    if handler is None:  # @ui_errors(labels=...)
        return functools.partial(ui_errors, labels=labels)

    @functools.wraps(handler)
    def wrapper(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except PermissionDenied as error:
            log_refusal(handler, error, request_user(args, kwargs))
            raise gr.Error(f"Not allowed: {error}", title="Permission denied", print_exception=False) from error
        except InputError as error:
            log_refusal(handler, error, request_user(args, kwargs))
            raise gr.Error(toast_text(error, labels), title="Invalid input", print_exception=False) from error
        except (DiskFull, sqlite3.OperationalError) as error:
            # Any other database error stays an unexpected one.
            if not isinstance(error, DiskFull) and not is_disk_full(error):
                raise
            # One log line, the sentence the user sees: Gradio printed the chained traceback (3 exceptions) for
            # every refused label, 660 lines for 220 labels on a full disk.
            LOG.warning("disk full: %s refused: %s", getattr(handler, "__name__", "?"), DiskFull())
            raise gr.Error(f"{DiskFull()}", title="Disk full", print_exception=False) from error

    return wrapper


def unchanged(n_outputs: int) -> Any:
    """What a handler returns to leave its `n_outputs` outputs as they are."""
    return gr.skip() if n_outputs == 1 else tuple(gr.skip() for _ in range(n_outputs))


def keep_on_error(n_outputs: int, labels: Mapping[str, str] | None = None
                  ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`labels`: the form's own words for its fields where they differ from field_labels.FIELD_LABELS."""
    def decorate(handler: Callable[..., Any]) -> Callable[..., Any]:
        # functools.wraps keeps the signature, so Gradio still fills `request` and `progress` parameters.
        @functools.wraps(handler)
        def wrapper(*args, **kwargs):
            try:
                return handler(*args, **kwargs)
            except PermissionDenied as error:
                log_refusal(handler, error, request_user(args, kwargs))
                raise gr.Error(f"Not allowed: {error}", title="Permission denied", print_exception=False) from error
            except InputError as error:
                log_refusal(handler, error, request_user(args, kwargs))
                gr.Warning(toast_text(error, labels), title=WARNING_TITLE)
                return unchanged(n_outputs)

        return wrapper

    return decorate
