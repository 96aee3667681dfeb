"""`keep_on_error(n)`: a wrong field is a yellow toast, and the tab keeps what it showed.

Raising gr.Error marks every output of the event as failed: Gradio's front end (6.31, StatusTracker) covers
each one with a red "Error" badge, so one typo in Admin's settings blanked the users table, the settings and
the quality table. For forms whose outputs are a whole tab, an InputError instead becomes gr.Warning (a toast
with the service's message, naming the field) and every output is left as it was (gr.skip()).

PermissionDenied still raises: a hidden admin endpoint called by a non-admin must fail loudly, and its
caller has nothing on screen to keep.

A refusal is the user's mistake, not the server's: the terminal gets one log line naming it (`log_refusal`),
not the traceback Gradio prints for every gr.Error by default. `ui_errors` is
labeler.ui.session's (a red toast, the event fails) with that one line instead of the traceback.
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable

import gradio as gr

from labeler.services.errors import InputError, PermissionDenied
from labeler.ui.session import ui_errors as toasts

WARNING_TITLE = "Invalid input"
LOG = logging.getLogger("rlhf_studio.ui")


def log_refusal(handler: Callable[..., Any], error: Exception) -> None:
    """One line in the server's log for a refused input: which event, and what the user was told. Refused
    permissions only at debug level: every annotator's page load is refused the admin tabs' loads."""
    level = logging.DEBUG if isinstance(error, PermissionDenied) else logging.WARNING
    LOG.log(level, "%s refused in %s: %s", "permission" if isinstance(error, PermissionDenied) else "input",
            getattr(handler, "__name__", "?"), error)


def ui_errors(handler: Callable[..., Any]) -> Callable[..., Any]:
    """labeler.ui.session.ui_errors (InputError / PermissionDenied become a red toast), logging a refusal as
    one line: the gr.Error it raises is marked so that Gradio does not print its traceback."""
    inner = toasts(handler)

    @functools.wraps(handler)
    def wrapper(*args, **kwargs):
        try:
            return inner(*args, **kwargs)
        except gr.Error as error:
            if isinstance(error.__cause__, (InputError, PermissionDenied)):
                error.print_exception = False
                log_refusal(handler, error.__cause__)
            raise

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
