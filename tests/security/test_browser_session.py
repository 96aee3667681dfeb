"""The same rules from a real browser (issue 25): its login form posts multipart (a login, not an upload), the
Log out button ends the session with a POST, and uploads from the page are an admin's, one file at a time.
"""
from __future__ import annotations

import os
import shutil

import pytest
from helpers import serving

pytestmark = [pytest.mark.reliability, pytest.mark.browser]

ADMIN = ("root", "root-password-1")
ANNOTATOR = ("hana", "hana-password-1")
UPLOAD = """async ([count]) => {
    const form = new FormData();
    for (let k = 0; k < count; k++) form.append('files', new Blob(['A prompt\\n']), `p${k}.txt`);
    const answer = await fetch('gradio_api/upload', {method: 'POST', body: form, credentials: 'same-origin'});
    return [answer.status, await answer.text()];
}"""
WHO = "async () => (await fetch('gradio_api/user', {credentials: 'same-origin'})).json()"


@pytest.fixture(scope="module")
def chromium():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("no chromium on PATH (scripts/setup.sh installs it)")
        pytest.skip("no chromium on PATH")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def url(tmp_path_factory, tiny_model_dir):
    from labeler.services.data import accounts
    from labeler.services.serving import models
    from storage import open_db

    root = tmp_path_factory.mktemp("browser-session")
    db_path = str(root / "studio.db")
    db = open_db(db_path)
    try:
        accounts.create_user(db, *ADMIN, role="admin")
        accounts.create_user(db, *ANNOTATOR)
        models.register_model(db, "tiny", str(tiny_model_dir), "policy")
    finally:
        db.conn.close()
    with serving(db_path, root, model="tiny") as server:
        yield server.url


def _log_in(chromium, url: str, credentials: tuple[str, str]):
    page = chromium.new_page()
    page.goto(url)
    page.wait_for_selector("input[type=password]", timeout=60_000)
    page.fill("input[type=text]", credentials[0])
    page.fill("input[type=password]", credentials[1])
    page.click("button:has-text('Login')")
    page.wait_for_selector(f"#studio-whoami:has-text('Logged in as {credentials[0]}')", timeout=60_000)
    return page


def test_the_browser_logs_in_uploads_as_admin_only_and_logs_out_with_post(chromium, url):
    page = _log_in(chromium, url, ANNOTATOR)  # the login form's multipart body is not taken for an upload
    status, text = page.evaluate(UPLOAD, [1])
    assert status == 403 and "admins only" in text
    page.click("#studio-logout")
    page.wait_for_selector("button:has-text('Login')", timeout=60_000)
    assert page.evaluate(WHO) is None  # the session ended
    page.close()

    page = _log_in(chromium, url, ADMIN)
    status, text = page.evaluate(UPLOAD, [1])
    assert status == 200 and text.count("p0.txt") == 1, text
    status, text = page.evaluate(UPLOAD, [2])
    assert status == 413 and "at most 1 file(s)" in text
    assert page.evaluate(WHO) == ADMIN[0]
    page.close()
