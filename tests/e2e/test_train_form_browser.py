"""The Train tab made for a person (issue 24), in a real browser (headless Chromium): a short form in plain
words per trainer (what it trains, from which model, on which labels, with which reward, for how long), the
rest folded under "Advanced settings", the metric list folded under "All metrics"."""
from __future__ import annotations

import re

import pytest

from labeler.services.serving import models
from labeler.services.settings import reward_spec
from storage import open_db

pytestmark = [pytest.mark.slow, pytest.mark.browser]
SCREENSHOT = "/tmp/rlhf-studio-train-form.png"
RAW_NAME = re.compile(r"\b[a-z]+_[a-z0-9_]+\b")  # a config field's name, e.g. per_device_train_batch_size
# The labels (not the help lines) of every widget shown now.
SHOWN_LABELS = """() => [...document.querySelectorAll('[data-testid=block-info], label > span')]
    .filter(e => e.offsetParent !== null).map(e => e.innerText.trim()).filter(Boolean)"""


def test_a_short_form_in_plain_words_with_the_rest_folded(running_app, login):
    page = login(running_app.url, *running_app.admin, ready="button[role=tab]:has-text('Train')", height=1600)
    page.click("button[role=tab]:has-text('Train')")
    page.wait_for_selector("#train-stage", state="visible")
    labels = page.evaluate(SHOWN_LABELS)
    assert "What to train" in labels and "Start from model" in labels and "How long (training steps)" in labels
    assert "Reward model" in labels and "Also turn ratings into preference pairs" in labels
    assert [label for label in labels if RAW_NAME.search(label)] == []
    # Folded: the trainer's own settings, the key=value box and the list of every metric.
    for folded in ("#train-advanced", "#train-metrics", "#train-learning-rate"):
        assert page.locator(folded).count() == 0 or page.locator(folded).first.is_hidden()
    # A policy run asks where its reward comes from, in the short form.
    page.click("#train-stage label:has-text('PPO')")
    page.wait_for_selector("#train-reward", state="visible")
    assert "Generates answers, scores them" in page.inner_text("#train-stage-note")
    labels = page.evaluate(SHOWN_LABELS)
    assert "Reward" in labels and "Reward function" not in labels  # one picker says where rewards come from
    assert [label for label in labels if RAW_NAME.search(label)] == []
    # Its options are in plain words; each sends a reward spec (tests/ui/test_train_tab.py checks the values).
    page.click("#train-reward input")
    options = [text.replace("✓", "").strip() for text in page.locator("ul[role=listbox] li").all_inner_texts()]
    # The shared e2e app's registry holds whatever reward models earlier tests registered: each one is offered,
    # alone and with people, after the three that need none.
    db = open_db(running_app.db_path)
    try:
        rewards = [m["name"] for m in models.list_models(db, kind="reward")]
    finally:
        db.conn.close()
    assert options[:3] == ["Sentiment (VADER)", "Sentiment of prompt + answer (VADER)", "People rate the answers"]
    assert options == [label for label, _ in reward_spec.choices(rewards)]
    assert options[3].startswith("Newest reward model") and any(o.startswith("People + newest") for o in options)
    page.keyboard.press("Escape")
    page.screenshot(path=SCREENSHOT, full_page=True)
    # One click shows the rest, still in plain words.
    page.click("text=Advanced settings")
    page.wait_for_selector("#train-advanced", state="visible")
    labels = page.evaluate(SHOWN_LABELS)
    assert "Answers per step" in labels and "Passes over each batch" in labels and "Answer length (new tokens)" in labels
    assert [label for label in labels if RAW_NAME.search(label)] == []
    page.close()
