"""A running server against what a probe found (issue 25): a stranger cannot lock the owner out, the throttle is
counted before the password check (also for the password change), bodies are capped before anything reads them,
uploads are an admin's, logout is a POST, and the plain-HTTP cookie twin is not sent over TLS.

A server of its own: these tests throttle addresses and accounts. Logins come from 127.0.0.2, .3 and .4 (the
whole 127/8 is loopback on Linux), so each test's address starts clean.
"""
from __future__ import annotations

import json
import socket
import threading
import time

import pytest
import requests
from helpers import login, serving, session_from

gradio_client = pytest.importorskip("gradio_client")
from gradio_client import Client  # noqa: E402
from gradio_client.exceptions import AppError  # noqa: E402

from labeler.services.data.login_guard import ThrottlePolicy  # noqa: E402

pytestmark = pytest.mark.reliability

ADMIN = ("root", "root-password-1")
ANNOTATOR = ("hana", "hana-password-1")
OWNER = ("olga", "olga-password-1")  # the stranger guesses at this one
PARALLEL = ("pia", "pia-password-1")  # 14 parallel guesses
CHANGER = ("carl", "carl-password-1")  # a hijacked session guesses the current password
LEAVER = ("lea", "lea-password-1")  # logs out
# A long first penalty, so that nothing in a test outlives it by accident.
POLICY = ThrottlePolicy(free_failures=5, base_delay_s=60.0, max_delay_s=600.0)
UPLOAD_BYTES = 2_000_000


@pytest.fixture(scope="module")
def app(tmp_path_factory, tiny_model_dir):
    from labeler.services.data import accounts
    from labeler.services.serving import models
    from storage import open_db

    root = tmp_path_factory.mktemp("server-hardening")
    db_path = str(root / "studio.db")
    db = open_db(db_path)
    try:
        accounts.create_user(db, *ADMIN, role="admin")
        for user in (ANNOTATOR, OWNER, PARALLEL, CHANGER, LEAVER):
            accounts.create_user(db, *user)
        models.register_model(db, "tiny", str(tiny_model_dir), "policy")
    finally:
        db.conn.close()
    with serving(db_path, root, model="tiny", login_throttle=POLICY, max_file_size=f"{UPLOAD_BYTES}b",
                 max_upload_files=1, forwarded_allow_ips=("127.0.0.1",)) as server:  # the TLS test's proxy is here
        yield {"url": server.origin, "port": server.port, "db_path": db_path}


def test_a_stranger_guessing_from_one_address_does_not_lock_the_owner_out(app):
    url = app["url"]
    stranger, owner = session_from("127.0.0.2"), session_from("127.0.0.3")
    codes = [login(url, (OWNER[0], f"wrong-guess-{k}"), stranger).status_code for k in range(8)]
    assert codes == [400] * 5 + [429] * 3
    assert login(url, OWNER, stranger).status_code == 429  # the guessing address waits, right password or not
    answer = login(url, OWNER, owner)
    assert answer.status_code == 200, answer.text  # 429 before: the lock was per account, from any address
    assert owner.get(f"{url}/gradio_api/user", timeout=30).json() == OWNER[0]


