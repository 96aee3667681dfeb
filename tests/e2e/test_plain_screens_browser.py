"""No raw names on any screen (issue 49, item 7), in headless Chromium at 1280 px and at 800 px: every tab's visible
text, read as an admin sees it, holds no config field name, module path, environment variable, raw metric name or
ISO timestamp, and no id that no screen shows."""
from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]

TABS = ["Rate", "Rank", "Arena", "Chat", "Data", "Records", "Train", "Admin"]
# Closed sections opened before reading, per tab (where the issue found raw names).
# (Data's "Sampling settings" is read in tests/ui/test_plain_labels.py: opened here, the page stopped answering on
# this shared machine.)
OPEN = {"Admin": ["Models"]}
FORBIDDEN = {
    "a sampling field name": re.compile(r"\b(max_new_tokens|top_k|top_p|min_length|do_sample)\b"),
    "a field name in a message": re.compile(r"field '\w+'"),
    "a module path": re.compile(r"\b(train_configs|training_stages|labeler|rlhf)\.[a-z_]+|\b\w+\.py\b"),
    "an environment variable": re.compile(r"\bRLHF_STUDIO_[A-Z_]+\b"),
    "a Python expression": re.compile(r"None: min\(|\bmin\(batch_size"),
    "a raw setting name": re.compile(r"\b(online_rm|kl_coef_min|kl_coef|bt_score|ci_low|ci_high)\b|horizon="),
    "a raw split name": re.compile(r"split '(test|train)'"),
    "an id no screen shows": re.compile(r"\bItem id\b"),
    "an ISO timestamp": re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d"),
}


def violations(text: str) -> list[str]:
    found = []
    for what, pattern in FORBIDDEN.items():
        for match in pattern.finditer(text):
            start = max(0, match.start() - 40)
            found.append(f"{what}: ...{text[start:match.end() + 40]!r}...")
    return found


@pytest.mark.parametrize("width", [1280, 800])
def test_every_tab_reads_in_plain_words(running_app, login, browser, width):
    page = browser.new_page(viewport={"width": width, "height": 900})
    login(running_app.url, *running_app.admin, page=page)
    found = []
    for tab in TABS:
        # A script's click: at 800 px the last tabs sit in the tab bar's overflow menu.
        page.locator(f"button[role=tab]:has-text('{tab}')").first.evaluate("b => b.click()")
        page.wait_for_timeout(1500)
        for section in OPEN.get(tab, []):
            # A script's click: on the Train tab a pointer click waits on the run monitor's polling overlay.
            page.locator("button.label-wrap:visible", has_text=section).first.evaluate("b => b.click()")
            page.wait_for_timeout(800)
        text = page.inner_text("body")
        found += [f"{tab}: {v}" for v in violations(text)]
    page.close()
    assert found == [], "\n".join(found)
