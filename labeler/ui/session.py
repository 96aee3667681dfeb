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
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, Iterable
from urllib.parse import urlsplit

import gradio as gr

from labeler.services.errors import InputError, PermissionDenied
from labeler.services.login_guard import LoginThrottle, Throttled
from storage import open_db
from storage.db import DiskFull, is_disk_full

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
<form method="post" action="logout"><button type="submit">Log in with another account</button></form></div></body></html>"""
# Logging out is a POST (RequestGuard refuses GET /logout): a link or an image on another site cannot end a
# user's sessions. The Log out button and the password change submit this form; a relative action keeps a
# --root-path in the URL.
LOGOUT_JS = ("() => { const form = document.createElement('form'); form.method = 'post'; form.action = 'logout';"
             " document.body.appendChild(form); form.submit(); }")
API_BODY_LIMIT = 1_000_000  # bytes of any request but an upload: a labelling event is a few kB


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
        # Admitted in one step with the check, before the password is checked (login_guard): parallel guesses
        # cannot all pass the check before the first is counted.
        wait = throttle.acquire(username, address)
        if wait > 0:
            refused = Throttled(wait)
            raise HTTPException(status_code=429, detail=str(refused),
                                headers={"Retry-After": str(refused.retry_after)})
        with in_flight_lock:
            busy = in_flight[0] >= workers + AUTH_QUEUE
            if not busy:
                in_flight[0] += 1
        if busy:
            throttle.cancelled(username, address)  # never checked: counts for nothing
            raise HTTPException(status_code=503, detail=BUSY_MESSAGE, headers={"Retry-After": "2"})
        def resolve(done) -> None:
            """Ends the admitted attempt when its check ends, also one that outlived `wait_s` (its answer is never
            given, but a wrong password still counts: a guess that times out on purpose must not be free)."""
            try:
                epoch = done.result()
            except Exception:  # noqa: BLE001 - never checked
                throttle.cancelled(username, address)
                return
            (throttle.failed if epoch is None else throttle.succeeded)(username, address)

        future = pool.submit(check, username, password)
        future.add_done_callback(finished)
        future.add_done_callback(resolve)
        try:
            # shield: a timed-out check finishes in its thread (and is forgotten) instead of being cancelled.
            epoch = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), wait_s)
        except asyncio.TimeoutError:
            raise HTTPException(status_code=503, detail=BUSY_MESSAGE, headers={"Retry-After": "2"}) from None
        except Exception as error:  # noqa: BLE001 - a broken database must not look like a wrong password
            raise HTTPException(status_code=503, detail=f"{BUSY_MESSAGE} ({type(error).__name__})") from None
        if epoch is None:
            return False
        _LOGIN_EPOCH.set((username, epoch))
        return True

    auth.throttle = throttle  # the password change shares it (login_throttle)

    return auth


def login_throttle(request: gr.Request | None) -> tuple[LoginThrottle | None, str | None]:
    """(the server's login throttle, the client's address) for a handler's request: the password change counts
    wrong current passwords with the login form's throttle (make_auth hangs it on the auth coroutine, which
    Gradio keeps as `app.auth`). (None, None) outside a running server."""
    inner = getattr(request, "request", None) if request is not None else None
    app = getattr(inner, "app", None)
    client = getattr(inner, "client", None)
    return getattr(getattr(app, "auth", None), "throttle", None), getattr(client, "host", None)


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
    """ASGI middleware, in front of every route: refuses cross-site requests, caps request bodies, keeps uploads
    to admins, makes logout POST-only, makes the login cookie SameSite=Lax (and leaves out its plain-HTTP twin
    over TLS), and tells the auth coroutine the client's address.

    A request with an Origin header is let through only when that origin is this server (its host:port
    equals the Host header, as for a page the server itself served) or is listed in `allowed_origins`
    (`serve --allowed-origin https://studio.example.org`, e.g. behind a proxy that rewrites Host).
    Requests without Origin (gradio_client, curl, same-origin GETs) are not cross-site requests a browser
    could be tricked into sending with credentials, so they pass.

    Bodies are limited before anything reads them (Gradio parsed a 40 MB JSON before its login check): over
    `max_body_bytes` (a declared Content-Length at once, a chunked body as it arrives) is answered 413. A
    multipart body other than the login form's is an upload: only an admin's (their login cookie, checked
    without reading the body), at most `max_upload_files` parts of `max_upload_bytes` each.
    """

    def __init__(self, app, allowed_origins: Iterable[str] = (), max_body_bytes: int = API_BODY_LIMIT,
                 max_upload_bytes: int = 50_000_000, max_upload_files: int = 1):
        self.app = app
        self.allowed = {origin for origin in (_origin_of(o) for o in allowed_origins) if origin}
        self.max_body_bytes, self.max_upload_bytes, self.max_upload_files = (
            max_body_bytes, max_upload_bytes, max_upload_files)

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
        if scope["type"] == "http" and _is_logout(scope):
            if scope.get("method") != "POST":
                await PlainTextResponse("Log out with POST (the Log out button).", status_code=405,
                                        headers={"Allow": "POST"})(scope, receive, send)
                return
            scope = {**scope, "method": "GET"}  # Gradio's own logout route, which is a GET
        if scope["type"] == "http" and scope.get("method") == "GET" and await self._deactivated_page(scope, receive, send):
            return
        client = scope.get("client")
        CLIENT_ADDRESS.set(client[0] if client else None)
        if scope["type"] == "http":
            send = functools.partial(_lax_cookies, send, scope.get("scheme") == "https")
            if scope.get("method") not in ("GET", "HEAD", "OPTIONS"):
                await self._limited(scope, receive, send, headers)
                return
        await self.app(scope, receive, send)

    async def _limited(self, scope, receive, send, headers) -> None:
        """Run the app with the request body capped (and an upload refused to non-admins): 413 / 403 before a
        byte is read when the headers say enough, else 413 as soon as the body passes its limit."""
        from starlette.responses import PlainTextResponse

        content_type = headers.get("content-type", "")
        # The login form is multipart too (the browser's FormData): a login, not an upload.
        upload = content_type.lower().startswith("multipart/") and not _is_route(scope, "login")
        boundary = _multipart_boundary(content_type) if upload else None
        if upload:
            if not self._is_admin(scope):
                await PlainTextResponse("Uploads are for admins only.", status_code=403)(scope, receive, send)
                return
            # Each part's own headers and the delimiters: a few hundred bytes a part; 64 kB is plenty.
            limit = self.max_upload_bytes * self.max_upload_files + 65_536
            what = f"an upload: at most {self.max_upload_files} file(s) of {self.max_upload_bytes:,} bytes"
        else:
            limit, what = self.max_body_bytes, f"a request: at most {self.max_body_bytes:,} bytes"
        too_large = PlainTextResponse(f"Request body too large for {what}.", status_code=413)
        declared = headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await too_large(scope, receive, send)
            return
        counted = {"bytes": 0, "parts": 0, "tail": b""}
        delimiter = b"--" + boundary if boundary else None
        state = {"started": False, "refused": False}

        def over_limit(body: bytes) -> bool:
            counted["bytes"] += len(body)
            if counted["bytes"] > limit:
                return True
            if delimiter is None:
                return False
            window = counted["tail"] + body
            counted["parts"] += window.count(delimiter) - counted["tail"].count(delimiter)
            counted["tail"] = window[-(len(delimiter) - 1):] if len(delimiter) > 1 else b""
            return counted["parts"] - 1 > self.max_upload_files  # n parts: n + 1 delimiters (the last closes)

        async def limited_receive():
            if state["refused"]:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request" and over_limit(message.get("body", b"")):
                # Answered here, and the app told the client went away: FastAPI turns an error raised while it
                # reads the body into its own 400, so raising would not reach the client as a 413.
                state["refused"] = True
                if not state["started"]:
                    state["started"] = True
                    await too_large(scope, receive, send)
                return {"type": "http.disconnect"}
            return message

        async def tracked_send(message):
            if state["refused"]:
                return  # the 413 was sent; whatever the app answers to a vanished client goes nowhere
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracked_send)
        except Exception:
            if not state["refused"]:
                raise

    @staticmethod
    def _is_admin(scope) -> bool:
        """Whether the request carries the login cookie of an active admin (SessionStore and the users table;
        nothing of the body is read)."""
        from starlette.requests import HTTPConnection

        from labeler.services import accounts

        store = getattr(scope.get("app"), "tokens", None)
        if store is None:
            return False
        for name, token in HTTPConnection(scope).cookies.items():
            username = store.get(token) if name.startswith("access-token") else None
            if not username:
                continue
            try:
                db = _web_db(store.db_path) if isinstance(store, SessionStore) else None
            except Exception:  # noqa: BLE001 - unreadable for a moment: refused, the admin retries
                return False
            if db is None:
                return False
            try:
                user = accounts.get_user(db, username)
            finally:
                db.conn.close()
            return user is not None and user.active and user.is_admin
        return False

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


def _is_route(scope, name: str) -> bool:
    """Whether the request is for Gradio's own /<name> route (under a --root-path too)."""
    root = (scope.get("root_path") or "").rstrip("/")
    return scope.get("path", "").rstrip("/") in (f"/{name}", f"{root}/{name}")


