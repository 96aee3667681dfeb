"""The web app under attack and under load (issue 10): a login cannot freeze the server, wrong passwords are
throttled, sessions end, cross-site requests are refused, chat opens registered models only.

A server of its own (not the shared `running_app`): these tests throttle 127.0.0.1, which every test logs in
from, and they change passwords.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
import requests
from helpers import login, serving

gradio_client = pytest.importorskip("gradio_client")
from gradio_client import Client  # noqa: E402

from labeler.services.data.login_guard import ThrottlePolicy  # noqa: E402

ADMIN = ("root", "root-password-1")
ANNOTATOR = ("hana", "hana-password-1")
VICTIM = ("ivan", "ivan-password-1")  # the throttling test guesses at this one
CHANGED = ("jude", "jude-password-1")  # the session tests change this one's password
ALLOWED_ORIGIN = "https://studio.example.org"
# Refuse after 5 failures, 0.4 s doubling up to 1.6 s: the 20 s the issue asks for, scaled down to keep the
# test short; what is asserted is the refusal itself (HTTP 429), which the schedule does not change.
POLICY = ThrottlePolicy(free_failures=5, base_delay_s=0.4, max_delay_s=1.6)


@pytest.fixture(scope="module")
def app(tmp_path_factory, tiny_model_dir):
    from labeler.services.data import accounts
    from labeler.services.serving import models
    from storage import open_db

    root = tmp_path_factory.mktemp("hardening")
    db_path = str(root / "studio.db")
    db = open_db(db_path)
    try:
        accounts.create_user(db, *ADMIN, role="admin")
        for user in (ANNOTATOR, VICTIM, CHANGED):
            accounts.create_user(db, *user)
        models.register_model(db, "tiny", str(tiny_model_dir), "policy")
    finally:
        db.conn.close()
    with serving(db_path, root, model="tiny", allowed_origins=(ALLOWED_ORIGIN,), login_throttle=POLICY) as server:
        yield {"url": server.origin, "db_path": db_path, "root": root}


def current_user(url: str, session: requests.Session):
    return session.get(f"{url}/gradio_api/user", timeout=30).json()


def test_page_and_login_stay_fast_while_another_process_holds_the_write_lock(app):
    client = Client(app["url"], auth=ANNOTATOR, verbose=False)  # connected before the lock
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sqlite3, sys, time
            conn = sqlite3.connect({app["db_path"]!r}, isolation_level=None)
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE projects SET guidelines = 'held' WHERE name = 'default'")
            print("locked", flush=True)
            time.sleep(10)
            conn.execute("ROLLBACK")
        """)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        start = time.monotonic()
        page = requests.get(app["url"] + "/", timeout=30)
        page_s = time.monotonic() - start
        start = time.monotonic()
        answer = login(app["url"], ANNOTATOR)
        login_s = time.monotonic() - start
        start = time.monotonic()
        whoami = client.predict(api_name="/whoami")
        whoami_s = time.monotonic() - start
        still_locked = holder.poll() is None
    finally:
        holder.kill()
        holder.wait()
    assert still_locked, "the lock holder ended before the requests were measured"
    assert page.status_code == 200 and page_s < 1.0, (page.status_code, page_s)
    # The issue accepts a clear "busy, retry" (503) too; a login only reads, and under WAL reading needs no
    # lock, so here it simply succeeds.
    assert answer.status_code == 200 and login_s < 2.0, (answer.status_code, answer.text, login_s)
    text = whoami if isinstance(whoami, str) else whoami[0]
    assert "**hana**" in text and whoami_s < 2.0, (whoami, whoami_s)


def test_a_password_change_and_a_deactivation_end_the_sessions(app):
    from labeler.services.data import accounts
    from storage import open_db

    url = app["url"]
    first, second = requests.Session(), requests.Session()
    assert login(url, CHANGED, first).status_code == 200 and login(url, CHANGED, second).status_code == 200
    assert current_user(url, first) == current_user(url, second) == CHANGED[0]
    db = open_db(app["db_path"])
    try:
        accounts.set_password(db, CHANGED[0], "jude-password-2")  # what `rlhf-studio users passwd` does
        time.sleep(1.2)  # the server re-reads a user's session epoch at most once a second
        assert current_user(url, first) is None and current_user(url, second) is None
        assert login(url, CHANGED).status_code == 400  # the old password is gone too
        third = requests.Session()
        assert login(url, (CHANGED[0], "jude-password-2"), third).status_code == 200
        assert current_user(url, third) == CHANGED[0]
        accounts.set_active(db, CHANGED[0], False)
        time.sleep(1.2)
        assert current_user(url, third) is None
        accounts.set_active(db, CHANGED[0], True)
        time.sleep(1.2)
        assert current_user(url, third) is None  # reactivation does not revive the old session
    finally:
        db.conn.close()


