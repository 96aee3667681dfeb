"""A server restart keeps people logged in (their sessions are in the database, as a login cookie names them), and
a logout or a password change still ends them; a refused foreign origin gets no CORS header. Issue 48: every
person had to log in again after a restart, and the 403 for a foreign origin carried
`Access-Control-Allow-Origin` echoing it (Gradio's CORS middleware sat around the guard)."""
from __future__ import annotations

import time

import pytest
import requests
from helpers import login, serving

from labeler.services.data import accounts
from storage import open_db

pytestmark = pytest.mark.reliability

ANNOTATOR = ("hana", "hana-password-1")
ALLOWED_ORIGIN = "https://studio.example.org"


@pytest.fixture
def studio(tmp_path):
    db_path = str(tmp_path / "studio.db")
    db = open_db(db_path)
    try:
        accounts.create_user(db, *ANNOTATOR)
    finally:
        db.conn.close()
    return db_path, tmp_path


def log_in(url: str, session: requests.Session) -> None:
    answer = login(url, ANNOTATOR, session)
    assert answer.status_code == 200, answer.text


def user(url: str, session: requests.Session):
    return session.get(f"{url}/gradio_api/user", timeout=30).json()


def test_a_refused_origin_gets_no_cors_header(studio):
    db_path, root = studio
    with serving(db_path, root, allowed_origins=(ALLOWED_ORIGIN,)) as server:
        # A Host that is not localhost: Gradio's CORS middleware echoes any Origin for such a server.
        host = {"Host": "studio.example.org"}
        for method in ("GET", "POST", "OPTIONS"):
            refused = requests.request(method, f"{server.origin}/gradio_api/user", timeout=30,
                                       headers={**host, "Origin": "http://evil.example",
                                                "Access-Control-Request-Method": "POST"})
            assert refused.status_code == 403, (method, refused.status_code)
            assert not [k for k in refused.headers if k.lower().startswith("access-control-")], (method, refused.headers)
        allowed = requests.get(f"{server.origin}/gradio_api/user", headers={**host, "Origin": ALLOWED_ORIGIN},
                               timeout=30)
        assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == ALLOWED_ORIGIN


def test_sessions_survive_a_restart_and_still_end_with_a_logout_or_a_password_change(studio):
    db_path, root = studio
    kept, other, changed = requests.Session(), requests.Session(), requests.Session()
    with serving(db_path, root) as server:
        for session in (kept, other, changed):
            log_in(server.origin, session)
        assert user(server.origin, kept) == ANNOTATOR[0]
    with serving(db_path, root) as server:  # the same database, a new process' worth of state
        assert user(server.origin, kept) == ANNOTATOR[0]  # None before: everyone logged in again
        answer = kept.post(f"{server.origin}/logout", timeout=30, allow_redirects=False)
        assert answer.status_code in (302, 303), answer.status_code
        assert user(server.origin, kept) is None
        assert user(server.origin, other) is None  # a logout ends every session of the user, unseen ones too
        log_in(server.origin, changed)
    with serving(db_path, root) as server:
        assert user(server.origin, changed) == ANNOTATOR[0]
        db = open_db(db_path)
        try:
            accounts.set_password(db, ANNOTATOR[0], "hana-password-2")
        finally:
            db.conn.close()
        time.sleep(1.2)  # the epoch is re-read at most once a second per user
        assert user(server.origin, changed) is None
    with serving(db_path, root) as server:
        assert user(server.origin, changed) is None
