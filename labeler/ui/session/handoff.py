"""What the login's parts hand each other within one request, since Gradio gives each only part of it: context
variables, so that concurrent requests never see each other's values."""
from __future__ import annotations

import contextvars

# The client address of the request being handled, set by RequestGuard for the auth coroutine (Gradio passes
# the auth callable only the username and password).
CLIENT_ADDRESS: contextvars.ContextVar[str | None] = contextvars.ContextVar("rlhf_studio_client", default=None)
# (username, session epoch) of a login that just succeeded, read by SessionStore when Gradio stores the new
# token in the same request (`app.tokens[token] = username` right after `await auth(...)`).
LOGIN_EPOCH: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar("rlhf_studio_login", default=None)
# The browser's device id (RequestGuard's DEVICE_COOKIE) on a login request, None without one: login_guard lets
# a device that logged in to an account before past the strangers guessing at it (OWASP's device cookies).
CLIENT_DEVICE: contextvars.ContextVar[str | None] = contextvars.ContextVar("rlhf_studio_device", default=None)
