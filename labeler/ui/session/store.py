"""`SessionStore`: Gradio's session tokens with an age limit and the user's session epoch, kept in the database.

Gradio's own `App.tokens` (token -> username) never expire, survive a password change and live only in the
server's memory (a restart logged everyone out); the running server's dict is swapped for a SessionStore
(gradio_internals.replace_session_tokens), which also writes each session to the `web_sessions` table
(labeler/services/data/web_sessions.py) and reads them back when a new server starts on the same database.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterable

from labeler.services.data import accounts, web_sessions
from labeler.ui.session.handoff import LOGIN_EPOCH
from labeler.ui.session.web_db import web_db

LOG = logging.getLogger("rlhf_studio.ui")

ENDED_KEEP = 1000  # tokens of ended sessions remembered, to tell a deactivated user why their page is gone


class SessionStore(dict):
    """Gradio's `App.tokens` (cookie token -> username) with an issue time and a session epoch per token.

    A token is valid while it is younger than `max_age_s` and its user is active with the epoch the token
    was issued under (accounts.set_password and deactivation bump it). Gradio reads tokens through
    `tokens.get(token)` for every request and `token in tokens` on logout, so those two check; plain
    indexing stays raw so Gradio's logout loop can delete whatever it finds. The user's epoch is read from
    the database at most once per `recheck_s` per user, so the check costs the event loop almost nothing.

    With `persist` (the server's store), each session is also a row of `web_sessions`: written at login, deleted
    when found ended or logged out, and read back by the next server's store, which takes a stored session into
    memory when its browser first presents the token. A logout ends the user's stored sessions not seen since the
    restart too, as Gradio's logout ends every session of the user. When the database cannot be written for a
    moment the session still works, until the next restart.
    """

    def __init__(
        self,
        db_path: str,
        max_age_s: float,
        recheck_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        initial: Iterable[tuple[str, str]] = (),
        persist: bool = True,
    ):
        super().__init__()
        self.db_path, self.max_age_s, self.recheck_s, self._clock = db_path, max_age_s, recheck_s, clock
        self.persist = persist
        self._issued: dict[str, tuple[float, int | None]] = {}
        self._ended: dict[str, str] = {}  # token -> username of sessions found invalid, newest last (ENDED_KEEP)
        self._epochs: dict[str, tuple[float, int | None]] = {}  # username -> (checked at, epoch)
        self._lock = threading.Lock()
        # Sessions an earlier server stored, by token hash, until their browser comes back.
        self._stored: dict[str, web_sessions.StoredSession] = (
            self._write(web_sessions.stored_sessions, self.max_age_s, self._clock()) or {}) if persist else {}
        for token, username in initial:
            self[token] = username

    def _write(self, change: Callable[..., Any], *args) -> Any:
        """change(db, *args) on a connection of its own; None (logged) when the database refuses for a moment."""
        if not self.persist:
            return None
        try:
            db = web_db(self.db_path)
            try:
                return change(db, *args)
            finally:
                db.conn.close()
        except Exception as error:  # noqa: BLE001 - the session lives on in memory; only a restart forgets it
            LOG.warning("login sessions: %s failed: %s: %s", getattr(change, "__name__", "?"),
                        type(error).__name__, error)
            return None

    def _recall(self, token: object) -> None:
        """Take a session an earlier server stored into memory when its token is presented."""
        if not self._stored or not isinstance(token, str) or dict.__contains__(self, token):
            return
        stored = self._stored.pop(web_sessions.token_hash(token), None)
        if stored is not None:
            with self._lock:
                self._issued[token] = (stored.issued_at, stored.session_epoch)
                dict.__setitem__(self, token, stored.username)

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
        issued_at = self._clock()
        with self._lock:
            self._issued[token] = (issued_at, epoch)
            super().__setitem__(token, username)
        if epoch is not None:
            self._write(web_sessions.save_session, token, username, issued_at, epoch)

    def __delitem__(self, token: str) -> None:
        """Gradio's logout (its only deletion)."""
        username = dict.get(self, token)
        with self._lock:
            self._issued.pop(token, None)
            super().__delitem__(token)
        self._write(web_sessions.end_session, token)
        if username is not None and any(s.username == username for s in self._stored.values()):
            self._stored = {h: s for h, s in self._stored.items() if s.username != username}
            self._write(web_sessions.end_user_sessions, username)

    def _valid(self, token: str) -> bool:
        issued_at, epoch = self._issued.get(token, (float("-inf"), None))
        if self._clock() - issued_at > self.max_age_s:
            return False
        return epoch is not None and self._epoch(dict.__getitem__(self, token)) == epoch

    def __contains__(self, token: object) -> bool:
        self._recall(token)
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
        self._write(web_sessions.end_session, token)
        return False

    def get(self, token: Any, default: Any = None) -> Any:
        return dict.get(self, token, default) if token is not None and token in self else default

    def deactivated_user(self, token: str | None) -> str | None:
        """The user name when `token` belongs to a session that ended because its user is deactivated now; else
        None (a valid token, an unknown one, or a session that ended for another reason)."""
        if not token:
            return None
        self._recall(token)
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


def name_login_cookie(server, db_path: str) -> None:
    """Gradio names its login cookie `access-token-<App.cookie_id>`, the id random per start: a browser's cookie
    then named no session after a restart. The running server's id becomes the database's own
    (web_sessions.cookie_id), so a stored session is found by the cookie that carries it. Set once the server is
    up, beside the SessionStore: a login made before this moment keeps the old name and ends with it."""
    server.cookie_id = web_sessions.cookie_id(db_path)
