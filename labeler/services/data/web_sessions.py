"""The web app's login sessions kept in the `web_sessions` table, so that they survive a server restart.

A session is a cookie token Gradio hands out at login; the table holds its SHA-256 (`token_hash`), never the
token, so a copy of the database (a backup an admin downloaded) opens no session. labeler/ui/session/store.py's
SessionStore keeps the live ones in memory and writes here at login, logout and when one is found ended; a new
server reads the rows back (`stored_sessions`) and checks each token as it is presented, as it does any other.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import sqlite_utils

from storage import write_transaction


@dataclass(frozen=True)
class StoredSession:
    username: str
    issued_at: float  # seconds since the epoch, on the clock of the store that issued it
    session_epoch: int  # the user's session epoch when it was issued


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def cookie_id(db_path: str) -> str:
    """The suffix of the login cookie's name (Gradio's `access-token-<id>`): the same for every server of one
    database, so that a browser's cookie still names its session after a restart, and different for two
    databases served from one host (browsers send a host's cookies to all its ports). Not a secret: the name is
    visible in every browser."""
    return hashlib.sha256(str(Path(db_path).resolve()).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def save_session(db: sqlite_utils.Database, token: str, username: str, issued_at: float, session_epoch: int) -> None:
    with write_transaction(db):
        db.execute(
            "INSERT OR REPLACE INTO web_sessions (token_hash, user_id, issued_at, session_epoch)"
            " SELECT ?, id, ?, ? FROM users WHERE username = ?",
            [token_hash(token), float(issued_at), int(session_epoch), username],
        )


def end_session(db: sqlite_utils.Database, token: str) -> None:
    with write_transaction(db):
        db.execute("DELETE FROM web_sessions WHERE token_hash = ?", [token_hash(token)])


def end_user_sessions(db: sqlite_utils.Database, username: str) -> None:
    """Every stored session of the user ends (a logout: Gradio's ends all of a user's sessions)."""
    with write_transaction(db):
        db.execute("DELETE FROM web_sessions WHERE user_id = (SELECT id FROM users WHERE username = ?)", [username])


def stored_sessions(db: sqlite_utils.Database, max_age_s: float, now: float) -> dict[str, StoredSession]:
    """{token hash: session} of the sessions younger than `max_age_s` whose user is active with the epoch they were
    issued under; the others are deleted first."""
    with write_transaction(db):
        db.execute(
            "DELETE FROM web_sessions WHERE issued_at < ? OR token_hash IN (SELECT s.token_hash FROM web_sessions s"
            " JOIN users u ON u.id = s.user_id WHERE u.active = 0 OR u.session_epoch != s.session_epoch)",
            [float(now) - float(max_age_s)],
        )
        rows = db.execute(
            "SELECT s.token_hash, u.username, s.issued_at, s.session_epoch FROM web_sessions s"
            " JOIN users u ON u.id = s.user_id ORDER BY s.issued_at"
        ).fetchall()
    return {row[0]: StoredSession(row[1], row[2], row[3]) for row in rows}
