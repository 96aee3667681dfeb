"""Every use of a Gradio name that is not its public API, in one module (written against Gradio 6.31).

Gradio's public options do not reach these; each one fixes a measured cost or a security gap, and a Gradio
release may rename or drop it without notice. tests/ui/test_gradio_internals.py checks that the installed
Gradio still has every name listed here with the shape used, so an upgrade that changes one fails that test
instead of silently switching a fix off.

Used through this module's functions (labeler/ui/app.py calls them):
- `gradio.utils._parse_file_size`: launch's max_file_size ("50mb") in bytes, for RequestGuard's upload cap.
- `Blocks._queue` and its `ANAYLTICS_CACHE_FREQUENCY` (sic) and `ANALYTICS_MAX_EVENTS`: quiet_queue.
- `gradio.utils.MatplotlibBackendMananger` (sic), looked up by route_utils.call_process_api at each event:
  skip_missing_matplotlib.
- `App.tokens` (gradio.routes.App, cookie token -> username): replace_session_tokens.
- `gradio.http_server.start_server` building its `uvicorn.Config` without `forwarded_allow_ips`, so uvicorn reads
  `$FORWARDED_ALLOW_IPS` (default "127.0.0.1,::1"), and `Blocks.server.config`: trusted_proxies.

Used by labeler/ui/session/ where they are read (left there, in the login code; the test covers them too):
- `App.tokens`, reached as scope["app"].tokens by RequestGuard, and `App.auth` (login_throttle reads the
  throttle make_auth hangs on the auth coroutine);
- Gradio's `POST /login` storing `app.tokens[token] = username` right after awaiting the auth coroutine, in the
  same context: SessionStore reads the login's session epoch from a context variable the coroutine set;
- the session cookies `access-token-<cookie id>` and `access-token-unsecure-<cookie id>` (RequestGuard,
  cookies.lax_cookies), `App.cookie_id` (store.name_login_cookie makes it the database's, so a session outlives a
  restart) and the `GET /logout` route (RequestGuard turns the logout POST into it);
- `gradio.route_utils.CustomCORSMiddleware`, added by Gradio around the middleware given in app_kwargs
  (guard.outside_cors moves RequestGuard in front of it).
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import threading
from typing import Callable

import gradio as gr
import gradio.utils

WRITTEN_FOR = "6.31"  # the Gradio release these were read from (gradio/queueing.py, routes.py, route_utils.py)

# Seconds between Gradio's queue-position messages to waiting clients (its "auto" sends one to every waiting
# client each time any job starts).
STATUS_UPDATE_S = 2.0


def parse_file_size(size: str | int | None) -> int | None:
    """A size as launch(max_file_size=...) takes it ("50mb", "1 gb", a number of bytes, None) in bytes, exactly
    as Gradio reads it, so RequestGuard's cap and Gradio's own agree."""
    return gr.utils._parse_file_size(size)


def quiet_queue(app: gr.Blocks) -> None:
    """Gradio's queue without the per-event work a labelling server does not use (gradio/queueing.py): queue
    positions every STATUS_UPDATE_S instead of to every waiting client at each job start (20 annotators: ~19 SSE
    messages per label), and no monitoring summary, which Gradio rebuilds after every event as a pandas
    DataFrame of the last 10,000 events (2-8 ms of CPU per label, growing with uptime).
    Measured with bench/annotators.py: server CPU per label 15 -> 10 ms."""
    app.queue(status_update_rate=STATUS_UPDATE_S)
    queue = app._queue
    queue.ANAYLTICS_CACHE_FREQUENCY = sys.maxsize  # sic: Gradio's spelling; the cached (empty) summary is kept
    queue.ANALYTICS_MAX_EVENTS = 1


def skip_missing_matplotlib() -> bool:
    """Without matplotlib installed, Gradio's per-event MatplotlibBackendMananger does nothing but try to import
    it twice per event (entering and leaving, gradio/route_utils.py call_process_api), a failed search of every
    sys.path entry each time: 2-3% of the server's CPU per label (py-spy, 20 annotators). Then it is swapped for
    a context manager that does nothing, as Gradio's does in that case; True when swapped. Process-wide: every
    Gradio app of this process gets it, which is harmless as the swapped class does nothing here either."""
    if importlib.util.find_spec("matplotlib") is not None:
        return False
    gradio.utils.MatplotlibBackendMananger = contextlib.nullcontext  # sic: Gradio's spelling
    return True


def replace_session_tokens(server, make_store: Callable[[list[tuple[str, str]]], dict]) -> dict:
    """Swap the running server's session dict (App.tokens: cookie token -> username) for make_store(the sessions
    so far) and return it. Gradio's app setup resets `tokens` to a plain dict, so this runs once the server is
    up; a login in the moment since then is carried over by passing the sessions it holds."""
    server.tokens = make_store(list(server.tokens.items()))
    return server.tokens


_PROXY_ENV = "FORWARDED_ALLOW_IPS"
_PROXY_ENV_LOCK = threading.Lock()


@contextlib.contextmanager
def trusted_proxies(addresses: tuple[str, ...]):
    """Within the block, a Gradio launch makes uvicorn believe X-Forwarded-For / X-Forwarded-Proto only from
    `addresses` (none: from nobody). Gradio gives uvicorn no forwarded_allow_ips, so uvicorn trusted them from
    127.0.0.1 and ::1: any local process, or a proxy an admin did not name, could pose as any client address
    (seven wrong passwords with `X-Forwarded-For: 127.0.0.77` locked out the owner at 127.0.0.77). uvicorn reads
    the environment variable once, when Gradio builds its Config during launch, so it is set only for that
    moment (under a lock: two launches at once would otherwise see each other's value)."""
    with _PROXY_ENV_LOCK:
        before = os.environ.get(_PROXY_ENV)
        os.environ[_PROXY_ENV] = ",".join(addresses)
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(_PROXY_ENV, None)
            else:
                os.environ[_PROXY_ENV] = before


def trusted_proxies_of(app: gr.Blocks) -> list[str]:
    """The proxies the running server's uvicorn trusts (its Config.forwarded_allow_ips), as a list; launch checks
    it against what it asked for, so a Gradio that passes its own value fails loudly instead of trusting more."""
    value = app.server.config.forwarded_allow_ips
    items = value.split(",") if isinstance(value, str) else list(value)
    return [item.strip() for item in items if item.strip()]
# Events that run by themselves (a tab select, a timer): no progress of any kind on their outputs. Gradio 6.31
# still draws a timer ("0.1s") in each output of a show_progress="hidden" event while it runs; with no
# show_progress_on component there is none (its front end draws progress on show_progress_on, else the outputs).
QUIET = {"show_progress": "hidden", "show_progress_on": []}
