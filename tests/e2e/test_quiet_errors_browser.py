"""Issue 24 item 9 in a real browser (headless Chromium): a user's wrong input is one log line in the server's
terminal, not a traceback, whichever way the tab refuses it (a red toast, a yellow warning, a chat reply)."""
from __future__ import annotations

import logging

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def toast(page, text: str) -> None:
    page.wait_for_selector(f".toast-body:has-text('{text}'), [data-testid=toast-body]:has-text('{text}')",
                           timeout=30_000)


def test_input_errors_log_one_line_each(running_app, login, capfd, caplog):
    caplog.set_level(logging.WARNING, logger="rlhf_studio.ui")
    page = login(running_app.url, *running_app.admin, ready="button[role=tab]:has-text('Train')", height=1600)
    capfd.readouterr()  # what the server printed before: not this test's
    # Train: a setting that is not a number (a red toast).
    page.click("button[role=tab]:has-text('Train')")
    page.click("text=Advanced settings")
    page.fill("#train-advanced textarea", "steps=many")
    page.click("#train-preview")
    toast(page, "steps")
    # Records: an id that is not a number (a yellow warning, the tab kept).
    page.click("button[role=tab]:has-text('Records')")
    page.fill("#records-open-id textarea, #records-open-id input", "abc")
    page.click("#records-open")
    toast(page, "whole number")
    # Chat: an empty message.
    page.click("button[role=tab]:has-text('Chat')")
    page.click("#chat-send")
    toast(page, "type a message first")
    page.wait_for_timeout(500)
    printed = capfd.readouterr().err
    assert "Traceback" not in printed, printed
    lines = [r.getMessage() for r in caplog.records if r.name == "rlhf_studio.ui"]
    assert len(lines) == 3 and all("\n" not in line for line in lines), lines
    assert "steps" in lines[0] and "whole number" in lines[1] and "type a message first" in lines[2]
    page.close()
