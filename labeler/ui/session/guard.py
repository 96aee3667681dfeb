"""`RequestGuard`: the ASGI middleware in front of every route of the app (origins, body sizes, uploads, logout,
the login cookie, the deactivated-account page).

Gradio's CORS middleware echoes any Origin with credentials when the host is not localhost, and its login cookie
is `SameSite=None`: the guard refuses foreign origins (403) and rewrites the cookie to Lax (cookies.py). A user
whose session ended because an admin deactivated them got a bare login form (or, within the epoch recheck, red
Error badges) on reload: the guard answers the page with "account deactivated". A non-admin's request naming a
file by URL (a FileData whose path is http://...) is refused before Gradio fetches it. It also hands the login a
device id (DEVICE_COOKIE, for login_guard's known clients) and puts LOGIN_SCRIPT in the page, so that the login
form says why a login was refused (login_page.py); bodies.py reads a body ahead for the URL check.
"""
from __future__ import annotations

import functools
import html
from typing import Iterable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import HTTPConnection
from starlette.responses import HTMLResponse, PlainTextResponse

from labeler.services.data import accounts
from labeler.ui.session.bodies import file_urls, read_body, replay
from labeler.ui.session.cookies import lax_cookies
from labeler.ui.session.handoff import CLIENT_ADDRESS
from labeler.ui.session.login_page import with_device, with_login_script
from labeler.ui.session.store import SessionStore
from labeler.ui.session.web_db import web_db

API_BODY_LIMIT = 1_000_000  # bytes of any request but an upload: a labelling event is a few kB
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


def origin_of(value: str) -> str | None:
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
        self.allowed = {origin for origin in (origin_of(o) for o in allowed_origins) if origin}
        self.max_body_bytes, self.max_upload_bytes, self.max_upload_files = (
            max_body_bytes, max_upload_bytes, max_upload_files)

    def origin_allowed(self, origin: str, host: str | None) -> bool:
        normalised = origin_of(origin)
        if normalised is None:
            return False  # "null": sandboxed frames and file:// pages, a classic CSRF vector
        if normalised in self.allowed:
            return True
        return host is not None and urlsplit(normalised).netloc == host.strip().lower()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
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
        if scope["type"] == "http" and is_logout(scope):
            if scope.get("method") != "POST":
                await PlainTextResponse("Log out with POST (the Log out button).", status_code=405,
                                        headers={"Allow": "POST"})(scope, receive, send)
                return
            scope = {**scope, "method": "GET"}  # Gradio's own logout route, which is a GET
        if scope["type"] == "http" and scope.get("method") == "GET" and await self._deactivated_page(scope, receive, send):
            return
        if scope["type"] == "http" and scope.get("method") == "GET" and is_page(scope):
            send = with_login_script(send)
        client = scope.get("client")
        CLIENT_ADDRESS.set(client[0] if client else None)
        if scope["type"] == "http":
            send = functools.partial(lax_cookies, send, scope.get("scheme") == "https")
            if is_route(scope, "login"):
                send = with_device(scope, send)
            if scope.get("method") not in ("GET", "HEAD", "OPTIONS"):
                await self._limited(scope, receive, send, headers)
                return
        await self.app(scope, receive, send)

    async def _limited(self, scope, receive, send, headers) -> None:
        """Run the app with the request body capped (and an upload refused to non-admins): 413 / 403 before a
        byte is read when the headers say enough, else 413 as soon as the body passes its limit."""
        content_type = headers.get("content-type", "")
        # The login form is multipart too (the browser's FormData): a login, not an upload.
        upload = content_type.lower().startswith("multipart/") and not is_route(scope, "login")
        boundary = multipart_boundary(content_type) if upload else None
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
        if not upload and not is_route(scope, "login"):
            # Read here (it is at most `limit`), so that a file given by URL is refused before Gradio fetches it.
            body = await read_body(receive, limit)
            if body is None:
                await too_large(scope, receive, send)
                return
            if file_urls(body) and not self._is_admin(scope):
                await PlainTextResponse(
                    "A file given by URL is refused: only an admin's request may name a file, by uploading it.",
                    status_code=403)(scope, receive, send)
                return
            receive = replay(body, receive)
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
        store = getattr(scope.get("app"), "tokens", None)
        if store is None:
            return False
        for name, token in HTTPConnection(scope).cookies.items():
            username = store.get(token) if name.startswith("access-token") else None
            if not username:
                continue
            try:
                db = web_db(store.db_path) if isinstance(store, SessionStore) else None
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


def outside_cors(server) -> bool:
    """Move RequestGuard in front of Gradio's CORS middleware (gradio.route_utils.CustomCORSMiddleware), which
    Gradio adds around the app's own middleware: it stamped `Access-Control-Allow-Origin: <origin>` on the guard's
    403 for a refused origin (whenever the Host is not localhost). In front, a refused request never reaches it,
    and it answers only for origins the guard let through. It stays behind Gradio's compression (the guard puts
    the login script in the page before compression). Starlette builds the stack at the first request (Gradio's
    launch makes one), so it is built again at the next; True when moved."""
    from gradio.route_utils import CustomCORSMiddleware

    stack = server.user_middleware
    guard = next((m for m in stack if m.cls is RequestGuard), None)
    if guard is None or not any(m.cls is CustomCORSMiddleware for m in stack):
        return False
    stack.remove(guard)
    stack.insert(next(i for i, m in enumerate(stack) if m.cls is CustomCORSMiddleware), guard)
    server.middleware_stack = None
    return True


def is_route(scope, name: str) -> bool:
    """Whether the request is for Gradio's own /<name> route (under a --root-path too)."""
    root = (scope.get("root_path") or "").rstrip("/")
    return scope.get("path", "").rstrip("/") in (f"/{name}", f"{root}/{name}")


def is_page(scope) -> bool:
    """Whether the request is for the app's page (the login form when not logged in)."""
    root = (scope.get("root_path") or "").rstrip("/")
    return scope.get("path", "").rstrip("/") in ("", root)


def is_logout(scope) -> bool:
    return is_route(scope, "logout")


def multipart_boundary(content_type: str) -> bytes | None:
    for part in content_type.split(";")[1:]:
        key, _, value = part.strip().partition("=")
        if key.lower() == "boundary" and value.strip('"'):
            return value.strip('"').encode("latin-1", errors="replace")
    return None
