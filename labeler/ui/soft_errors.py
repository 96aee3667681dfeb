"""`keep_on_error(n)`: a wrong field is a yellow toast, and the tab keeps what it showed (issue 14 item 7).

Raising gr.Error marks every output of the event as failed: Gradio's front end (6.31, StatusTracker) covers
each one with a red "Error" badge, so one typo in Admin's settings blanked the users table, the settings and
the quality table. For forms whose outputs are a whole tab, an InputError instead becomes gr.Warning (a toast
with the service's message, naming the field) and every output is left as it was (gr.skip()).

PermissionDenied still raises: a hidden admin endpoint called by a non-admin must fail loudly, and its
caller has nothing on screen to keep.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import gradio as gr

from labeler.services.errors import InputError, PermissionDenied

WARNING_TITLE = "Invalid input"


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
                raise gr.Error(f"Not allowed: {error}", title="Permission denied") from error
            except InputError as error:
                gr.Warning(str(error), title=WARNING_TITLE)
                return unchanged(n_outputs)

        return wrapper

    return decorate
