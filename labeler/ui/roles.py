"""`@requires(ctx, "admin")`: the role check every UI handler makes before it does anything.

Hiding a tab from annotators hides nothing from a client that calls its endpoint, so each handler checks the
caller itself. The decorator reads the `gr.Request` Gradio passes to the handler's parameter annotated
`gr.Request` (Gradio finds it by that annotation: gradio.helpers.special_args reads inspect.signature and
typing.get_type_hints, and functools.wraps keeps both, through `__wrapped__` and `__annotations__`), and raises
PermissionDenied (services.accounts: not logged in, deactivated, a one-time password to replace, not an admin)
before the handler runs. Put it under the decorator that turns errors into toasts (`ui_errors`, `keep_on_error`),
so a refusal is shown like any other.
"""
from __future__ import annotations

import functools
import inspect
import typing
from typing import Any, Callable, Literal, Optional

import gradio as gr

from labeler.services import accounts
from labeler.ui.context import UIContext

Role = Literal["user", "admin"]
CHECKS: dict[str, Callable[..., accounts.User]] = {"user": accounts.require_user, "admin": accounts.require_admin}


def request_parameter(handler: Callable[..., Any]) -> str:
    """The name of the handler's parameter Gradio fills with the request (annotated gr.Request), or a TypeError
    naming the handler: without one the check would always refuse, since Gradio passes the request to nobody."""
    try:
        hints = typing.get_type_hints(handler)  # as Gradio reads them: string annotations resolved
    except (NameError, TypeError):
        hints = {}
    for name in inspect.signature(handler).parameters:
        if hints.get(name) in (gr.Request, Optional[gr.Request]):
            return name
    raise TypeError(f"{getattr(handler, '__qualname__', handler)} has no parameter annotated gr.Request, "
                    "which @requires reads the logged-in user from")


def check_role(ctx: UIContext, request: gr.Request | None, role: Role) -> accounts.User:
    """The logged-in user when they have `role` ("user": any active account; "admin"), else PermissionDenied."""
    with ctx.connection() as db:
        return CHECKS[role](db, UIContext.username(request))


def requires(ctx: UIContext, role: Role) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a handler so that it runs only for a logged-in user with `role` (PermissionDenied otherwise).
    The handler keeps its signature; a generator handler stays a generator (Gradio streams what it yields),
    checked when it starts."""
    if role not in CHECKS:
        raise ValueError(f"role must be one of {sorted(CHECKS)}, got {role!r}")

    def decorate(handler: Callable[..., Any]) -> Callable[..., Any]:
        name = request_parameter(handler)
        signature = inspect.signature(handler)

        def check(args: tuple, kwargs: dict) -> None:
            check_role(ctx, signature.bind_partial(*args, **kwargs).arguments.get(name), role)

        if inspect.isgeneratorfunction(handler):
            @functools.wraps(handler)
            def stream(*args, **kwargs):
                check(args, kwargs)
                yield from handler(*args, **kwargs)

            return stream

        @functools.wraps(handler)
        def wrapper(*args, **kwargs):
            check(args, kwargs)
            return handler(*args, **kwargs)

        return wrapper

    return decorate
