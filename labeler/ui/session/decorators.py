"""Decorators for UI handlers: service refusals as red toasts (`ui_errors`), and page-load handlers that stay
quiet where a toast would only confuse (`quiet_before_password_change`, `quiet_on_load`)."""
from __future__ import annotations

import functools
import logging
import sqlite3
from typing import Any, Callable

import gradio as gr

from labeler.services.accounts import PasswordChangeRequired
from labeler.services.errors import InputError, PermissionDenied
from storage.db import DiskFull, is_disk_full

LOG = logging.getLogger("rlhf_studio.ui")  # soft_errors' logger: a refusal is one line there


def ui_errors(handler: Callable[..., Any]) -> Callable[..., Any]:
    """Show InputError / PermissionDenied as a red toast (gr.Error) with the service's own message.

    Handlers use labeler.ui.soft_errors.ui_errors, which wraps this one and logs a refusal as one line instead
    of the traceback Gradio prints for every gr.Error (a user's mistake is not the server's).
    functools.wraps keeps the signature, so Gradio still sees `request: gr.Request` and
    `progress=gr.Progress()` parameters and fills them in.
    """

    @functools.wraps(handler)
    def wrapper(*args, **kwargs):
        try:
            return handler(*args, **kwargs)
        except PermissionDenied as error:
            raise gr.Error(f"Not allowed: {error}", title="Permission denied") from error
        except InputError as error:
            raise gr.Error(str(error), title="Invalid input") from error
        except (DiskFull, sqlite3.OperationalError) as error:
            # A full disk said so, instead of Gradio's "upstream app has raised an exception"; any
            # other database error stays an unexpected one.
            if not isinstance(error, DiskFull) and not is_disk_full(error):
                raise
            # One log line, the sentence the user sees: Gradio printed the chained traceback (3 exceptions) for
            # every refused label, 660 lines for 220 labels on a full disk.
            LOG.warning("disk full: %s refused: %s", getattr(handler, "__name__", "?"), DiskFull())
            raise gr.Error(f"{DiskFull()}", title="Disk full", print_exception=False) from error

    return wrapper


def quiet_before_password_change(handler: Callable[[gr.Request], tuple],
                                 n_outputs: int) -> Callable[[gr.Request], tuple]:
    """A user tab's page-load (or tab-select) handler that changes nothing, instead of a 'Not allowed' toast,
    while the user must first replace a one-time password: the page then shows only that form
    (header.whoami), and a click is still refused by the handler itself. Every other error still shows."""

    @functools.wraps(handler)
    def load(request: gr.Request):
        try:
            return handler(request)
        except gr.Error as error:
            if not isinstance(error.__cause__, PasswordChangeRequired):  # ui_errors keeps the service's error
                raise
            return gr.update() if n_outputs == 1 else tuple(gr.update() for _ in range(n_outputs))

    return load


def quiet_on_load(handler: Callable[[gr.Request], tuple], n_outputs: int) -> Callable[[gr.Request], tuple]:
    """A page-load version of an admin handler: for an annotator it changes nothing instead of showing a
    'Permission denied' toast about a tab they cannot even see."""

    @functools.wraps(handler)
    def load(request: gr.Request):
        try:
            return handler(request)
        except gr.Error:
            return tuple(gr.update() for _ in range(n_outputs))

    return load
