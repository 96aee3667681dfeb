"""SQLite storage: the single source of truth. Imports neither torch nor gradio."""
from storage.db import backup, connect, migrate, open_db, schema_version, write_transaction

__all__ = ["backup", "connect", "migrate", "open_db", "schema_version", "write_transaction"]
