"""Issue 37 item 2: after a refused label the keyboard answers at once.

Rate: Submit with no score is refused (a toast); the digit typed next used to wait 19.5 s, because Gradio 6.31 runs a
`.then` only after a success and shortcuts.js waited for its done signal until STUCK_MS (20 s). Rank: the same
after Enter on an incomplete ranking. Now DONE_JS also follows a failure (labelling.wire).
"""
from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]
USER = ("keys-after-refusal", "keys-after-refusal-password-1")
PROMPT = "Issue 37: a prompt to rank after a refused ranking"


def _setup(db_path: str) -> None:
    from service_seed import add_answered_prompt

    from labeler.services.data import accounts
    from storage import open_db

    db = open_db(db_path)
    try:
        accounts.create_user(db, *USER)
    finally:
        db.conn.close()
    for k in range(3):  # rating items of its own, so other tests' labels cannot empty this user's queue
        add_answered_prompt(db_path, f"Issue 37: a prompt to rate after a refused score {k}", 1, "rating", "e2e-keys")
    add_answered_prompt(db_path, PROMPT, 3, "ranking", "e2e-keys")  # in case earlier tests ranked the seeded ones


def _labels(db_rows, db_path: str, table: str) -> list[dict]:
    return db_rows(db_path, f"SELECT l.id FROM {table} l JOIN users u ON u.id = l.user_id WHERE u.username = ?",
                   [USER[0]])


def _seconds_until(predicate, limit: float = 30.0) -> float:
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < limit, "never happened"
        time.sleep(0.02)
    return time.monotonic() - started


def test_a_key_after_a_refused_label_is_sent_at_once(running_app, login, db_rows):
    _setup(running_app.db_path)
    page = login(running_app.url, *USER)
    page.wait_for_function("() => document.getElementById('rate-counter').innerText.includes('done')")

    # Rate: Submit with no score picked is refused ...
    page.click("#rate-submit")
    page.wait_for_selector("text=Pick a score first", timeout=20_000)
    page.wait_for_timeout(300)  # the refusal's failure event has run by now
    # ... and the digit typed next is a label within a second (it waited 19.5 s).
    page.click("#rate-counter")
    page.keyboard.press("4")
    rated = _seconds_until(lambda: len(_labels(db_rows, running_app.db_path, "ratings")) == 1)
    assert rated < 1.0, f"the key after a refused submit took {rated:.2f} s"

    # Rank: Enter on an incomplete ranking is refused; the full ranking typed next is stored at once.
    page.click("button[role=tab]:has-text('Rank')")
    page.wait_for_selector("#rank-slot-3", state="visible", timeout=20_000)  # an item of 3 (every one here)
    page.click("#rank-counter")
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    page.wait_for_selector("text=has no rank", timeout=20_000)
    page.wait_for_timeout(300)
    for key in ["3", "1", "2"]:
        page.keyboard.press(key)
    page.keyboard.press("Enter")
    ranked = _seconds_until(lambda: len(_labels(db_rows, running_app.db_path, "rankings")) == 1)
    assert ranked < 1.0, f"the ranking after a refused one took {ranked:.2f} s"
    page.close()
