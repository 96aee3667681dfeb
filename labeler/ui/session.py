"""Login and per-request identity for the Gradio app.

Gradio's built-in login page (launch(auth=callable)) checks the password through
accounts.authenticate; after that every handler gets the user name from gr.Request and checks the
role itself, because any event with an api_name can be called directly, bypassing the buttons.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import gradio as gr

from labeler.services.errors import InputError, PermissionDenied
from storage import open_db


def make_auth(db_path: str) -> Callable[[str, str], bool]:
    """The callable Gradio's login form calls: True for an active user with the right password."""

    def auth(username: str, password: str) -> bool:
        from labeler.services import accounts

        db = open_db(db_path)  # a connection per login attempt: Gradio calls this from worker threads
        try:
            user = accounts.authenticate(db, username, password)
        finally:
            db.conn.close()
        return user is not None and bool(user.active)

    return auth


def ui_errors(handler: Callable[..., Any]) -> Callable[..., Any]:
    """Show InputError / PermissionDenied as a red toast (gr.Error) with the service's own message.

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

    return wrapper


def require_user(db, request: gr.Request | None):
    """The logged-in, active user (accounts.User), or PermissionDenied."""
    from labeler.services import accounts
    from labeler.ui.context import UIContext

    return accounts.require_user(db, UIContext.username(request))


def require_admin(db, request: gr.Request | None):
    """The logged-in admin, or PermissionDenied: called first by every admin-only handler."""
    from labeler.services import accounts
    from labeler.ui.context import UIContext

    return accounts.require_admin(db, UIContext.username(request))


def quiet_on_load(handler: Callable[[gr.Request], tuple], n_outputs: int) -> Callable[[gr.Request], tuple]:
    """A page-load version of an admin handler: for an annotator it changes nothing instead of showing a
    'Permission denied' toast about a tab they cannot even see."""

    def load(request: gr.Request):
        try:
            return handler(request)
        except gr.Error:
            return tuple(gr.update() for _ in range(n_outputs))

    return load
