"""SQLite storage: the single source of truth. Imports neither torch nor gradio."""
from storage.db import (
    ConnectionPool,
    StorageError,
    backup,
    connect,
    creation,
    migrate,
    open_db,
    rows_by_ids,
    schema_version,
    write_transaction,
)

__all__ = [
    "ConnectionPool",
    "StorageError",
    "backup",
    "connect",
    "creation",
    "migrate",
    "open_db",
    "rows_by_ids",
    "schema_version",
    "write_transaction",
]
