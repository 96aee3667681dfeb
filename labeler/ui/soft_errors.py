"""`keep_on_error(n)`: a wrong field is a yellow toast, and the tab keeps what it showed.

Raising gr.Error marks every output of the event as failed: Gradio's front end (6.31, StatusTracker) covers
each one with a red "Error" badge, so one typo in Admin's settings blanked the users table, the settings and
the quality table. For forms whose outputs are a whole tab, an InputError instead becomes gr.Warning (a toast
with the service's message, naming the field) and every output is left as it was (gr.skip()).

PermissionDenied still raises: a hidden admin endpoint called by a non-admin must fail loudly, and its
caller has nothing on screen to keep.

A refusal is the user's mistake, not the server's: the terminal gets one log line naming it (`log_refusal`),
not the traceback Gradio prints for every gr.Error by default. `ui_errors` is the other way to show one: a red
toast, the event fails (and a full disk says so).
"""
from __future__ import annotations

import functools
import logging
import sqlite3
from typing import Any, Callable

import gradio as gr

from labeler.services.errors import InputError, PermissionDenied
from storage.db import DiskFull, is_disk_full

WARNING_TITLE = "Invalid input"
LOG = logging.getLogger("rlhf_studio.ui")


def log_refusal(handler: Callable[..., Any], error: Exception) -> None:
    """One line in the server's log for a refused input: which event, and what the user was told. Refused
    permissions only at debug level: every annotator's page load is refused the admin tabs' loads."""
    level = logging.DEBUG if isinstance(error, PermissionDenied) else logging.WARNING
    LOG.log(level, "%s refused in %s: %s", "permission" if isinstance(error, PermissionDenied) else "input",
            getattr(handler, "__name__", "?"), error)


def ui_errors(handler: Callable[..., Any]) -> Callable[..., Any]:
    """Show InputError / PermissionDenied as a red toast (gr.Error, the service's error as its __cause__) with the
    service's own message, logged as one line: Gradio does not print its traceback (a user's mistake is not the
    server's). A full disk says so instead of Gradio's "upstream app has raised an exception".
    functools.wraps keeps the signature, so Gradio still sees `request: gr.Request` and `progress=gr.Progress()`
    parameters and fills them in."""

    @functools.wraps(handler)
    def wrapper(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except PermissionDenied as error:
            log_refusal(handler, error)
            raise gr.Error(f"Not allowed: {error}", title="Permission denied", print_exception=False) from error
        except InputError as error:
            log_refusal(handler, error)
            raise gr.Error(str(error), title="Invalid input", print_exception=False) from error
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


def keep_on_error(n_outputs: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def decorate(handler: Callable[..., Any]) -> Callable[..., Any]:
        # functools.wraps keeps the signature, so Gradio still fills `request` and `progress` parameters.
        @functools.wraps(handler)
        def wrapper(*args, **kwargs):
            try:
                return handler(*args, **kwargs)
            except PermissionDenied as error:
                log_refusal(handler, error)
                raise gr.Error(f"Not allowed: {error}", title="Permission denied", print_exception=False) from error
            except InputError as error:
                log_refusal(handler, error)
                gr.Warning(str(error), title=WARNING_TITLE)
                return unchanged(n_outputs)

        return wrapper

    return decorate
