"""The database connection of the web request path (the login's password check, the session checks, the
upload guard): never creates a database, never migrates (serve did), and waits for a lock only briefly."""
from __future__ import annotations

import sqlite_utils

from storage import open_db

DB_WAIT_MS = 1000  # the login's and session check's busy timeout: they only read, so this is a safety net


def web_db(db_path: str) -> sqlite_utils.Database:
    return open_db(db_path, migrate=False, create=False, busy_timeout_ms=DB_WAIT_MS)
