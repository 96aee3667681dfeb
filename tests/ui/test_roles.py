"""@requires(role) / check_role(ctx, request, role): the check every handler makes first refuses with
PermissionDenied before the handler does anything; every handler of the UI has one (an AST scan below)."""
from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

import gradio as gr
import pytest

from labeler.services.data import accounts
from labeler.errors import PermissionDenied
from labeler.ui.context import ServeSettings, UIContext
from labeler.ui.binding import bind
from labeler.ui.roles import check_role, requires


@pytest.fixture
def ctx(db, db_path):
    accounts.create_user(db, "boss", "boss-password-1", role="admin")
    accounts.create_user(db, "ann", "ann-password-1")
    return UIContext(ServeSettings(db_path=db_path))


def test_admin_is_for_admins_only(ctx):
    assert check_role(ctx, gr.Request(username="boss"), "admin").username == "boss"
    with pytest.raises(PermissionDenied, match="'ann' is not an admin"):
        check_role(ctx, gr.Request(username="ann"), "admin")
    with pytest.raises(PermissionDenied, match="not logged in"):
        check_role(ctx, gr.Request(), "admin")
    with pytest.raises(PermissionDenied, match="not logged in"):
        check_role(ctx, None, "admin")


def test_user_takes_any_active_account_and_refuses_a_deactivated_one(db, ctx):
    assert check_role(ctx, gr.Request(username="ann"), "user").username == "ann"
    assert check_role(ctx, gr.Request(username="boss"), "user").username == "boss"
    accounts.set_active(db, "ann", False)
    with pytest.raises(PermissionDenied, match="unknown or deactivated"):
        check_role(ctx, gr.Request(username="ann"), "user")


def test_an_unknown_role_is_a_value_error(ctx):
    with pytest.raises(ValueError, match="role must be one of \\['admin', 'user'\\], got 'owner'"):
        check_role(ctx, gr.Request(username="boss"), "owner")


def test_requires_checks_the_role_before_the_body(ctx):
    calls = []

    @requires("admin")
    def handler(ctx, value, request: gr.Request):
        calls.append(value)
        return value * 2

    assert handler(ctx, 3, gr.Request(username="boss")) == 6
    assert handler(ctx, 4, request=gr.Request(username="boss")) == 8
    with pytest.raises(PermissionDenied, match="'ann' is not an admin"):
        handler(ctx, 5, gr.Request(username="ann"))
    with pytest.raises(PermissionDenied, match="not logged in"):
        handler(ctx, 6, None)
    assert calls == [3, 4]  # the refused calls never reached the body
    assert handler.required_role == "admin"


def test_requires_keeps_the_signature_gradio_reads(ctx):
    @requires("user")
    def handler(ctx, text: str, request: gr.Request) -> str:
        return text.upper()

    bound = bind(handler, ctx)
    assert list(inspect.signature(bound).parameters) == ["text", "request"]
    assert typing.get_type_hints(bound)["request"] is gr.Request  # how Gradio finds the parameter to fill
    assert bound("hi", gr.Request(username="ann")) == "HI"


def test_requires_refuses_handlers_it_cannot_check():
    with pytest.raises(TypeError, match="needs parameters named ctx and request"):
        requires("user")(lambda context, request: None)
    with pytest.raises(ValueError, match="got 'owner'"):
        requires("owner")

    def streaming(ctx, request: gr.Request):
        yield 1

    with pytest.raises(TypeError, match="generator or coroutine handler calls check_role itself"):
        requires("user")(streaming)


# Functions of labeler/ui that take a request without a role check of their own, and why.
NO_CHECK_OF_THEIR_OWN = {
    "header.whoami": "before any role: shows who is logged in, nothing for nobody",
    "header.first_steps": "before any role: reads the user and shows the panel to admins only",
    "header.first_steps_tick": "first_steps again",
    "header.change_own_password": "the one thing a one-time password may do; the service checks the password",
    "roles.check_role": "the check itself",
    "session.login.login_throttle": "reads the caller's address for the login throttle",
    "tabs.data.load": "calls refresh, which requires admin",
    "tabs.rank.handlers.undo": "labelling.undo checks",
    "tabs.rate.handlers.undo": "labelling.undo checks",
    "tabs.records.detail.select": "calls open_record, which requires admin",
    "tabs.train.monitor.pick_metrics": "calls refresh, which checks admin (a refused tick changes nothing)",
    "tabs.train.form.launch_streamed": "refuse_unless_admin checks before its first answer (a generator)",
    "tabs.train.form.preview_streamed": "refuse_unless_admin checks before its first answer (a generator)",
}


def test_every_handler_checks_a_role():
    """A module function of labeler/ui taking `request` is an event handler: it carries @requires(...) or calls
    check_role itself, or is listed above with the reason it needs neither."""
    root = Path(__file__).resolve().parents[2] / "labeler" / "ui"
    unchecked = []
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not isinstance(node, ast.FunctionDef) or "request" not in {a.arg for a in node.args.args}:
                continue
            decorated = any(isinstance(d, ast.Call) and getattr(d.func, "id", "") == "requires"
                            for d in node.decorator_list)
            checks = any(isinstance(n, ast.Call) and getattr(n.func, "id", "") == "check_role" for n in ast.walk(node))
            if not (decorated or checks) and f"{module}.{node.name}" not in NO_CHECK_OF_THEIR_OWN:
                unchecked.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")
    assert unchecked == []
