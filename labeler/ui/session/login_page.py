"""What the guard adds to the login: a device id per browser (DEVICE_COOKIE, for login_guard's known clients) and
the script that makes the login form say why a login was refused (LOGIN_SCRIPT)."""
from __future__ import annotations

import re
import secrets
from pathlib import Path

from starlette.requests import HTTPConnection

from labeler.ui.session.handoff import CLIENT_DEVICE

# A random id per browser, set by the login form's answer: a device that logged in to an account before gets
# its own lane past strangers guessing at that account (login_guard). It proves nothing by itself (the server
# remembers which ids logged in where, in memory), so it is neither signed nor secret beyond HttpOnly.
DEVICE_COOKIE = "rlhf-studio-device"
DEVICE_PATTERN = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
DEVICE_MAX_AGE_S = 365 * 86400
# Added to the app's page: the login form then shows why a login was refused (429 locked out, 403 deactivated,
# 503 busy), where Gradio's own form shows nothing but "Incorrect Credentials" for a wrong password.
LOGIN_SCRIPT = b"<script>" + (Path(__file__).parents[1] / "static" / "login.js").read_bytes() + b"</script>"


def with_device(scope, send):
    """Tell the auth coroutine this browser's device id (CLIENT_DEVICE), and give a browser without one a new
    id with the login form's answer."""
    device = HTTPConnection(scope).cookies.get(DEVICE_COOKIE, "")
    if DEVICE_PATTERN.match(device):
        CLIENT_DEVICE.set(device)
        return send
    CLIENT_DEVICE.set(None)
    path = (scope.get("root_path") or "").rstrip("/") or "/"
    secure = "; Secure" if scope.get("scheme") == "https" else ""
    cookie = (f"{DEVICE_COOKIE}={secrets.token_urlsafe(16)}; Path={path}; Max-Age={DEVICE_MAX_AGE_S}; "
              f"HttpOnly; SameSite=Lax{secure}").encode("latin-1")

    async def send_with_device(message):
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie)]}
        await send(message)

    return send_with_device


def with_login_script(send):
    """`send` for the app's page with LOGIN_SCRIPT in its <head>. The body is held until its last part so that
    the new length is known (the page is a few kB)."""
    page: dict = {"start": None, "chunks": []}

    async def send_page(message) -> None:
        if message["type"] == "http.response.start":
            headers = message.get("headers", [])
            if any(k.lower() == b"content-type" and v.startswith(b"text/html") for k, v in headers):
                page["start"] = message
                return
        if page["start"] is None or message["type"] != "http.response.body":
            await send(message)
            return
        page["chunks"].append(message.get("body", b""))
        if message.get("more_body"):
            return
        body = b"".join(page["chunks"]).replace(b"</head>", LOGIN_SCRIPT + b"</head>", 1)
        headers = [(k, v) for k, v in page["start"].get("headers", []) if k.lower() != b"content-length"]
        await send({**page["start"], "headers": [*headers, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    return send_page
