"""`SessionStore`: Gradio's session tokens with an age limit and the user's session epoch.

Gradio's own `App.tokens` (token -> username) never expire and survive a password change; the running server's
dict is swapped for a SessionStore (gradio_internals.replace_session_tokens).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable

from labeler.services import accounts
from labeler.ui.session.handoff import LOGIN_EPOCH
from labeler.ui.session.web_db import web_db

ENDED_KEEP = 1000  # tokens of ended sessions remembered, to tell a deactivated user why their page is gone


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
        now = self._clock()
        cached = self._epochs.get(username)
        if cached is not None and not fresh and now - cached[0] < self.recheck_s:
            return cached[1]
        try:
            db = web_db(self.db_path)
            try:
                epoch = accounts.session_epoch(db, username)
            finally:
                db.conn.close()
        except Exception:  # noqa: BLE001 - unreadable for a moment: keep the last answer, else refuse
            return cached[1] if cached is not None else None
        self._epochs[username] = (now, epoch)
        return epoch

    def __setitem__(self, token: str, username: str) -> None:
        pending = LOGIN_EPOCH.get()
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
        if not token:
            return None
        known = dict.get(self, token)
        if known is not None:
            self._epoch(known, fresh=True)  # a page load: no grace of recheck_s for a deactivation just made
        if token in self or token not in self._ended:
            return None
        username = self._ended[token]
        try:
            db = web_db(self.db_path)
            try:
                user = accounts.get_user(db, username)
            finally:
                db.conn.close()
        except Exception:  # noqa: BLE001 - unreadable for a moment: the plain login page is shown
            return None
        return username if user is not None and not user.active else None
