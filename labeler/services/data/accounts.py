"""Accounts: annotators and admins, with salted scrypt password hashes.

Passwords are hashed with scrypt (memory-hard; RFC 7914) and a random 16-byte salt per user. The stored
hash carries its parameters ("scrypt$n$r$p$hex") so they can be raised later without breaking old
accounts. Comparison is constant-time, and an unknown username costs the same hash as a known one so
that response times do not reveal which usernames exist.
"""
from __future__ import annotations

import functools
import hashlib
import re
import secrets
from dataclasses import dataclass

import sqlite_utils

from labeler.errors import InputError, PermissionDenied
from labeler.services.data.labeling.store import drop_pending_holds
from labeler.services.data.login_guard import Throttled
from storage import write_transaction

ROLES = ("admin", "annotator")
MIN_PASSWORD_LENGTH = 8  # NIST SP 800-63B's minimum for user-chosen secrets
USERNAME_PATTERN = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")

# scrypt cost: n=2**14, r=8 -> 16 MiB and ~50 ms per hash (OWASP's minimum recommendation for scrypt).
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
_DUMMY_SALT = "00" * 16


@dataclass(frozen=True)
class User:
    id: int
    username: str
    role: str
    active: bool
    # Bumped by a password change or a deactivation: a login session issued under an older epoch has ended.
    session_epoch: int = 0
    # The password is a one-time one (printed by `serve` on the first start): nothing but choosing a new
    # password is allowed until it is replaced.
    must_change_password: bool = False

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def hash_password(password: str, salt_hex: str, n: int = SCRYPT_N, r: int = SCRYPT_R, p: int = SCRYPT_P) -> str:
    salt = bytes.fromhex(salt_hex)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=64 * 2**20, dklen=32)
    return f"scrypt${n}${r}${p}${digest.hex()}"


def _verify(password: str, salt_hex: str, stored: str) -> bool:
    try:
        scheme, n, r, p, _ = stored.split("$")
        assert scheme == "scrypt"
        candidate = hash_password(password, salt_hex, int(n), int(r), int(p))
    except (ValueError, AssertionError):
        return False
    return secrets.compare_digest(candidate.encode(), stored.encode())


_USER_COLUMNS = "id, username, role, active, session_epoch, must_change_password"


def _from_row(row) -> User:
    return User(
        id=row["id"], username=row["username"], role=row["role"], active=bool(row["active"]),
        session_epoch=row["session_epoch"], must_change_password=bool(row["must_change_password"]),
    )


def _check_username(username: str) -> str:
    if not isinstance(username, str) or not USERNAME_PATTERN.match(username):
        raise InputError(
            f"invalid username {username!r}: use 1-64 letters, digits or _ . @ -", field="username"
        )
    return username


def _check_password(password: str) -> str:
    if not isinstance(password, str) or len(password) < MIN_PASSWORD_LENGTH:
        raise InputError(f"password must be at least {MIN_PASSWORD_LENGTH} characters", field="password")
    return password


def _check_role(role: str) -> str:
    if role not in ROLES:
        raise InputError(f"unknown role {role!r} (choose {' or '.join(ROLES)})", field="role")
    return role


def _insert_user(db: sqlite_utils.Database, username: str, password: str, role: str, must_change: bool = False) -> None:
    """Insert inside the caller's transaction."""
    if db.execute("SELECT 1 FROM users WHERE username = ?", [username]).fetchone():
        raise InputError(f"user '{username}' already exists", field="username")
    salt = secrets.token_hex(16)
    db.execute(
        "INSERT INTO users (username, password_hash, salt, role, must_change_password) VALUES (?, ?, ?, ?, ?)",
        [username, hash_password(password, salt), salt, role, int(must_change)],
    )


def create_user(db: sqlite_utils.Database, username: str, password: str, role: str = "annotator") -> User:
    _check_username(username)
    _check_password(password)
    _check_role(role)
    with write_transaction(db):
        _insert_user(db, username, password, role)
    return get_user(db, username)


