"""Login plumbing without a server: the auth coroutine (throttle, busy answer), SessionStore, origins."""
from __future__ import annotations

import asyncio
import inspect
import time

import pytest
from fastapi import HTTPException

from labeler.services.data import accounts
from labeler.services.data.login_guard import LoginThrottle, ThrottlePolicy
from labeler.ui.session import CLIENT_ADDRESS, RequestGuard, SessionStore, make_auth


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def users_db(db):
    accounts.create_user(db, "alice", "alice-password-1")
    accounts.create_user(db, "root", "root-password-1", role="admin")
    return db


def attempt(auth, username, password, address="10.1.1.1"):
    async def go():
        CLIENT_ADDRESS.set(address)
        return await auth(username, password)

    return asyncio.run(go())


def test_auth_is_a_coroutine_function_so_gradio_awaits_it(db_path, users_db):
    # Gradio calls a non-coroutine auth without await and takes the returned coroutine as a "yes".
    assert inspect.iscoroutinefunction(make_auth(db_path))


def test_auth_throttles_with_429_and_lets_the_right_password_in_after_the_penalty(db_path, users_db):
    clock = Clock()
    throttle = LoginThrottle(ThrottlePolicy(free_failures=5, base_delay_s=30.0), clock)
    auth = make_auth(db_path, throttle)
    assert [attempt(auth, "alice", f"wrong-{k}") for k in range(5)] == [False] * 5
    with pytest.raises(HTTPException) as refused:
        attempt(auth, "alice", "alice-password-1")
    assert refused.value.status_code == 429 and refused.value.headers["Retry-After"] == "30"
    assert attempt(auth, "root", "root-password-1", address="10.9.9.9") is True  # other accounts, other addresses
    clock.now += 30.0
    assert attempt(auth, "alice", "alice-password-1") is True


def test_a_login_that_gives_up_waiting_answers_busy_and_its_check_never_runs(db_path, users_db, monkeypatch):
    checked = []

    def slow(db, username, password):
        checked.append(username)
        time.sleep(0.6)
        return None

    monkeypatch.setattr(accounts, "password_matches", slow)
    auth = make_auth(db_path, wait_s=0.2, workers=1)

    async def two_logins():
        CLIENT_ADDRESS.set("10.1.1.1")
        first = asyncio.ensure_future(auth("alice", "x"))  # takes the one worker for 0.6 s
        await asyncio.sleep(0.05)
        return await asyncio.gather(first, auth("root", "y"), return_exceptions=True)

    start = time.monotonic()
    first, second = asyncio.run(two_logins())
    assert isinstance(first, HTTPException) and first.status_code == 503  # running past wait_s: busy...
    assert isinstance(second, HTTPException) and second.status_code == 503 and "busy" in second.detail
    assert time.monotonic() - start < 0.55
    time.sleep(0.8)
    assert checked == ["alice"]  # ...but the queued check of root was cancelled, never run (it ran on before)


def test_sessions_expire_and_end_with_a_password_change_or_a_deactivation(db_path, users_db):
    clock = Clock()
    store = SessionStore(db_path, max_age_s=7 * 86400, recheck_s=0.0, clock=clock)
    store["t-alice"] = "alice"
    store["t-root"] = "root"
    assert store.get("t-alice") == "alice" and "t-root" in store
    clock.now += 7 * 86400 - 1
    assert store.get("t-alice") == "alice"
    clock.now += 2
    assert store.get("t-alice") is None and "t-alice" not in store  # older than 7 days
    store["t-alice"] = "alice"
    accounts.set_password(users_db, "alice", "alice-password-2")
    assert store.get("t-alice") is None
    store["t-alice-2"] = "alice"  # a login after the change is valid
    assert store.get("t-alice-2") == "alice"
    accounts.set_active(users_db, "alice", False)
    assert store.get("t-alice-2") is None
    accounts.set_active(users_db, "alice", True)
    assert store.get("t-alice-2") is None
    assert store.get("t-root") is None  # expired with the first 7 days
    assert store.get(None) is None and store.get("never-issued") is None


def test_gradio_logout_loop_works_on_the_store(db_path, users_db):
    store = SessionStore(db_path, max_age_s=60)
    store["a"], store["b"], store["c"] = "alice", "alice", "root"
    for token in list(store.keys()):  # routes.py's logout, all_session=True
        if store[token] == "alice":
            del store[token]
    assert list(store.keys()) == ["c"]


