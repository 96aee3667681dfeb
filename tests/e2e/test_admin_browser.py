"""A real browser (headless Chromium): a wrong field keeps the tab (issue 14 item 7), the one-time password
is replaced at the first login (item 10), and the Arena of a fresh install explains why it cannot battle yet
(item 6)."""
from __future__ import annotations

import pytest
from helpers import serving

pytestmark = [pytest.mark.slow, pytest.mark.browser]
SCREENSHOT = "/tmp/rlhf-studio-admin-warning.png"


def error_badges(page) -> int:
    # Gradio's StatusTracker covers a failed output with a block whose text is "Error".
    return page.evaluate(
        "() => [...document.querySelectorAll('.wrap.error, .error')].filter(e => e.offsetParent !== null"
        " && e.innerText.trim().startsWith('Error')).length"
    )


def test_a_wrong_setting_is_a_warning_and_the_admin_tab_keeps_its_tables(running_app, login):
    page = login(running_app.url, *running_app.admin)
    page.click("button[role=tab]:has-text('Admin')")
    page.wait_for_selector(f"#admin-users >> text={running_app.browser_annotator[0]}", timeout=20_000)
    users_before = page.inner_text("#admin-users")
    # An inverted scale: lowest 9 above highest 7.
    low = page.locator("#admin-likert-min input")
    low.fill("9")
    page.click("#admin-save-project")
    toast = page.wait_for_selector(".toast-body, [data-testid=toast-body]", timeout=20_000)
    assert "likert" in toast.inner_text().lower()
    page.wait_for_timeout(500)
    page.screenshot(path=SCREENSHOT)
    assert error_badges(page) == 0
    assert page.inner_text("#admin-users") == users_before  # the table is still there, unchanged
    assert page.locator("#admin-likert-min input").input_value() == "9"  # the typed value stays to be fixed
    page.close()


def test_the_one_time_password_must_be_replaced_at_the_first_login(running_app, login):
    from labeler.services.data import accounts
    from storage import open_db

    username, one_time, chosen = "firstlogin", "one-time-password-1", "my-own-password-1"
    db = open_db(running_app.db_path)
    try:
        accounts.create_user(db, username, one_time, role="admin")
        # What accounts.ensure_admin does for the admin `serve` creates on the first start.
        db.execute("UPDATE users SET must_change_password = 1 WHERE username = ?", [username])
    finally:
        db.conn.close()

    page = login(running_app.url, username, one_time, ready="#studio-password-panel")
    assert not page.is_visible("#rate-submit") and not page.is_visible("button[role=tab]:has-text('Rate')")
    page.fill("#studio-current-password input", one_time)
    page.fill("#studio-new-password input", chosen)
    page.fill("#studio-repeat-password input", chosen)
    page.click("#studio-change-password")
    # Back to the login page: the old session ended with the old password.
    page.wait_for_selector("input[type=password] >> nth=0", timeout=30_000)
    page.wait_for_selector("button:has-text('Login')", timeout=30_000)
    page.close()

    page = login(running_app.url, username, chosen)
    assert not page.is_visible("#studio-password-panel")
    page.close()
    db = open_db(running_app.db_path)
    try:
        assert accounts.get_user(db, username).must_change_password is False
        assert accounts.authenticate(db, username, one_time) is None
    finally:
        db.conn.close()


@pytest.fixture(scope="module")
def fresh_install(tmp_path_factory):
    """A second server as `serve` leaves a fresh install: one admin and the embedded 'default' model only."""
    from labeler.services.data import accounts
    from storage import open_db

    root = tmp_path_factory.mktemp("fresh-install")
    db = open_db(str(root / "studio.db"))
    accounts.create_user(db, "admin", "admin-password-1", role="admin")
    db.conn.close()
    with serving(root / "studio.db", root, model="default") as server:
        yield server.url


def test_arena_on_a_fresh_install_explains_and_disables_battle(fresh_install, login):
    page = login(fresh_install, "admin", "admin-password-1")
    page.click("button[role=tab]:has-text('Arena')")
    page.wait_for_selector("#arena-not-ready", state="visible", timeout=20_000)
    assert "only one is registered ('default')" in page.inner_text("#arena-not-ready")
    assert page.is_disabled("#arena-start")
    # Blind: the model pickers are folded away and set to random, so no name shows before a vote.
    assert not page.is_visible("#arena-model-1")
    page.wait_for_timeout(300)
    page.screenshot(path="/tmp/rlhf-studio-arena-fresh.png")
    assert error_badges(page) == 0
    page.close()
