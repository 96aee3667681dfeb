"""`check_role(ctx, request, "admin")`: the role check every UI handler makes before it does anything.

Hiding a tab from annotators hides nothing from a client that calls its endpoint, so each handler checks the
caller itself, first thing, from the `gr.Request` Gradio passes to its parameter annotated `gr.Request`, and
the check raises PermissionDenied (services.accounts: not logged in, deactivated, a one-time password to
replace, not an admin). Handlers sit under the decorator that turns errors into toasts (`ui_errors`,
`keep_on_error`), so a refusal is shown like any other.
"""
from __future__ import annotations

from typing import Callable, Literal

import gradio as gr

from labeler.services import accounts
from labeler.ui.context import UIContext

Role = Literal["user", "admin"]
CHECKS: dict[str, Callable[..., accounts.User]] = {"user": accounts.require_user, "admin": accounts.require_admin}


def check_role(ctx: UIContext, request: gr.Request | None, role: Role) -> accounts.User:
    """The logged-in user when they have `role` ("user": any active account; "admin"), else PermissionDenied."""
    if role not in CHECKS:
        raise ValueError(f"role must be one of {sorted(CHECKS)}, got {role!r}")
    with ctx.connection() as db:
        return CHECKS[role](db, UIContext.username(request))
