"""`@requires("admin")`: the role check every UI handler makes before it does anything (`check_role`, its body,
for the one handler that needs the user it returns).

Hiding a tab from annotators hides nothing from a client that calls its endpoint, so each handler checks the
caller itself, first thing, from the `gr.Request` Gradio passes to its parameter annotated `gr.Request`, and
the check raises PermissionDenied (services.accounts: not logged in, deactivated, a one-time password to
replace, not an admin). Handlers sit under the decorator that turns errors into toasts (`ui_errors`,
`keep_on_error`), so a refusal is shown like any other.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Literal

import gradio as gr

from labeler.services.data import accounts
from labeler.ui.context import UIContext

Role = Literal["user", "admin"]
CHECKS: dict[str, Callable[..., accounts.User]] = {"user": accounts.require_user, "admin": accounts.require_admin}


def check_role(ctx: UIContext, request: gr.Request | None, role: Role) -> accounts.User:
    """The logged-in user when they have `role` ("user": any active account; "admin"), else PermissionDenied.
    From here on the request works in the user's chosen project (`ctx.project`, UIContext.enter_project)."""
    return _check(ctx, request, role)[0]


def _check(ctx: UIContext, caller: gr.Request | None, role: Role):
    """(the user, the token of the project the request now works in: UIContext.leave_project resets it)."""
    if role not in CHECKS:
        raise ValueError(f"role must be one of {sorted(CHECKS)}, got {role!r}")
    with ctx.connection() as db:
        user = CHECKS[role](db, UIContext.username(caller))
        return user, ctx.enter_project(db, user.username)


def requires(role: Role) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: `check_role(ctx, request, role)` before the handler's body, for a handler `f(ctx, ..., request)`
    (the parameters must be called so: the check finds them by name). Put it under ui_errors / keep_on_error, which
    turn its PermissionDenied into a toast. The wrapper keeps the handler's signature, which Gradio reads."""
    if role not in CHECKS:
        raise ValueError(f"role must be one of {sorted(CHECKS)}, got {role!r}")

    def decorate(handler: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.isgeneratorfunction(handler) or inspect.iscoroutinefunction(handler):
            # Gradio streams a generator only when inspect says the event function is one, which a plain
            # wrapper is not: such a handler calls check_role in its body.
            raise TypeError(f"@requires({role!r}) on {handler.__qualname__}: a generator or coroutine handler calls "
                            f"check_role itself")
        signature = inspect.signature(handler)
        if not {"ctx", "request"} <= set(signature.parameters):
            raise TypeError(f"@requires({role!r}) on {handler.__qualname__}{signature}: needs parameters named ctx "
                            f"and request")

        @functools.wraps(handler)
        def checked(*args: Any, **kwargs: Any) -> Any:
            arguments = signature.bind_partial(*args, **kwargs).arguments
            ctx = arguments["ctx"]
            _, token = _check(ctx, arguments.get("request"), role)
            try:
                return handler(*args, **kwargs)
            finally:
                ctx.leave_project(token)

        checked.required_role = role  # tests/ui/test_roles.py checks that every handler has one
        return checked

    return decorate
