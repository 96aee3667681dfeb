"""Login and per-request identity for the Gradio app.

Gradio's built-in login page (launch(auth=callable)) checks the password through `make_auth`'s coroutine;
after that every handler gets the user name from gr.Request and checks the role itself, because any event
with an api_name can be called directly, bypassing the buttons.

What Gradio 6.31 does not do and this module adds (see gradio/routes.py and gradio/route_utils.py):
- its `POST /login` is an async route that calls a plain auth function on the event loop, so a slow
  password check froze every request: `make_auth` returns a coroutine function that throttles wrong
  passwords (login_guard) and runs the scrypt check in a small thread pool with a bounded wait, answering
  503 "busy, retry" instead of hanging;
- its session tokens (`App.tokens`, token -> username) never expire and survive a password change:
  `SessionStore` replaces that dict and checks each token's age and the user's session epoch;
- its CORS middleware echoes any Origin with credentials when the host is not localhost, and its login
  cookie is `SameSite=None`: `RequestGuard` refuses foreign origins (403) and rewrites the cookie to Lax;
- a user whose session ended because an admin deactivated them got a bare login form (or, within the
  epoch recheck, red Error badges) on reload: `RequestGuard` answers the page with "account deactivated".
"""
from __future__ import annotations

import asyncio
import contextvars
import functools
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, Iterable
from urllib.parse import urlsplit

import gradio as gr

from labeler.services.errors import InputError, PermissionDenied
from labeler.services.login_guard import LoginThrottle
from storage import open_db

# The client address of the request being handled, set by RequestGuard for the auth coroutine (Gradio passes
# the auth callable only the username and password).
CLIENT_ADDRESS: contextvars.ContextVar[str | None] = contextvars.ContextVar("rlhf_studio_client", default=None)
# (username, session epoch) of a login that just succeeded, read by SessionStore when Gradio stores the new
# token in the same request (`app.tokens[token] = username` right after `await auth(...)`).
_LOGIN_EPOCH: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar("rlhf_studio_login", default=None)

