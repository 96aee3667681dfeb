"""Issue 14 item 11 in a real browser (headless Chromium): Undo says it takes back a skip, Rate's keys flash no
"processing" overlay, guidelines change without a reload and Rank has its own, the export switches show their
whole names, a deactivated user's reload says so, and an admin on an empty project sees the first steps."""
from __future__ import annotations

import pytest
from test_admin_browser import error_badges, fresh_install  # noqa: F401 - fixture

from labeler.services.data import accounts
from labeler.services.data.projects import DEFAULT_GUIDELINES, update_project
from storage import open_db

pytestmark = [pytest.mark.slow, pytest.mark.browser]

# Polls every frame while keys are pressed: did a status overlay (Gradio's StatusTracker, `.wrap.default` or
# `.wrap.center`) show "processing" over a widget? With show_progress="hidden" it stays in the DOM but has the
# `hide` class and opacity 0.
WATCH_PROCESSING = """() => {
  window.__sawProcessing = [];
  const look = () => {
    for (const e of document.querySelectorAll('.wrap.default, .wrap.center'))
      if (!e.classList.contains('hide') && getComputedStyle(e).opacity !== '0' && /processing/i.test(e.innerText))
        window.__sawProcessing.push((e.closest('[id]') || {}).id || '?');
    window.__watching = requestAnimationFrame(look);
  };
  look();
}"""


def make_user(running_app, username: str, role: str = "annotator") -> tuple[str, str]:
    password = f"{username}-password-1"
    db = open_db(running_app.db_path)
    try:
        if accounts.get_user(db, username) is None:
            accounts.create_user(db, username, password, role=role)
    finally:
        db.conn.close()
    return username, password


def toast_text(page) -> str:
    return page.wait_for_selector(".toast-body, [data-testid=toast-body]", timeout=20_000).inner_text()


def test_undo_after_a_skip_brings_the_item_back_and_says_so(running_app, login):
    page = login(running_app.url, *make_user(running_app, "erin"))
    page.wait_for_function("() => document.querySelector('#rate-key input, #rate-key textarea')?.value")
    skipped = page.inner_text("#rate-response")
    page.evaluate(WATCH_PROCESSING)
    page.keyboard.press("s")
    page.wait_for_function("(before) => document.querySelector('#rate-response').innerText !== before", arg=skipped)
    page.keyboard.press("u")
    assert "Undid your last skip" in toast_text(page)
    page.wait_for_function("(before) => document.querySelector('#rate-response').innerText === before", arg=skipped)
    # Digits score and submit; none of these keys put a "processing" overlay over the widgets.
    for key in "345":
        before = page.inner_text("#rate-response")
        page.keyboard.press(key)
        page.wait_for_function("(b) => document.querySelector('#rate-response').innerText !== b", arg=before)
    page.wait_for_timeout(300)
    seen = page.evaluate("() => [...new Set(window.__sawProcessing)]")
    assert seen == []
    assert error_badges(page) == 0
    page.close()


def test_guidelines_follow_the_admin_without_a_reload_and_rank_has_its_own(running_app, login):
    page = login(running_app.url, *running_app.admin)
    try:
        page.wait_for_selector(f"#rate-guidelines >> text={DEFAULT_GUIDELINES['rating'][:30]}", timeout=20_000)
        page.click("button[role=tab]:has-text('Rank')")
        page.wait_for_selector(f"#rank-guidelines >> text={DEFAULT_GUIDELINES['ranking'][:30]}", timeout=20_000)
        page.click("button[role=tab]:has-text('Admin')")
        # Admin shows the text annotators see, not an empty box.
        box = page.locator("#admin-guidelines textarea")
        page.wait_for_function("() => document.querySelector('#admin-guidelines textarea').value.length > 0")
        assert box.input_value() == DEFAULT_GUIDELINES["rating"]
        assert page.locator("#admin-ranking-guidelines textarea").input_value() == DEFAULT_GUIDELINES["ranking"]
        box.fill("Rate with **care**, browser test.")
        page.locator("#admin-ranking-guidelines textarea").fill("Rank with care, browser test.")
        page.click("#admin-save-project")
        assert "saved" in toast_text(page)
        page.click("button[role=tab]:has-text('Rate')")
        page.wait_for_selector("#rate-guidelines >> text=browser test", timeout=20_000)
        assert "Rate with care, browser test." in page.inner_text("#rate-guidelines")
        page.click("button[role=tab]:has-text('Rank')")
        page.wait_for_selector("#rank-guidelines >> text=Rank with care, browser test.", timeout=20_000)
        assert error_badges(page) == 0
    finally:
        page.close()
        db = open_db(running_app.db_path)
        update_project(db, running_app.project, guidelines="", ranking_guidelines="")
        db.conn.close()


def test_export_switches_show_their_whole_names(running_app, login):
    page = login(running_app.url, *running_app.admin)
    page.click("button[role=tab]:has-text('Data')")
    page.click("text=3. Export labels as a dataset")
    page.wait_for_selector("#data-export-switches", state="visible", timeout=20_000)
    page.wait_for_timeout(300)
    page.screenshot(path="/tmp/rlhf-studio-export-switches.png", full_page=True)
    labels = page.evaluate(
        """() => [...document.querySelectorAll('#data-export-switches label')].map(label => {
             const text = [...label.querySelectorAll('span')].map(s => s.innerText).join(' ').trim();
             const box = label.getBoundingClientRect();
             const block = label.closest('.block').getBoundingClientRect();
             return {text, width: box.width, fits: box.right <= block.right + 1 && label.scrollWidth <= label.clientWidth + 1};
           })"""
    )
    assert {entry["text"] for entry in labels} >= {"Also turn ratings into preference pairs", "Chat format (messages)",
                                                   "Standardise each annotator's scores (z-scores)"}
    assert all(entry["fits"] for entry in labels), labels
    page.close()


def test_a_deactivated_users_reload_says_the_account_is_deactivated(running_app, login):
    username, password = make_user(running_app, "frank")
    page = login(running_app.url, username, password)
    db = open_db(running_app.db_path)
    try:
        accounts.set_active(db, username, False)
    finally:
        db.conn.close()
    page.reload()
    page.wait_for_selector("#studio-deactivated", timeout=20_000)
    text = page.inner_text("#studio-deactivated")
    assert "Account deactivated" in text and username in text
    assert error_badges(page) == 0
    page.screenshot(path="/tmp/rlhf-studio-deactivated.png")
    # Its link logs out: the login page for another account.
    page.click("text=Log in with another account")
    page.wait_for_selector("button:has-text('Login')", timeout=20_000)
    assert "deactivated account cannot log in" in page.inner_text("body")
    page.close()


def test_first_steps_for_an_admin_on_an_empty_project(fresh_install, login):
    page = login(fresh_install, "admin", "admin-password-1")
    panel = page.wait_for_selector("#studio-first-steps", state="visible", timeout=20_000)
    text = panel.inner_text()
    assert "First steps" in text and "Import prompts" in text and "Generate answers" in text and "Train" in text
    assert text.count("⬜") == 4
    page.screenshot(path="/tmp/rlhf-studio-first-steps.png")
    page.close()
