"""Gradio's private names that labeler/ui/gradio_internals.py (and the login code in labeler/ui/session/) use.

Each test reads the installed Gradio on purpose: a release that renames or removes one of them would otherwise
switch a fix off silently (quiet_queue setting an attribute nobody reads, SessionStore never consulted, the
upload cap misread). When one of these fails after a Gradio upgrade, read gradio_internals' docstring for what
the name is used for, and find the new name or drop the fix.
"""
from __future__ import annotations

import contextlib
import importlib.util
import inspect

import gradio as gr
import gradio.queueing
import gradio.route_utils
import gradio.routes
import gradio.utils

from labeler.ui.app import launch_options
from labeler.ui.context import ServeSettings
from labeler.ui.gradio_internals import (STATUS_UPDATE_S, WRITTEN_FOR, parse_file_size, quiet_queue,
                                         replace_session_tokens, skip_missing_matplotlib)

UPGRADED = f"(read from Gradio {WRITTEN_FOR}; installed {gr.__version__})"


def test_parse_file_size_is_gradios_reading_of_max_file_size():
    assert list(inspect.signature(gradio.utils._parse_file_size).parameters) == ["size"], UPGRADED
    assert parse_file_size("2 kb") == 2 * 1024 and parse_file_size("50mb") == 50 * 1024 ** 2
    assert parse_file_size(123) == 123 and parse_file_size(None) is None


def test_quiet_queue_sends_positions_on_a_timer_and_builds_no_monitoring_summary(monkeypatch):
    with gr.Blocks() as app:
        gr.Button("x").click(lambda: None, api_name="noop")
    assert isinstance(app._queue, gradio.queueing.Queue)
    assert app._queue.live_updates is True  # Gradio's default: positions to every waiting client per job start
    quiet_queue(app)
    queue = app._queue
    assert queue.live_updates is False and queue.update_intervals == STATUS_UPDATE_S

    def no_dataframes(records):
        raise AssertionError("the monitoring summary was rebuilt")

    monkeypatch.setattr(queue, "_get_df", no_dataframes)
    records = [{"time": 1.0, "status": "success", "process_time": 0.01, "function": "noop", "session_hash": "s"}]
    for _ in range(3):  # as process_events does after every event
        queue.events_recorded += 1
        assert queue.compute_analytics_summary(records) == {"functions": {}}
    assert queue.ANALYTICS_MAX_EVENTS == 1  # the event log it would summarise is kept at one entry
    # Both attributes are what Gradio reads, not new ones quiet_queue made up (a rename would leave them unread).
    assert "self.ANAYLTICS_CACHE_FREQUENCY" in inspect.getsource(gradio.queueing.Queue.compute_analytics_summary)
    assert "self.ANALYTICS_MAX_EVENTS" in inspect.getsource(gradio.queueing.Queue)


def test_the_monitoring_endpoint_is_off():
    assert launch_options(ServeSettings(db_path=":memory:"))["enable_monitoring"] is False


def test_without_matplotlib_gradio_no_longer_tries_to_import_it_per_event(monkeypatch):
    original = gradio.utils.MatplotlibBackendMananger
    monkeypatch.setattr(gradio.utils, "MatplotlibBackendMananger", original)  # restored after the test
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real_find_spec(name, *a))
    assert skip_missing_matplotlib() is True
    assert gradio.utils.MatplotlibBackendMananger is contextlib.nullcontext
    # call_process_api reaches it through the module at call time, so the swap is what it uses.
    assert "utils.MatplotlibBackendMananger()" in inspect.getsource(gradio.route_utils.call_process_api)
    # With matplotlib installed, Gradio's own manager stays.
    monkeypatch.setattr(gradio.utils, "MatplotlibBackendMananger", original)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "matplotlib" else real_find_spec(name, *a))
    assert skip_missing_matplotlib() is False and gradio.utils.MatplotlibBackendMananger is original


def test_session_tokens_are_a_dict_on_the_app_that_login_and_logout_use():
    server = gradio.routes.App()
    assert server.tokens == {} and server.auth is None  # App.tokens and App.auth, as ui/session reads them
    server.tokens["earlier"] = "alice"
    made = []

    def make_store(sessions):
        made.append(sessions)
        return dict(sessions, fresh="bob")

    store = replace_session_tokens(server, make_store)
    assert made == [[("earlier", "alice")]] and server.tokens is store and store["fresh"] == "bob"

    # The login route: the auth coroutine is awaited, then the token stored in the same request (SessionStore
    # reads the login's session epoch from the context the coroutine set), and the two session cookies set.
    routes = inspect.getsource(gradio.routes.App.create_app)
    auth_call, token_write = routes.find("await app.auth(username, password)"), routes.find("app.tokens[token] = username")
    assert 0 <= auth_call < token_write, f"Gradio's login no longer stores the token right after auth {UPGRADED}"
    for cookie in ('key=f"access-token-{app.cookie_id}"', 'key=f"access-token-unsecure-{app.cookie_id}"'):
        assert cookie in routes, f"{cookie} {UPGRADED}"
    # The logout route RequestGuard forwards the POST to, and the per-request lookup of the session.
    assert '@app.get("/logout")' in routes and "app.tokens.get(token)" in routes, UPGRADED


def test_the_login_cookie_is_named_by_app_cookie_id_and_cors_wraps_the_apps_middleware():
    """store.name_login_cookie sets App.cookie_id, which every route reads to name the login cookie; guard.outside_cors
    moves RequestGuard in front of the CustomCORSMiddleware Gradio adds with add_middleware (around ours)."""
    from gradio.brotli_middleware import BrotliMiddleware
    from starlette.middleware import Middleware

    from labeler.ui.session import RequestGuard, outside_cors

    source = inspect.getsource(gradio.routes.App.create_app)
    assert 'f"access-token-{app.cookie_id}"' in source and "app.tokens.get(token)" in source, UPGRADED
    assert "app.add_middleware(\n            CustomCORSMiddleware" in source, UPGRADED
    assert isinstance(gradio.routes.App().cookie_id, str)
    server = gradio.routes.App(middleware=[Middleware(RequestGuard)])
    server.add_middleware(gradio.route_utils.CustomCORSMiddleware)
    server.add_middleware(BrotliMiddleware)
    assert [m.cls for m in server.user_middleware][1:] == [gradio.route_utils.CustomCORSMiddleware, RequestGuard]
    server.middleware_stack = server.build_middleware_stack()
    assert outside_cors(server) is True and server.middleware_stack is None
    assert [m.cls for m in server.user_middleware] == [
        BrotliMiddleware, RequestGuard, gradio.route_utils.CustomCORSMiddleware]