def get_user(db: sqlite_utils.Database, username: str) -> User | None:
    row = db.execute(f"SELECT {_USER_COLUMNS} FROM users WHERE username = ?", [username]).fetchone()
    return _from_row(row) if row else None


def list_users(db: sqlite_utils.Database) -> list[User]:
    return [_from_row(row) for row in db.execute(f"SELECT {_USER_COLUMNS} FROM users ORDER BY id").fetchall()]


@functools.lru_cache(maxsize=1)
def _dummy_hash() -> str:
    """A hash with the current parameters, computed once per process: an unknown username then costs exactly one
    scrypt, like a known one (it cost two, the dummy's own hashing and the check: 107 ms against 54 ms)."""
    return hash_password("dummy-password", _DUMMY_SALT)


def password_matches(db: sqlite_utils.Database, username: str, password: str) -> User | None:
    """The user if the password matches, whether the account is active or not (the login form says "deactivated"
    only to someone who knows the password); else None. One scrypt whatever the name: timing does not tell
    whether the username exists."""
    row = db.execute(
        f"SELECT {_USER_COLUMNS}, password_hash, salt FROM users WHERE username = ?", [username]
    ).fetchone()
    if row is None:
        _verify(password or "", _DUMMY_SALT, _dummy_hash())
        return None
    return _from_row(row) if _verify(password or "", row["salt"], row["password_hash"]) else None


def authenticate(db: sqlite_utils.Database, username: str, password: str) -> User | None:
    """The user if the password matches and the account is active, else None."""
    user = password_matches(db, username, password)
    return user if user is not None and user.active else None


def set_password(db: sqlite_utils.Database, username: str, password: str) -> None:
    """Change the password; every login session of the user ends (the session epoch moves on).

    A one-time password is replaced with it, so the first-login requirement is met.
    """
    _check_password(password)
    salt = secrets.token_hex(16)
    with write_transaction(db):
        cursor = db.execute(
            "UPDATE users SET password_hash = ?, salt = ?, session_epoch = session_epoch + 1,"
            " must_change_password = 0 WHERE username = ?",
            [hash_password(password, salt), salt, username],
        )
        if cursor.rowcount == 0:
            raise InputError(f"unknown user '{username}'", field="username")


def change_own_password(db: sqlite_utils.Database, username: str, current: str, new: str, repeat: str,
                        throttle=None, address: str | None = None) -> User:
    """A logged-in user replaces their password (the first-login change of the one-time password included).

    The current password is asked again so that an unattended logged-in browser cannot take the account over;
    the new one must differ from it and be typed twice alike. Their other sessions end (set_password), and
    the caller logs this browser in again. `throttle` (the login form's login_guard.LoginThrottle) counts a
    wrong current password like a wrong login from `address`, and refuses (login_guard.Throttled) before
    checking once the account or the address is throttled: a hijacked session cannot guess it at full speed.
    """
    row = db.execute("SELECT password_hash, salt, active FROM users WHERE username = ?", [username]).fetchone()
    if row is None or not row["active"]:
        raise PermissionDenied(f"user '{username}' is unknown or deactivated")
    if throttle is not None:
        wait = throttle.acquire(username, address)
        if wait > 0:
            raise Throttled(wait)
    if not _verify(current or "", row["salt"], row["password_hash"]):
        if throttle is not None:
            throttle.failed(username, address)
        raise InputError("is not your current password", field="current password")
    if throttle is not None:
        throttle.succeeded(username, address)
    _check_password(new)
    if new != repeat:
        raise InputError("the two new passwords differ", field="repeat new password")
    if new == current:
        raise InputError("choose a password different from the current one", field="new password")
    set_password(db, username, new)
    return get_user(db, username)


def set_role(db: sqlite_utils.Database, username: str, role: str) -> User:
    _check_role(role)
    with write_transaction(db):
        if db.execute("UPDATE users SET role = ? WHERE username = ?", [role, username]).rowcount == 0:
            raise InputError(f"unknown user '{username}'", field="username")
        _check_an_admin_remains(db)
    return get_user(db, username)


