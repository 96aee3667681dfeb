"""Issue 24 item 9 in a real browser (headless Chromium): a user's wrong input is one log line in the server's
terminal, not a traceback, whichever way the tab refuses it (a red toast, a yellow warning, a chat reply)."""
from __future__ import annotations

import logging

import pytest
from helpers import fill_and_keep

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def toast(page, text: str) -> None:
    page.wait_for_selector(f".toast-body:has-text('{text}'), [data-testid=toast-body]:has-text('{text}')",
                           timeout=30_000)


def assert_one_log_line_each(page, capfd, caplog, expected: list[str]) -> None:
    """No traceback on the server's stderr, and one one-line ui log entry per mistake, in order, each naming it."""
    page.wait_for_timeout(500)
    printed = capfd.readouterr().err
    assert "Traceback" not in printed, printed
    lines = [r.getMessage() for r in caplog.records if r.name == "rlhf_studio.ui"]
    assert len(lines) == len(expected) and all("\n" not in line for line in lines), lines
    assert all(words in line for words, line in zip(expected, lines)), lines

def test_input_errors_log_one_line_each(running_app, login, capfd, caplog):
    caplog.set_level(logging.WARNING, logger="rlhf_studio.ui")
    page = login(running_app.url, *running_app.admin, ready="button[role=tab]:has-text('Train')", height=1600)
    capfd.readouterr()  # what the server printed before: not this test's
    # Train: a setting that is not a number (a red toast).
    page.click("button[role=tab]:has-text('Train')")
    page.click("text=Advanced settings")
    fill_and_keep(page, "#train-advanced textarea", "steps=many")
    page.click("#train-preview")
    toast(page, "steps")
    # Records: an id that is not a number (a yellow warning, the tab kept).
    page.click("button[role=tab]:has-text('Records')")
    fill_and_keep(page, "#records-open-id textarea, #records-open-id input", "abc")
    page.click("#records-open")
    toast(page, "whole number")
    # Chat: an empty message.
    page.click("button[role=tab]:has-text('Chat')")
    page.click("#chat-send")
    toast(page, "type a message first")
    assert_one_log_line_each(page, capfd, caplog, ["steps", "whole number", "type a message first"])
    page.close()


QUIET_ANNOTATOR = ("quinn", "quinn-password-1")  # only this test uses these two accounts
FIRST_LOGIN = ("quiet-first", "one-time-password-2")


def _prepare_labelling_and_first_login(db_path: str) -> None:
    """An annotator with a rating item and a 3-answer ranking item of their own to get wrong (the shared app's
    queues may be emptied by earlier tests), and a user who must still replace a one-time password."""
    from labeler.services.data import accounts, labeling, prompts
    from labeler.services.data.responses import insert_response
    from storage import open_db, write_transaction

    db = open_db(db_path)
    try:
        accounts.create_user(db, *QUIET_ANNOTATOR)
        accounts.create_user(db, *FIRST_LOGIN)
        # What accounts.ensure_admin does for the admin `serve` creates on the first start.
        db.execute("UPDATE users SET must_change_password = 1 WHERE username = ?", [FIRST_LOGIN[0]])
        prompt = "A prompt the quiet-errors test gets wrong"
        prompts.add_prompts(db, [prompt], source="e2e-quiet")
        prompt_id = db.execute("SELECT id FROM prompts WHERE text = ?", [prompt]).fetchone()[0]
        # In training: the held-out share may hold a new prompt out, and a held-out prompt takes no training label.
        db.execute("UPDATE prompts SET split = 'train' WHERE id = ?", [prompt_id])
        with write_transaction(db):
            ids = [insert_response(db, prompt_id, f"{prompt}: answer {k}", model="m", source="generated")
                   for k in range(3)]
        labeling.create_items(db, "default", response_ids=ids, ranking_size=3)
    finally:
        db.conn.close()


def test_rate_rank_and_password_form_errors_log_one_line_each(running_app, login, capfd, caplog):
    caplog.set_level(logging.WARNING, logger="rlhf_studio.ui")
    _prepare_labelling_and_first_login(running_app.db_path)
    page = login(running_app.url, *QUIET_ANNOTATOR)
    # An item is shown (its prompt's heading; the box is empty until the page's load event has answered).
    page.wait_for_function("() => document.getElementById('rate-prompt').innerText.trim().startsWith('Prompt')",
                           timeout=30_000)
    capfd.readouterr()  # what the server printed before: not this test's
    # Rate: Submit clicked before a score is picked.
    page.click("#rate-submit")
    toast(page, "Pick a score first")
    # Rank: one answer ranked, the others not.
    page.click("button[role=tab]:has-text('Rank')")
    page.wait_for_selector("#rank-slot-2", state="visible", timeout=30_000)
    page.locator("#rank-slot-1 label").filter(has_text="1").first.locator("input").check()
    page.click("#rank-submit")
    toast(page, "has no rank")
    # The first login's password form: the new password typed differently twice.
    first = login(running_app.url, *FIRST_LOGIN, ready="#studio-password-panel")
    first.fill("#studio-current-password input", FIRST_LOGIN[1])
    first.fill("#studio-new-password input", "my-own-password-2")
    first.fill("#studio-repeat-password input", "my-own-password-3")
    first.click("#studio-change-password")
    toast(first, "differ")
    assert_one_log_line_each(first, capfd, caplog, ["Pick a score first", "has no rank", "differ"])
    page.close()
    first.close()