def test_foreign_origins_are_refused_and_the_login_cookie_is_lax(app):
    url = app["url"]
    session = requests.Session()
    answer = login(url, ANNOTATOR, session)
    cookies = answer.headers["set-cookie"]
    # The two login cookies and the device id (login_guard's known devices), all Lax.
    assert "samesite=none" not in cookies.lower() and cookies.lower().count("samesite=lax") == 3, cookies
    for origin in ("http://evil.example", "null", "http://127.0.0.1:1"):
        refused = session.get(f"{url}/gradio_api/user", headers={"Origin": origin}, timeout=30)
        assert refused.status_code == 403 and "Cross-origin request refused" in refused.text, origin
        posted = requests.post(f"{url}/login", data={"username": ANNOTATOR[0], "password": ANNOTATOR[1]},
                               headers={"Origin": origin}, timeout=30)
        assert posted.status_code == 403 and "set-cookie" not in {k.lower() for k in posted.headers}
    for origin in (url, ALLOWED_ORIGIN):  # the server's own pages, and the configured one
        assert session.get(f"{url}/gradio_api/user", headers={"Origin": origin}, timeout=30).json() == ANNOTATOR[0]


def test_an_annotator_cannot_chat_with_an_unregistered_folder(app, tiny_model_dir, tiny_encoder_dir):
    from gradio_client.exceptions import AppError

    from labeler.services.serving import models
    from storage import open_db

    db = open_db(app["db_path"])
    try:
        if models.get_model(db, "tiny") and not db.execute("SELECT 1 FROM models WHERE name = 'scorer'").fetchone():
            models.register_model(db, "scorer", str(tiny_encoder_dir), "reward")
    finally:
        db.conn.close()
    client = Client(app["url"], auth=ANNOTATOR, verbose=False)
    settings = [4, True, 1.0, 1.0, 0, 1]
    messages = {}
    # A folder holding a valid model, a folder without one, a file, a missing path and a hub id: one answer.
    for name in (str(tiny_model_dir), "/etc", "/etc/passwd", "/nonexistent", "HuggingFaceTB/SmolLM2-135M"):
        with pytest.raises(AppError) as error:
            client.predict("Hello", [], name, "", *settings, api_name="/chat_send")
        messages[name] = str(error.value).replace(name, "NAME")
    assert len(set(messages.values())) == 1, messages
    assert "no registered chat model" in next(iter(messages.values()))
    with pytest.raises(AppError, match="reward model"):
        client.predict("Hello", [], "scorer", "", *settings, api_name="/chat_send")
    with pytest.raises(AppError, match="no registered chat model"):
        client.predict("Say hi", str(tiny_model_dir), "tiny", 8, api_name="/arena_start")
    history, _ = client.predict("Hello", [], "tiny", "", *settings, api_name="/chat_send")  # the registered one works
    assert [m["role"] for m in history] == ["user", "assistant"]


def test_wrong_passwords_are_refused_after_five_then_the_right_one_works(app):
    # Last in the module: it leaves 127.0.0.1 with 30+ failures, so any later wrong password from this
    # address would start a penalty.
    url = app["url"]
    known = [login(url, (VICTIM[0], f"wrong-guess-{k}")) for k in range(30)]
    codes = [r.status_code for r in known]
    # At most 5 answered (fewer if this address already failed in an earlier test), then refusals.
    assert codes[0] == 400 and 1 <= codes.index(429) <= 5 and set(codes[: codes.index(429)]) == {400}, codes
    assert codes.count(429) >= 20, codes
    refusal = next(r for r in known if r.status_code == 429)
    assert "Too many wrong passwords" in refusal.json()["detail"] and int(refusal.headers["Retry-After"]) >= 1
    # During the penalty even the right password is refused: otherwise the lockout stops nothing.
    assert login(url, VICTIM).status_code == 429
    time.sleep(POLICY.max_delay_s + 0.2)
    session = requests.Session()
    assert login(url, VICTIM, session).status_code == 200
    assert current_user(url, session) == VICTIM[0]

    # An unknown name is throttled exactly like a real one: the answers do not reveal which names exist.
    # (Issue 25: the lock is per account and address, so each name gets its own 5 from this address.)
    time.sleep(POLICY.max_delay_s + 0.2)
    unknown = [login(url, ("nobody-here", f"wrong-guess-{k}")).status_code for k in range(6)]
    time.sleep(POLICY.max_delay_s + 0.2)
    known_again = [login(url, (VICTIM[0], f"wrong-guess-{k}")).status_code for k in range(6)]
    assert unknown == known_again == [400] * 5 + [429], (unknown, known_again)
    time.sleep(POLICY.max_delay_s + 0.2)