def set_active(db: sqlite_utils.Database, username: str, active: bool) -> User:
    """Deactivate (or reactivate) an account; its labels stay, it can no longer log in or label.

    Deactivation also ends the user's login sessions, so reactivating does not revive an old one, and releases
    the items they held (shown, not labelled): those return to the queue at once.
    """
    with write_transaction(db):
        cursor = db.execute(
            "UPDATE users SET active = ?, session_epoch = session_epoch + (? = 0) WHERE username = ?",
            [int(bool(active)), int(bool(active)), username],
        )
        if cursor.rowcount == 0:
            raise InputError(f"unknown user '{username}'", field="username")
        _check_an_admin_remains(db)
        if not active:
            _release_holds(db, username)
    return get_user(db, username)


def set_simulated_active(db: sqlite_utils.Database, username: str, active: bool) -> None:
    """A simulated annotator's account (the demo's) on or off: the change set_active makes (deactivating ends
    its sessions and releases its holds), without its "an active admin remains" check, since a demo's database may have
    no admin at all; an admin's account is never changed, and one already in that state is left as it is."""
    with write_transaction(db):
        db.execute("UPDATE users SET active = ?, session_epoch = session_epoch + (? = 0)"
                   " WHERE username = ? AND role != 'admin' AND active != ?",
                   [int(bool(active)), int(bool(active)), username, int(bool(active))])
        if not active:
            _release_holds(db, username)


def _release_holds(db: sqlite_utils.Database, username: str) -> None:
    row = db.execute("SELECT id FROM users WHERE username = ? AND active = 0", [username]).fetchone()
    if row is not None:
        drop_pending_holds(db, row[0])


def session_epoch(db: sqlite_utils.Database, username: str) -> int | None:
    """The epoch a session of `username` must carry to be valid; None for an unknown or deactivated user."""
    row = db.execute("SELECT active, session_epoch FROM users WHERE username = ?", [username]).fetchone()
    if row is None or not row["active"]:
        return None
    return int(row["session_epoch"])


def _check_an_admin_remains(db: sqlite_utils.Database) -> None:
    # Raising inside write_transaction rolls the change back: nobody can lock every admin out.
    if not db.execute("SELECT 1 FROM users WHERE role = 'admin' AND active = 1").fetchone():
        raise InputError("this would leave no active admin", field="role")


def ensure_admin(db: sqlite_utils.Database) -> str | None:
    """On an empty users table, create `admin` with a random one-time password and return it (else None).

    The check and the insert share one BEGIN IMMEDIATE transaction, so two servers starting at once
    create one admin, and only one of them prints a password.
    """
    password = secrets.token_urlsafe(12)  # 96 bits
    with write_transaction(db):
        if db.execute("SELECT 1 FROM users LIMIT 1").fetchone():
            return None
        # One-time: it was printed in a terminal (and maybe a log), so the first login must replace it.
        _insert_user(db, "admin", password, "admin", must_change=True)
    return password


class PasswordChangeRequired(PermissionDenied):
    """The user logged in with a one-time password and must choose a new one before anything else."""


def require_user(db: sqlite_utils.Database, username: str | None) -> User:
    """The active user, or PermissionDenied; PasswordChangeRequired while their password is a one-time one.

    Checked here, on every request, rather than by hiding the app: any endpoint can be called directly.
    """
    user = get_user(db, username) if username else None
    if user is None or not user.active:
        raise PermissionDenied("not logged in" if not username else f"user '{username}' is unknown or deactivated")
    if user.must_change_password:
        raise PasswordChangeRequired(f"user '{username}' must replace the one-time password first")
    return user


def require_admin(db: sqlite_utils.Database, username: str | None) -> User:
    user = require_user(db, username)
    if user.role != "admin":
        raise PermissionDenied(f"user '{username}' is not an admin")
    return user
