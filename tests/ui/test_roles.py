"""@requires(ctx, role): the role check runs before the handler, refuses with PermissionDenied, and leaves the
handler's signature as Gradio reads it (the request parameter filled by its annotation, a Progress default,
a generator kept a generator)."""
from __future__ import annotations

import inspect

import gradio as gr
import pytest
from gradio.helpers import special_args

from labeler.services import accounts
from labeler.services.errors import PermissionDenied
from labeler.ui.context import ServeSettings, UIContext
from labeler.ui.roles import check_role, requires


@pytest.fixture
def ctx(db, db_path):
    accounts.create_user(db, "boss", "boss-password-1", role="admin")
    accounts.create_user(db, "ann", "ann-password-1")
    return UIContext(ServeSettings(db_path=db_path))


def test_an_admin_handler_runs_for_an_admin_only_and_is_refused_before_it_runs(ctx):
    calls = []

    @requires(ctx, "admin")
    def handler(text, request: gr.Request):
        calls.append(text)
        return text.upper()

    assert handler("hi", gr.Request(username="boss")) == "HI"
    assert handler("kw", request=gr.Request(username="boss")) == "KW"
    with pytest.raises(PermissionDenied, match="'ann' is not an admin"):
        handler("no", gr.Request(username="ann"))
    with pytest.raises(PermissionDenied, match="not logged in"):
        handler("no", gr.Request())
    with pytest.raises(PermissionDenied, match="not logged in"):
        handler("no", None)
    assert calls == ["hi", "kw"]  # the refused calls never reached the handler


def test_a_user_handler_takes_any_active_account_and_refuses_a_deactivated_one(db, ctx):
    @requires(ctx, "user")
    def handler(request: gr.Request):
        return UIContext.username(request)

    assert handler(gr.Request(username="ann")) == "ann"
    assert handler(gr.Request(username="boss")) == "boss"
    accounts.set_active(db, "ann", False)
    with pytest.raises(PermissionDenied, match="unknown or deactivated"):
        handler(gr.Request(username="ann"))
    assert check_role(ctx, gr.Request(username="boss"), "admin").username == "boss"


def test_gradio_still_fills_the_request_and_the_progress_of_a_decorated_handler(ctx):
    @requires(ctx, "admin")
    def handler(values: dict, request: gr.Request, progress=gr.Progress()):
        return values, request.username, progress

    # special_args is what Gradio runs before every call: it finds `request` by its annotation (through
    # functools.wraps' __wrapped__ and __annotations__) and `progress` by its default.
    request = gr.Request(username="boss")
    inputs, progress_index = special_args(handler, inputs=[{"a": 1}], request=request)[:2]
    assert inputs[1] is request and progress_index == 2
    assert list(inspect.signature(handler).parameters) == ["values", "request", "progress"]
    assert handler(*inputs[:2])[:2] == ({"a": 1}, "boss")


def test_a_generator_handler_stays_a_generator_and_is_checked_when_it_starts(ctx):
    @requires(ctx, "user")
    def stream(n, request: gr.Request):
        yield from range(n)

    assert inspect.isgeneratorfunction(stream)  # Gradio streams only what it sees as a generator function
    assert list(stream(3, gr.Request(username="ann"))) == [0, 1, 2]
    refused = stream(3, gr.Request(username="nobody"))
    with pytest.raises(PermissionDenied, match="'nobody' is unknown or deactivated"):
        next(refused)


def test_a_handler_without_a_request_parameter_or_an_unknown_role_fails_when_the_app_is_built(ctx):
    def no_request(text):
        return text

    def untyped(text, request):
        return text

    with pytest.raises(TypeError, match="no_request has no parameter annotated gr.Request"):
        requires(ctx, "admin")(no_request)
    with pytest.raises(TypeError, match="untyped has no parameter annotated gr.Request"):
        requires(ctx, "admin")(untyped)
    with pytest.raises(ValueError, match="role must be one of \\['admin', 'user'\\], got 'owner'"):
        requires(ctx, "owner")
