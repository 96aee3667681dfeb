"""storage.ConnectionPool: request connections reused only when that is safe, reopened when the file changed."""
import os
import threading

import pytest

from storage import ConnectionPool, StorageError, open_db, write_transaction


@pytest.fixture
def migrated(db_path):
    open_db(db_path).conn.close()
    return db_path


def test_a_connection_is_reused_after_a_request_that_ended_cleanly(migrated):
    pool = ConnectionPool(migrated)
    with pool.connection() as first:
        with write_transaction(first):
            first.execute("UPDATE projects SET overlap = 2")
    with pool.connection() as second:
        assert second is first
        assert second.execute("SELECT overlap FROM projects").fetchone()[0] == 2
    pool.close()


def test_a_request_that_raised_or_left_a_transaction_open_does_not_pass_its_connection_on(migrated):
    pool = ConnectionPool(migrated)
    with pytest.raises(ValueError):
        with pool.connection() as failed:
            raise ValueError("a handler's error")
    with pool.connection() as open_transaction:
        assert open_transaction is not failed
        open_transaction.execute("BEGIN IMMEDIATE")  # never committed
    with pool.connection() as fresh:
        assert fresh is not open_transaction and not fresh.conn.in_transaction
        # The unfinished transaction was rolled back when its connection closed: the write lock is free.
        with write_transaction(fresh):
            fresh.execute("UPDATE projects SET overlap = 3")
    with pytest.raises(Exception, match="closed"):
        failed.execute("SELECT 1")
    with pytest.raises(Exception, match="closed"):
        open_transaction.execute("SELECT 1")


def test_concurrent_requests_get_their_own_connections_and_at_most_max_idle_are_kept(migrated):
    pool = ConnectionPool(migrated, max_idle=2)
    held, inside, release = [], threading.Barrier(3), threading.Event()

    def request():
        with pool.connection() as db:
            held.append(db)
            inside.wait()
            release.wait()

    threads = [threading.Thread(target=request) for _ in range(3)]
    for thread in threads:
        thread.start()
    while len(held) < 3:
        pass
    assert len({id(db) for db in held}) == 3  # never one connection for two requests at once
    release.set()
    for thread in threads:
        thread.join()
    assert len(pool._idle) == 2
    closed = [db for db in held if db not in [idle for idle, _ in pool._idle]]
    with pytest.raises(Exception, match="closed"):
        closed[0].execute("SELECT 1")
    pool.close()
    assert pool._idle == []


def test_a_replaced_database_file_gets_new_connections_that_check_its_schema(migrated, tmp_path):
    pool = ConnectionPool(migrated)
    with pool.connection() as before:
        pass
    # A backup restored by replacing the file: the pooled connection would still read and write the old one.
    other = str(tmp_path / "other.db")
    db = open_db(other)
    with write_transaction(db):
        db.execute("UPDATE projects SET overlap = 5")
    db.conn.close()
    os.replace(other, migrated)
    with pool.connection() as after:
        assert after is not before
        assert after.execute("SELECT overlap FROM projects").fetchone()[0] == 5
    # A file older than the code (here: no schema at all) is refused as open_db(migrate=False) refuses it.
    empty = str(tmp_path / "empty.db")
    import sqlite3

    sqlite3.connect(empty).close()
    os.replace(empty, migrated)
    with pytest.raises(StorageError, match="schema is at version 0"):
        with pool.connection():
            pass
    os.remove(migrated)
    with pytest.raises(StorageError, match="no such database"):
        with pool.connection():
            pass
