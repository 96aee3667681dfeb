"""`bind(handler, ctx, ...)`: a module-level handler `f(ctx, ..., widget values, request)` as the event function
Gradio calls with the widget values alone.

Tab handlers are named functions of the module that builds their part of the tab, taking the UIContext (and the
part's widgets) first, so a test calls them directly instead of finding a closure in `app.fns` by api_name.
Gradio reads an event function's signature (how many inputs it takes, which parameter gets the gr.Request) with
inspect.signature and typing.get_type_hints; functools.partial hides both, so `bind` gives the bound function
the handler's signature less the bound parameters, and keeps the handler's annotations.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable


def bind(handler: Callable[..., Any], *leading: Any) -> Callable[..., Any]:
    """`handler` with its first len(leading) parameters given; the rest of its signature as Gradio reads it."""
    parameters = list(inspect.signature(handler).parameters.values())
    if len(leading) > len(parameters) or any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                                            for p in parameters[:len(leading)]):
        raise TypeError(f"cannot bind {len(leading)} leading arguments of "
                        f"{getattr(handler, '__qualname__', handler)}{inspect.signature(handler)}")
    names = {p.name for p in parameters[:len(leading)]}

    if inspect.isgeneratorfunction(handler):
        # A generator stays one: Gradio streams an event's updates only when inspect says its function is one.
        @functools.wraps(handler)
        def bound(*args, **kwargs):
            return (yield from handler(*leading, *args, **kwargs))
    else:
        @functools.wraps(handler)
        def bound(*args, **kwargs):
            return handler(*leading, *args, **kwargs)

    bound.__signature__ = inspect.Signature(parameters[len(leading):])
    # Only the remaining parameters' annotations: Gradio matches annotations to parameters by name.
    bound.__annotations__ = {k: v for k, v in getattr(handler, "__annotations__", {}).items() if k not in names}
    return bound
