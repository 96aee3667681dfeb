"""storage.rows_by_ids: one IN (...) query for any number of ids, split into statements of at most
IDS_PER_STATEMENT bound ids (old SQLite builds refuse more than 999 variables)."""
from __future__ import annotations

import sqlite_utils

from storage import rows_by_ids
from storage.db import IDS_PER_STATEMENT


class CountingDatabase(sqlite_utils.Database):
    """Records how many ids each statement bound."""

    def __init__(self) -> None:
        self.bound: list[int] = []
        super().__init__(memory=True)

    def execute(self, sql, parameters=None):
        self.bound.append(len(parameters or []))
        return super().execute(sql, parameters)


def test_rows_for_every_id_in_chunks_without_duplicates():
    db = CountingDatabase()
    db.conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    db.conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"v{i}") for i in range(1, 2001)])
    db.bound.clear()
    wanted = [*range(2000, 0, -1), 5, 5, 3000]  # every id, reversed, one repeated, one missing
    rows = rows_by_ids(db, "SELECT id, v FROM t WHERE id IN ({marks})", wanted)
    assert sorted(row[0] for row in rows) == list(range(1, 2001))
    assert {row[0]: row[1] for row in rows}[1234] == "v1234"
    assert db.bound == [IDS_PER_STATEMENT, IDS_PER_STATEMENT, 2001 - 2 * IDS_PER_STATEMENT]  # 2001 distinct ids
    assert rows_by_ids(db, "SELECT id FROM t WHERE id IN ({marks})", []) == []
