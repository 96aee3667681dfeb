"""The password check behind Gradio's login form (`make_auth`), and the login throttle a handler shares with it
(`login_throttle`).

Gradio's `POST /login` is an async route that calls a plain auth function on the event loop, so a slow password
check froze every request: `make_auth` returns a coroutine function that throttles wrong passwords
(login_guard) and runs the scrypt check on a few worker threads (`CheckQueue`). A login waits its turn there
(up to AUTH_WAIT_S) instead of being told "busy": with 2 workers, 8 places and a 1.5 s limit, 10 of 20 logins at
once answered 503 at load 7 and all 20 at load 15. Clients that logged in to the account before go first, so a
crowd of strangers' attempts does not delay the owner, and a check whose login gave up waiting never starts.
"""
from __future__ import annotations

import asyncio
import itertools
import os
import queue
import threading
from concurrent.futures import Future
from typing import Any, Awaitable, Callable

import gradio as gr
from fastapi import HTTPException

from labeler.services.data import accounts
from labeler.services.data.login_guard import LoginThrottle, Throttled
from labeler.ui.session.handoff import CLIENT_ADDRESS, CLIENT_DEVICE, LOGIN_EPOCH
from labeler.ui.session.web_db import web_db

AUTH_WAIT_S = 30.0  # longest a login waits for its password check before answering "busy, retry"
# scrypt checks at once (16 MiB and ~50 ms each; hashlib releases the GIL): one per core, 4 at least (on a
# machine busy with other work, each runnable thread gets its share of the CPU: 20 logins at once at load 9 took
# 8.0 s with 2 workers on 2 cores), 8 at most (128 MiB).
AUTH_WORKERS = min(8, max(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 4))
AUTH_QUEUE = 256  # checks waiting at most before new logins are told "busy" at once (a flood of random names)
BUSY_MESSAGE = "The server is busy; retry the login in a few seconds."
DEACTIVATED_MESSAGE = "This account is deactivated: ask an admin to reactivate it."


class CheckQueue:
    """`workers` threads running password checks, lowest priority number first, then in arrival order. A check
    is a concurrent Future: cancelling one that has not started means it never runs (a login that stopped
    waiting leaves no work behind). The threads start with the first check and live as long as the server."""

    def __init__(self, workers: int, max_waiting: int):
        self.workers, self.max_waiting = workers, max_waiting
        self._queue: queue.PriorityQueue = queue.PriorityQueue()
        self._order = itertools.count()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._open = 0  # submitted and not done

    def submit(self, priority: int, fn: Callable[..., Any], *args) -> Future | None:
        """The check's future, or None when `max_waiting` checks are already waiting (the caller says busy)."""
        with self._lock:
            if self._open >= self.workers + self.max_waiting:
                return None
            self._open += 1
            while len(self._threads) < self.workers:
                thread = threading.Thread(target=self._work, name="rlhf-studio-login", daemon=True)
                thread.start()
                self._threads.append(thread)
        future: Future = Future()
        future.add_done_callback(self._done)
        self._queue.put((priority, next(self._order), future, fn, args))
        return future

    def _done(self, _future) -> None:
        with self._lock:
            self._open -= 1

    def _work(self) -> None:
        while True:
            _, _, future, fn, args = self._queue.get()
            if not future.set_running_or_notify_cancel():
                continue  # its login stopped waiting: never run
            try:
                future.set_result(fn(*args))
            except BaseException as error:  # noqa: BLE001 - handed to the waiting login
                future.set_exception(error)


def _refuse(status: int, detail: str, retry_after: int | None = None) -> HTTPException:
    return HTTPException(status_code=status, detail=detail,
                         headers={"Retry-After": str(retry_after)} if retry_after is not None else None)


def make_auth(
    db_path: str,
    throttle: LoginThrottle | None = None,
    wait_s: float = AUTH_WAIT_S,
    workers: int = AUTH_WORKERS,
    max_waiting: int = AUTH_QUEUE,
) -> Callable[[str, str], Awaitable[bool]]:
    """The coroutine Gradio's login form awaits: True for an active user with the right password.

    Raises HTTP 429 (with Retry-After) while the account or the client address is throttled, 403 for the right
    password of a deactivated account, and 503 when the check cannot start within `wait_s` or `max_waiting`
    checks already wait. A plain `async def` on purpose: Gradio awaits the callable only if
    inspect.iscoroutinefunction says so; an object with an async __call__ would be called without await and
    its coroutine taken as a truthy "yes".
    """
    throttle = throttle or LoginThrottle()
    checks = CheckQueue(workers, max_waiting)

    def check(username: str, password: str) -> accounts.User | None:
        db = web_db(db_path)
        try:
            return accounts.password_matches(db, username, password)
        finally:
            db.conn.close()

    async def auth(username: str, password: str) -> bool:
        address, device = CLIENT_ADDRESS.get(), CLIENT_DEVICE.get()
        # Admitted in one step with the check, before the password is checked (login_guard): parallel guesses
        # cannot all pass the check before the first is counted.
        wait = throttle.acquire(username, address, device)
        if wait > 0:
            refused = Throttled(wait)
            raise _refuse(429, str(refused), refused.retry_after)
        known = throttle.is_known(username, address, device)
        future = checks.submit(0 if known else 1, check, username, password)
        if future is None:
            throttle.cancelled(username, address, device)  # never checked: counts for nothing
            raise _refuse(503, BUSY_MESSAGE, 2)

        def resolve(done: Future) -> None:
            """Ends the admitted attempt when its check ends, also one that outlived `wait_s` (its answer is never
            given, but a wrong password still counts: a guess that times out on purpose must not be free)."""
            if done.cancelled() or done.exception() is not None:
                throttle.cancelled(username, address, device)
            elif done.result() is None:
                throttle.failed(username, address, device)
            elif done.result().active:
                throttle.succeeded(username, address, device)
            else:
                throttle.cancelled(username, address, device)  # deactivated: neither a guess nor a login

        future.add_done_callback(resolve)
        try:
            # shield: a check already running finishes in its thread (one scrypt); one still waiting is cancelled.
            user = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), wait_s)
        except asyncio.TimeoutError:
            future.cancel()
            raise _refuse(503, BUSY_MESSAGE, 2) from None
        except Exception as error:  # noqa: BLE001 - a broken database must not look like a wrong password
            raise _refuse(503, f"{BUSY_MESSAGE} ({type(error).__name__})") from None
        if user is None:
            return False
        if not user.active:
            raise _refuse(403, DEACTIVATED_MESSAGE)
        LOGIN_EPOCH.set((username, user.session_epoch))
        return True

    auth.throttle = throttle  # the password change shares it (login_throttle)
    auth.checks = checks

    return auth


def login_throttle(request: gr.Request | None) -> tuple[LoginThrottle | None, str | None]:
    """(the server's login throttle, the client's address) for a handler's request: the password change counts
    wrong current passwords with the login form's throttle (make_auth hangs it on the auth coroutine, which
    Gradio keeps as `app.auth`). (None, None) outside a running server."""
    inner = getattr(request, "request", None) if request is not None else None
    app = getattr(inner, "app", None)
    client = getattr(inner, "client", None)
    return getattr(getattr(app, "auth", None), "throttle", None), getattr(client, "host", None)