def _is_logout(scope) -> bool:
    return _is_route(scope, "logout")


def _multipart_boundary(content_type: str) -> bytes | None:
    for part in content_type.split(";")[1:]:
        key, _, value = part.strip().partition("=")
        if key.lower() == "boundary" and value.strip('"'):
            return value.strip('"').encode("latin-1", errors="replace")
    return None


async def _lax_cookies(send, tls: bool, message) -> None:
    """Rewrite `SameSite=None` (Gradio's login cookie) to `SameSite=Lax`: a cross-site request then carries
    no login, while following a link to the app from elsewhere still does. Over TLS, leave out the
    `access-token-unsecure-` twin Gradio sets without `Secure` for plain-HTTP servers: over HTTPS the browser
    has the Secure one, and the twin would also travel over any plain-HTTP request to the same host."""
    if message["type"] == "http.response.start":
        headers = []
        for name, value in message.get("headers", []):
            if name.lower() == b"set-cookie":
                if tls and value.startswith(b"access-token-unsecure-") and b"Max-Age=0" not in value:
                    continue
                value = value.replace(b"SameSite=none", b"SameSite=lax").replace(b"SameSite=None", b"SameSite=lax")
            headers.append((name, value))
        message = {**message, "headers": headers}
    await send(message)


def ui_errors(handler: Callable[..., Any]) -> Callable[..., Any]:
    """Show InputError / PermissionDenied as a red toast (gr.Error) with the service's own message.

    Handlers use labeler.ui.soft_errors.ui_errors, which wraps this one and logs a refusal as one line instead
    of the traceback Gradio prints for every gr.Error (a user's mistake is not the server's).
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
        except (DiskFull, sqlite3.OperationalError) as error:
            # A full disk said so, instead of Gradio's "upstream app has raised an exception"; any
            # other database error stays an unexpected one.
            if not isinstance(error, DiskFull) and not is_disk_full(error):
                raise
            raise gr.Error(f"{DiskFull()}", title="Disk full") from error

    return wrapper





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