@pytest.mark.parametrize(
    "origin, host, allowed",
    [
        ("http://127.0.0.1:7860", "127.0.0.1:7860", True),
        ("https://Studio.Example.org", "10.0.0.5:7860", True),  # configured, case-insensitive
        ("http://127.0.0.1:7861", "127.0.0.1:7860", False),  # another local port is another origin
        ("http://evil.example", "studio.example.org", False),
        ("null", "127.0.0.1:7860", False),
        ("not a url", "127.0.0.1:7860", False),
    ],
)
def test_origins(origin, host, allowed):
    guard = RequestGuard(app=None, allowed_origins=["https://studio.example.org/"])
    assert guard.origin_allowed(origin, host) is allowed


def test_a_session_ended_by_deactivation_is_told_apart(db_path, users_db):
    """Issue 14 item 11: the page of a deactivated user says so instead of showing Error badges or a bare login."""
    clock = Clock()
    store = SessionStore(db_path, max_age_s=7 * 86400, recheck_s=60.0, clock=clock)
    store["t-alice"], store["t-root"] = "alice", "root"
    assert store.deactivated_user("t-alice") is None  # active
    accounts.set_active(users_db, "alice", False)
    # Asked at once (within recheck_s): the page load checks afresh.
    assert store.deactivated_user("t-alice") == "alice"
    assert store.get("t-alice") is None and store.deactivated_user("t-alice") == "alice"
    # Ended for another reason, unknown, or reactivated since: no such message.
    accounts.set_password(users_db, "root", "root-password-2")
    clock.now += 61
    assert store.get("t-root") is None and store.deactivated_user("t-root") is None
    assert store.deactivated_user("never-issued") is None and store.deactivated_user(None) is None
    accounts.set_active(users_db, "alice", True)
    assert store.deactivated_user("t-alice") is None


def test_sessions_are_stored_and_read_back_by_the_next_store(db_path, users_db):
    """A server restart kept no session: Gradio held them in memory only. Stored hashed, read back, and still
    ended by age, a password change, or a logout (which ends the user's sessions not seen since the restart)."""
    clock = Clock()
    first = SessionStore(db_path, max_age_s=100.0, recheck_s=0.0, clock=clock)
    first["t-alice"], first["t-alice-2"], first["t-root"], first["t-old"] = "alice", "alice", "root", "root"
    stored = [row[0] for row in users_db.execute("SELECT token_hash FROM web_sessions ORDER BY rowid")]
    assert len(stored) == 4 and not {"t-alice", "t-alice-2", "t-root", "t-old"} & set(stored)  # hashes only
    clock.now += 60
    second = SessionStore(db_path, max_age_s=100.0, recheck_s=0.0, clock=clock)
    assert dict(second) == {}  # nothing in memory until a browser presents its token
    assert second.get("t-alice") == "alice" and "t-root" in second and second.get("never-issued") is None
    clock.now += 41  # t-root and t-old were issued 101 s ago, as were the alice ones
    assert second.get("t-root") is None
    clock.now -= 41
    third = SessionStore(db_path, max_age_s=100.0, recheck_s=0.0, clock=clock)
    assert third.get("t-alice-2") == "alice"
    for token in list(third.keys()):  # Gradio's logout of alice on the third server
        if third[token] == "alice":
            del third[token]
    fourth = SessionStore(db_path, max_age_s=100.0, recheck_s=0.0, clock=clock)
    assert fourth.get("t-alice") is None and fourth.get("t-alice-2") is None  # t-alice was never seen by `third`
    assert fourth.get("t-old") == "root"
    accounts.set_password(users_db, "root", "root-password-2")
    assert SessionStore(db_path, max_age_s=100.0, recheck_s=0.0, clock=clock).get("t-old") is None
    assert users_db.execute("SELECT COUNT(*) FROM web_sessions").fetchone()[0] == 0


def test_an_unwritable_database_leaves_the_session_working_in_memory(db_path, users_db, caplog):
    store = SessionStore(db_path, max_age_s=100.0)
    users_db.execute("DROP TABLE web_sessions")
    store["t-alice"] = "alice"
    assert store.get("t-alice") == "alice"
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["login sessions"]
