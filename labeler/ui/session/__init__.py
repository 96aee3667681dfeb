"""Login and per-request identity for the Gradio app.

Gradio's built-in login page (launch(auth=callable)) checks the password through `make_auth`'s coroutine;
after that every handler gets the user name from gr.Request and checks the role itself (ui/roles.py), because
any event with an api_name can be called directly, bypassing the buttons.

What Gradio 6.31 does not do and this package adds (see gradio/routes.py and gradio/route_utils.py), one module
per job:
- login.py: a password check that never blocks the event loop, throttles wrong passwords and waits its turn on
  a few worker threads, known clients first (make_auth), and the throttle a handler shares with it
  (login_throttle);
- store.py: session tokens that expire, end with a password change or a deactivation, and outlive a restart in
  the database (SessionStore, name_login_cookie);
- guard.py: the ASGI middleware in front of every route (RequestGuard): foreign origins refused, bodies capped,
  uploads (and files named by URL) for admins only, logout POST-only, the deactivated-account page, the login's
  device cookie and the login page's refusal messages; cookies.py rewrites the login
  cookie it passes on to SameSite=Lax;
- login_page.py: the login's device cookie and the login page's script; bodies.py: a body read ahead;
- decorators.py: page-load handler decorators (quiet_before_password_change, quiet_on_load);
- handoff.py (what those parts hand each other within a request) and web_db.py (the request path's database
  connection).
The public names are importable from labeler.ui.session, as callers do.
"""
from labeler.ui.session.decorators import quiet_before_password_change, quiet_on_load
from labeler.ui.session.guard import API_BODY_LIMIT, DEACTIVATED_PAGE, LOGOUT_JS, RequestGuard, outside_cors
from labeler.ui.session.handoff import CLIENT_ADDRESS, CLIENT_DEVICE
from labeler.ui.session.login_page import DEVICE_COOKIE
from labeler.ui.session.login import (
    AUTH_QUEUE, AUTH_WAIT_S, AUTH_WORKERS, BUSY_MESSAGE, DEACTIVATED_MESSAGE, CheckQueue, login_throttle, make_auth,
)
from labeler.ui.session.store import ENDED_KEEP, SessionStore, name_login_cookie
from labeler.ui.session.web_db import DB_WAIT_MS

__all__ = [
    "API_BODY_LIMIT", "AUTH_QUEUE", "AUTH_WAIT_S", "AUTH_WORKERS", "BUSY_MESSAGE", "CLIENT_ADDRESS", "CLIENT_DEVICE",
    "CheckQueue", "DB_WAIT_MS", "DEACTIVATED_MESSAGE", "DEACTIVATED_PAGE", "DEVICE_COOKIE", "ENDED_KEEP", "LOGOUT_JS", "RequestGuard", "SessionStore",
    "name_login_cookie", "outside_cors",
    "login_throttle", "make_auth",
    "quiet_before_password_change", "quiet_on_load",
]