AUTH_WAIT_S = 1.5  # longest a login waits for its password check before answering "busy, retry"
AUTH_WORKERS = 2  # scrypt checks at once (16 MiB and ~50 ms each): more would only slow every other request
AUTH_QUEUE = 8  # checks waiting beyond the workers before new logins are told "busy" at once
DB_WAIT_MS = 1000  # the login's and session check's busy timeout: they only read, so this is a safety net
BUSY_MESSAGE = "The server is busy; retry the login in a few seconds."
ENDED_KEEP = 1000  # tokens of ended sessions remembered, to tell a deactivated user why their page is gone
DEACTIVATED_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>RLHF Studio: account deactivated</title>
<style>body{{font-family:system-ui,sans-serif;max-width:36em;margin:4em auto;padding:0 1em;line-height:1.5}}</style></head>
<body><h1>RLHF Studio</h1><div id="studio-deactivated"><p><b>Account deactivated.</b> The account <b>{username}</b> was
deactivated by an admin, so this browser was logged out. The labels it made are kept.</p>
<p>Ask an admin to reactivate it (Admin &gt; Users, or <code>rlhf-studio users activate {username}</code>).</p>
<p><a href="logout">Log in with another account</a></p></div></body></html>"""


def _web_db(db_path: str):
    """A connection for the web request path: never creates a database, never migrates (serve did)."""
    return open_db(db_path, migrate=False, create=False, busy_timeout_ms=DB_WAIT_MS)


def make_auth(
    db_path: str,
    throttle: LoginThrottle | None = None,
    wait_s: float = AUTH_WAIT_S,
    workers: int = AUTH_WORKERS,
) -> Callable[[str, str], Awaitable[bool]]:
    """The coroutine Gradio's login form awaits: True for an active user with the right password.

    Raises HTTP 429 (with Retry-After) while the account or the client address is throttled, and HTTP 503
    when the check cannot finish within `wait_s` (the database or the CPU is busy). A plain `async def`
    on purpose: Gradio awaits the callable only if inspect.iscoroutinefunction says so; an object with an
    async __call__ would be called without await and its coroutine taken as a truthy "yes".
    """
    from fastapi import HTTPException

    throttle = throttle or LoginThrottle()
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rlhf-studio-login")
    in_flight = [0]
    in_flight_lock = threading.Lock()

    def check(username: str, password: str) -> int | None:
        from labeler.services import accounts

        db = _web_db(db_path)
        try:
            user = accounts.authenticate(db, username, password)
        finally:
            db.conn.close()
        return None if user is None else user.session_epoch

    def finished(_future) -> None:
        with in_flight_lock:
            in_flight[0] -= 1

    async def auth(username: str, password: str) -> bool:
        address = CLIENT_ADDRESS.get()
        wait = throttle.retry_after(username, address)
        if wait > 0:
            seconds = math.ceil(wait)
            raise HTTPException(
                status_code=429,
                detail=f"Too many wrong passwords: try again in {seconds} s.",
                headers={"Retry-After": str(seconds)},
            )
        with in_flight_lock:
            if in_flight[0] >= workers + AUTH_QUEUE:
                raise HTTPException(status_code=503, detail=BUSY_MESSAGE, headers={"Retry-After": "2"})
            in_flight[0] += 1
        future = pool.submit(check, username, password)
        future.add_done_callback(finished)
        try:
            # shield: a timed-out check finishes in its thread (and is forgotten) instead of being cancelled.
            epoch = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), wait_s)
        except asyncio.TimeoutError:
            raise HTTPException(status_code=503, detail=BUSY_MESSAGE, headers={"Retry-After": "2"}) from None
        except Exception as error:  # noqa: BLE001 - a broken database must not look like a wrong password
            raise HTTPException(status_code=503, detail=f"{BUSY_MESSAGE} ({type(error).__name__})") from None
        if epoch is None:
            throttle.record_failure(username, address)
            return False
        throttle.record_success(username, address)
        _LOGIN_EPOCH.set((username, epoch))
        return True

    return auth


class SessionStore(dict):
    """Gradio's `App.tokens` (cookie token -> username) with an issue time and a session epoch per token.

    A token is valid while it is younger than `max_age_s` and its user is active with the epoch the token
    was issued under (accounts.set_password and deactivation bump it). Gradio reads tokens through
    `tokens.get(token)` for every request and `token in tokens` on logout, so those two check; plain
    indexing stays raw so Gradio's logout loop can delete whatever it finds. The user's epoch is read from
    the database at most once per `recheck_s` per user, so the check costs the event loop almost nothing.
    """

    def __init__(
        self,
        db_path: str,
        max_age_s: float,
        recheck_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        initial: Iterable[tuple[str, str]] = (),
    ):
        super().__init__()
        self.db_path, self.max_age_s, self.recheck_s, self._clock = db_path, max_age_s, recheck_s, clock
        self._issued: dict[str, tuple[float, int | None]] = {}
        self._ended: dict[str, str] = {}  # token -> username of sessions found invalid, newest last (ENDED_KEEP)
        self._epochs: dict[str, tuple[float, int | None]] = {}  # username -> (checked at, epoch)
        self._lock = threading.Lock()
        for token, username in initial:
            self[token] = username

    def _epoch(self, username: str, fresh: bool = False) -> int | None:
        from labeler.services import accounts

        now = self._clock()
        cached = self._epochs.get(username)
        if cached is not None and not fresh and now - cached[0] < self.recheck_s:
            return cached[1]
        try:
            db = _web_db(self.db_path)
            try:
                epoch = accounts.session_epoch(db, username)
            finally:
                db.conn.close()
        except Exception:  # noqa: BLE001 - unreadable for a moment: keep the last answer, else refuse
            return cached[1] if cached is not None else None
        self._epochs[username] = (now, epoch)
        return epoch

    def __setitem__(self, token: str, username: str) -> None:
        pending = _LOGIN_EPOCH.get()
        epoch = pending[1] if pending is not None and pending[0] == username else self._epoch(username, fresh=True)
        with self._lock:
            self._issued[token] = (self._clock(), epoch)
            super().__setitem__(token, username)

    def __delitem__(self, token: str) -> None:
        with self._lock:
            self._issued.pop(token, None)
            super().__delitem__(token)

    def _valid(self, token: str) -> bool:
        issued_at, epoch = self._issued.get(token, (float("-inf"), None))
        if self._clock() - issued_at > self.max_age_s:
            return False
        return epoch is not None and self._epoch(dict.__getitem__(self, token)) == epoch

    def __contains__(self, token: object) -> bool:
        if not dict.__contains__(self, token):
            return False
        if self._valid(token):  # type: ignore[arg-type]
            return True
        with self._lock:
            self._ended[token] = dict.get(self, token)  # type: ignore[index]
            while len(self._ended) > ENDED_KEEP:
                self._ended.pop(next(iter(self._ended)))
        self.pop(token, None)
        self._issued.pop(token, None)  # type: ignore[arg-type]
        return False

    def get(self, token: Any, default: Any = None) -> Any:
        return dict.get(self, token, default) if token is not None and token in self else default

    def deactivated_user(self, token: str | None) -> str | None:
        """The user name when `token` belongs to a session that ended because its user is deactivated now; else
        None (a valid token, an unknown one, or a session that ended for another reason)."""
        from labeler.services import accounts

        if not token:
            return None
        known = dict.get(self, token)
        if known is not None:
            self._epoch(known, fresh=True)  # a page load: no grace of recheck_s for a deactivation just made
        if token in self or token not in self._ended:
            return None
        username = self._ended[token]
        try:
            db = _web_db(self.db_path)
            try:
                user = accounts.get_user(db, username)
            finally:
                db.conn.close()
        except Exception:  # noqa: BLE001 - unreadable for a moment: the plain login page is shown
            return None
        return username if user is not None and not user.active else None


def _origin_of(value: str) -> str | None:
    """'scheme://host[:port]' in lower case, or None for 'null' and anything unparsable."""
    parts = urlsplit(value.strip())
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


class RequestGuard:
    """ASGI middleware: refuses cross-site requests, makes the login cookie SameSite=Lax, and tells the
    auth coroutine the client's address.

    A request with an Origin header is let through only when that origin is this server (its host:port
    equals the Host header, as for a page the server itself served) or is listed in `allowed_origins`
    (`serve --allowed-origin https://studio.example.org`, e.g. behind a proxy that rewrites Host).
    Requests without Origin (gradio_client, curl, same-origin GETs) are not cross-site requests a browser
    could be tricked into sending with credentials, so they pass.
    """

    def __init__(self, app, allowed_origins: Iterable[str] = ()):
        self.app = app
        self.allowed = {origin for origin in (_origin_of(o) for o in allowed_origins) if origin}

    def origin_allowed(self, origin: str, host: str | None) -> bool:
        normalised = _origin_of(origin)
        if normalised is None:
            return False  # "null": sandboxed frames and file:// pages, a classic CSRF vector
        if normalised in self.allowed:
            return True
        return host is not None and urlsplit(normalised).netloc == host.strip().lower()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        from starlette.datastructures import Headers
        from starlette.responses import PlainTextResponse

        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if origin is not None and not self.origin_allowed(origin, headers.get("host")):
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            else:
                response = PlainTextResponse(
                    f"Cross-origin request refused: origin {origin[:100]!r} is not this server"
                    " (an admin can allow it with `rlhf-studio serve --allowed-origin`).",
                    status_code=403,
                )
                await response(scope, receive, send)
            return
        if scope["type"] == "http" and scope.get("method") == "GET" and await self._deactivated_page(scope, receive, send):
            return
        client = scope.get("client")
        CLIENT_ADDRESS.set(client[0] if client else None)
        if scope["type"] == "http":
            send = functools.partial(_lax_cookies, send)
        await self.app(scope, receive, send)


    @staticmethod
    async def _deactivated_page(scope, receive, send) -> bool:
        """Answer the app's page with DEACTIVATED_PAGE when the browser's login cookie belongs to a session that
        ended with its user's deactivation; True when it did. Gradio keeps its sessions in `app.tokens` (a
        SessionStore once launched); Starlette puts the app in scope["app"] before any middleware runs."""
        import html

        from starlette.requests import HTTPConnection
        from starlette.responses import HTMLResponse

        root = (scope.get("root_path") or "").rstrip("/")
        store = getattr(scope.get("app"), "tokens", None)
        if scope.get("path", "").rstrip("/") not in ("", root) or not isinstance(store, SessionStore):
            return False
        cookies = HTTPConnection(scope).cookies
        for name, token in cookies.items():
            username = store.deactivated_user(token) if name.startswith("access-token") else None
            if username is not None:
                page = DEACTIVATED_PAGE.format(username=html.escape(username))
                await HTMLResponse(page, status_code=403)(scope, receive, send)
                return True
        return False


async def _lax_cookies(send, message) -> None:
    """Rewrite `SameSite=None` (Gradio's login cookie) to `SameSite=Lax`: a cross-site request then carries
    no login, while following a link to the app from elsewhere still does."""
    if message["type"] == "http.response.start":
        headers = []
        for name, value in message.get("headers", []):
            if name.lower() == b"set-cookie":
                value = value.replace(b"SameSite=none", b"SameSite=lax").replace(b"SameSite=None", b"SameSite=lax")
            headers.append((name, value))
        message = {**message, "headers": headers}
    await send(message)


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


def quiet_before_password_change(handler: Callable[[gr.Request], tuple],
                                 n_outputs: int) -> Callable[[gr.Request], tuple]:
    """A user tab's page-load (or tab-select) handler that changes nothing, instead of a 'Not allowed' toast,
    while the user must first replace a one-time password: the page then shows only that form
    (app.whoami_load), and a click is still refused by the handler itself. Every other error still shows."""
    from labeler.services.accounts import PasswordChangeRequired

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

    def load(request: gr.Request):
        try:
            return handler(request)
        except gr.Error:
            return tuple(gr.update() for _ in range(n_outputs))

    return load