def test_parallel_wrong_logins_get_five_password_checks(app):
    url = app["url"]
    start = threading.Barrier(14)
    codes = []

    def guess(k: int):
        session = session_from("127.0.0.4")
        start.wait()
        codes.append(login(url, (PARALLEL[0], f"wrong-{k}"), session).status_code)

    threads = [threading.Thread(target=guess, args=(k,)) for k in range(14)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # 400: the password was checked and wrong; 429: refused before any check. 10 checks before.
    assert sorted(codes) == [400] * 5 + [429] * 9, codes


def test_the_password_change_is_throttled_like_a_login(app):
    url = app["url"]
    client = Client(url, auth=CHANGER, verbose=False)
    for k in range(5):
        with pytest.raises(AppError, match="is not your current password"):
            client.predict(f"wrong-{k}", "new-password-123", "new-password-123", api_name="/change_own_password")
    start = time.monotonic()
    with pytest.raises(AppError, match="Too many wrong passwords: try again in"):
        client.predict(CHANGER[1], "new-password-123", "new-password-123", api_name="/change_own_password")
    assert time.monotonic() - start < 5
    # The same throttle as the login form: this address now waits to log in as carl, too.
    assert login(url, CHANGER, requests.Session()).status_code == 429
    assert login(url, CHANGER, session_from("127.0.0.5")).status_code == 200  # the owner elsewhere is not locked


def _raw_post(port: int, path: str, headers: dict[str, str], body: bytes = b"") -> tuple[int, float]:
    """(status, seconds to the answer) of a POST whose headers are sent but whose declared body is not: a server
    that read the body before answering would wait for it (and time out)."""
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", *(f"{k}: {v}" for k, v in headers.items()), "", ""]
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall("\r\n".join(lines).encode() + body)
        answer = sock.recv(4096).decode("latin-1")
    return int(answer.split()[1]), time.monotonic() - start


def test_a_big_body_is_refused_with_413_before_it_is_read_or_the_login_checked(app):
    port = app["port"]
    # 20 MB declared, none of it sent: answered at once, anonymous, before parsing or the login check.
    status, seconds = _raw_post(port, "/gradio_api/queue/join",
                                {"Content-Type": "application/json", "Content-Length": "20000000"})
    assert status == 413 and seconds < 5
    # A chunked body (no length declared) is cut off once it passes 1 MB.
    def chunks():
        for _ in range(40):
            yield b"[" * 100_000

    answer = requests.post(f"{app['url']}/gradio_api/queue/join", data=chunks(),
                           headers={"Content-Type": "application/json"}, timeout=60)
    assert answer.status_code == 413 and "at most 1,000,000 bytes" in answer.text
    # An ordinary event still goes through.
    client = Client(app["url"], auth=ANNOTATOR, verbose=False)
    assert "Logged in as **hana**" in str(client.predict(api_name="/whoami"))


def _upload(url: str, session: requests.Session, files: int, size: int = 1000) -> requests.Response:
    parts = [("files", (f"f{k}.txt", b"x" * size, "text/plain")) for k in range(files)]
    return session.post(f"{url}/gradio_api/upload", files=parts, timeout=60)


def test_uploads_are_an_admins_with_a_size_and_a_count(app):
    url = app["url"]
    anonymous = requests.Session()
    assert _upload(url, anonymous, 1).status_code == 403
    annotator = requests.Session()
    assert login(url, ANNOTATOR, annotator).status_code == 200
    refused = _upload(url, annotator, 1)
    assert refused.status_code == 403 and "admins only" in refused.text
    admin = requests.Session()
    assert login(url, ADMIN, admin).status_code == 200
    accepted = _upload(url, admin, 1)
    assert accepted.status_code == 200, accepted.text
    assert len(accepted.json()) == 1
    two = _upload(url, admin, 2)  # two files in one request: the count is 1
    assert two.status_code == 413 and "at most 1 file(s)" in two.text
    status, _ = _raw_post(app["port"], "/gradio_api/upload", {
        "Content-Type": "multipart/form-data; boundary=xyz", "Content-Length": str(3 * UPLOAD_BYTES),
        "Cookie": "; ".join(f"{k}={v}" for k, v in admin.cookies.items())})
    assert status == 413  # over the size, refused before the body is sent


def test_logout_is_post_only_and_not_from_another_site(app):
    url = app["url"]
    session = requests.Session()
    assert login(url, LEAVER, session).status_code == 200
    link = session.get(f"{url}/logout", allow_redirects=False, timeout=30)  # what a link or an <img> does
    assert link.status_code == 405 and link.headers["Allow"] == "POST"
    assert session.get(f"{url}/gradio_api/user", timeout=30).json() == LEAVER[0]  # still logged in
    foreign = session.post(f"{url}/logout", headers={"Origin": "http://evil.example"}, allow_redirects=False,
                           timeout=30)
    assert foreign.status_code == 403
    assert session.get(f"{url}/gradio_api/user", timeout=30).json() == LEAVER[0]
    done = session.post(f"{url}/logout", headers={"Origin": url}, allow_redirects=False, timeout=30)
    assert done.status_code == 302
    assert requests.get(f"{url}/gradio_api/user", cookies=dict(session.cookies), timeout=30).json() is None


def test_the_plain_http_cookie_twin_is_not_set_over_tls(app):
    url = app["url"]
    plain = login(url, ANNOTATOR, requests.Session())
    names = [c.split("=", 1)[0] for c in plain.raw.headers.getlist("set-cookie") if c.startswith("access-token")]
    assert len(names) == 2 and any(n.startswith("access-token-unsecure-") for n in names)
    # Behind a TLS proxy on this machine (named with forwarded_allow_ips), or TLS itself.
    tls = requests.post(f"{url}/login", data={"username": ANNOTATOR[0], "password": ANNOTATOR[1]},
                        headers={"X-Forwarded-Proto": "https"}, timeout=30)
    cookies = [c for c in tls.raw.headers.getlist("set-cookie") if c.startswith("access-token")]
    assert tls.status_code == 200 and len(cookies) == 1, cookies
    assert cookies[0].startswith("access-token-") and "Secure" in cookies[0] and "unsecure" not in cookies[0]


def test_a_file_given_by_url_is_refused_before_any_fetch(app, monkeypatch):
    """Issue 36 item 6: an annotator's FileData naming http://... made the server resolve the host (Gradio fetches
    it while preparing the inputs, before the handler's role check). Now refused by the guard, unread."""
    lookups = []
    real = socket.getaddrinfo

    def recording(host, *args, **kwargs):
        lookups.append(host)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", recording)  # the server runs in this process
    url = app["url"]
    annotator = requests.Session()
    assert login(url, ANNOTATOR, annotator).status_code == 200
    file_data = {"path": "http://no-such-host.invalid/prompts.csv", "meta": {"_type": "gradio.FileData"},
                 "orig_name": "prompts.csv"}
    for api_name in ("data_import_prompts", "data_import_labels"):
        answer = annotator.post(f"{url}/gradio_api/call/{api_name}", json={"data": [file_data]}, timeout=30)
        assert answer.status_code == 403 and "file given by URL is refused" in answer.text, answer.text
    # Spelled with JSON escapes, inside a list: still found.
    escaped = ('{"data": [[{"path": "https://no-such-host.invalid/x", "meta": {"_type": "gradio.File\\u0044ata"}}]]}')
    answer = annotator.post(f"{url}/gradio_api/call/data_import_prompts", data=escaped,
                            headers={"Content-Type": "application/json"}, timeout=30)
    assert answer.status_code == 403
    time.sleep(0.5)
    assert "no-such-host.invalid" not in lookups
    # An ordinary event of the annotator still goes through the read-ahead body.
    client = Client(url, auth=ANNOTATOR, verbose=False)
    assert "Logged in as **hana**" in str(client.predict(api_name="/whoami"))
