"""The password check behind Gradio's login form (`make_auth`), and the login throttle a handler shares with it
(`login_throttle`).

Gradio's `POST /login` is an async route that calls a plain auth function on the event loop, so a slow password
check froze every request: `make_auth` returns a coroutine function that throttles wrong passwords
(login_guard) and runs the scrypt check in a small thread pool with a bounded wait, answering 503 "busy, retry"
instead of hanging.
"""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Awaitable, Callable

import gradio as gr
from fastapi import HTTPException

from labeler.services import accounts
from labeler.services.login_guard import LoginThrottle, Throttled
from labeler.ui.session.handoff import CLIENT_ADDRESS, LOGIN_EPOCH
from labeler.ui.session.web_db import web_db

AUTH_WAIT_S = 1.5  # longest a login waits for its password check before answering "busy, retry"
AUTH_WORKERS = 2  # scrypt checks at once (16 MiB and ~50 ms each): more would only slow every other request
AUTH_QUEUE = 8  # checks waiting beyond the workers before new logins are told "busy" at once
BUSY_MESSAGE = "The server is busy; retry the login in a few seconds."


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
    throttle = throttle or LoginThrottle()
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rlhf-studio-login")
    in_flight = [0]
    in_flight_lock = threading.Lock()

    def check(username: str, password: str) -> int | None:
        db = web_db(db_path)
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
        LOGIN_EPOCH.set((username, epoch))
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
