"""The login form says why a login was refused (issue 37, items 3 and 7): a locked-out user typing the right
password was told "Incorrect Credentials" (the server had answered 429), and so was a deactivated account.
Gradio's form shows its message for a 400 only; the script RequestGuard adds to the page shows the server's."""
from __future__ import annotations

import pytest
import requests

from helpers import serving

from labeler.services.data.login_guard import ThrottlePolicy

pytestmark = [pytest.mark.slow, pytest.mark.browser]

LOCKED = ("lena", "lena-password-1")
GONE = ("dora", "dora-password-1")


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model_dir):
    from labeler.services.data import accounts
    from labeler.services.serving import models
    from storage import open_db

    root = tmp_path_factory.mktemp("login-messages")
    db_path = str(root / "studio.db")
    db = open_db(db_path)
    try:
        accounts.create_user(db, "root", "root-password-1", role="admin")
        accounts.create_user(db, *LOCKED)
        accounts.create_user(db, *GONE)
        accounts.set_active(db, GONE[0], False)
        models.register_model(db, "tiny", str(tiny_model_dir), "policy")
    finally:
        db.conn.close()
    with serving(db_path, root, model="tiny",
                 login_throttle=ThrottlePolicy(free_failures=2, base_delay_s=60.0, max_delay_s=120.0)) as served:
        yield served.origin


def submit(page, username: str, password: str) -> None:
    page.fill("input[type=text]", username)
    page.fill("input[type=password]", password)
    with page.expect_response(lambda r: r.url.endswith("/login") and r.request.method == "POST"):
        page.click("button:has-text('Login')")


def test_the_login_form_says_locked_out_for_how_long_and_deactivated(server, browser):
    page = browser.new_page()
    page.goto(server)
    page.wait_for_selector("input[type=password]", timeout=30_000)
    submit(page, LOCKED[0], "wrong-password")
    page.wait_for_selector("text=Incorrect Credentials", timeout=10_000)  # a wrong password: Gradio's own words
    assert page.locator("#studio-login-refusal").count() == 0
    # Another wrong password from this machine: the account now waits 60 s here.
    assert requests.post(f"{server}/login", data={"username": LOCKED[0], "password": "wrong-2"},
                         timeout=60).status_code == 400
    submit(page, *LOCKED)  # the right password, too early
    refusal = page.locator("#studio-login-refusal")
    refusal.wait_for(timeout=10_000)
    assert refusal.inner_text().startswith("Too many wrong passwords: try again in ")
    assert "this account from this address must wait" in refusal.inner_text()
    assert not page.locator("text=Incorrect Credentials").is_visible()
    submit(page, *GONE)
    page.wait_for_function(
        "document.getElementById('studio-login-refusal').textContent.includes('deactivated')", timeout=10_000)
    assert refusal.inner_text() == "This account is deactivated: ask an admin to reactivate it."
    submit(page, GONE[0], "not-her-password")  # a wrong password tells nothing about the account
    page.wait_for_selector("text=Incorrect Credentials", timeout=10_000)
    assert page.locator("#studio-login-refusal").count() == 0
    page.close()
