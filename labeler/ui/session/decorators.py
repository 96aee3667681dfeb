"""Decorators for page-load handlers that stay quiet where a toast would only confuse
(`quiet_before_password_change`, `quiet_on_load`); a refusal becomes a toast in labeler.ui.soft_errors."""
from __future__ import annotations

import functools
from typing import Callable

import gradio as gr

from labeler.services.data.accounts import PasswordChangeRequired


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
