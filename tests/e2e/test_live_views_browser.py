"""Issue 24 item 3 in a real browser (headless Chromium): views follow the database without a reload. Answers
generated in the background reach an annotator's empty Rate and Rank queues, the admin's Data counts, latest
prompts and first-steps panel; a model registered after the page loaded is offered by the Arena and the Chat
when their tab is opened."""
from __future__ import annotations

import pytest
from helpers import serving

pytestmark = [pytest.mark.slow, pytest.mark.browser]
ADMIN = ("admin", "admin-password-1")
ANNOTATOR = ("lena", "lena-password-1")
PROMPTS = ["A film about a lighthouse keeper and", "The sequel nobody asked for"]


@pytest.fixture(scope="module")
def quiet_app(tmp_path_factory, tiny_model_dir):
    """A server with prompts but no answers yet, one admin and one annotator; --model is the embedded default
    (never loaded here), so the arena starts with one model."""
    from labeler.services.data import accounts, prompts
    from storage import open_db

    root = tmp_path_factory.mktemp("live-views")
    db_path = str(root / "studio.db")
    db = open_db(db_path)
    accounts.create_user(db, *ADMIN, role="admin")
    accounts.create_user(db, *ANNOTATOR)
    prompts.add_prompts(db, PROMPTS, source="live")
    db.conn.close()
    with serving(db_path, root, model="default") as server:
        yield server.url, db_path, str(tiny_model_dir)


def add_answers(db_path: str) -> None:
    """What a background generation leaves: two answers per prompt and their rating and ranking items."""
    from labeler.services.data import labeling
    from labeler.services.data.responses import insert_response
    from storage import open_db, write_transaction

    db = open_db(db_path)
    try:
        with write_transaction(db):
            for prompt_id, text in db.execute("SELECT id, text FROM prompts").fetchall():
                for k in (1, 2):
                    insert_response(db, prompt_id, f"{text} ... background answer {k}.", model="tiny", source="generated")
        labeling.create_items(db, "default", ranking_size=2)
    finally:
        db.conn.close()


def text_of(page, elem_id: str) -> str:
    return page.evaluate("(id) => (document.getElementById(id) || {}).innerText || ''", elem_id)


def wait_text(page, elem_id: str, text: str, timeout: int = 25_000) -> None:
    page.wait_for_function("([id, t]) => ((document.getElementById(id) || {}).innerText || '').includes(t)",
                           arg=[elem_id, text], timeout=timeout)


def test_views_update_without_a_reload(quiet_app, login, browser):
    url, db_path, model_dir = quiet_app
    annotator = login(url, *ANNOTATOR)
    wait_text(annotator, "rate-prompt", "All done")
    annotator.click("button[role=tab]:has-text('Rank')")
    wait_text(annotator, "rank-prompt", "All done")
    annotator.click("button[role=tab]:has-text('Rate')")

    admin = login(url, *ADMIN, ready="button[role=tab]:has-text('Data')", page=browser.new_page(
        viewport={"width": 1400, "height": 1000}))
    admin.click("button[role=tab]:has-text('Data')")
    wait_text(admin, "data-summary", "No answers yet")
    wait_text(admin, "studio-first-steps", "(0 so far)")
    assert "A film about a lighthouse keeper" in text_of(admin, "data-prompts")

    add_answers(db_path)
    # Rate: the annotator's page, untouched, shows the first new answer and the counts.
    wait_text(annotator, "rate-counter", "4 remaining")
    assert "All done" not in text_of(annotator, "rate-prompt")
    assert "background answer" in text_of(annotator, "rate-response")
    # The admin's Data tab and first-steps panel follow as well.
    wait_text(admin, "data-summary", "4 answers")
    wait_text(admin, "studio-first-steps", "(4 so far)")
    # Prompts imported now show at the top of the latest prompts.
    from labeler.services.data import prompts
    from storage import open_db

    db = open_db(db_path)
    try:
        prompts.add_prompts(db, ["A freshly imported opening line"], source="later")
    finally:
        db.conn.close()
    admin.wait_for_function("() => (document.querySelector('#data-prompts [role=gridcell]:nth-child(2)') || {})"
                            ".innerText?.includes('A freshly imported opening line')", timeout=25_000)

    # Rank: the annotator's Rank tab, showing "All done" before, now has work.
    annotator.click("button[role=tab]:has-text('Rank')")
    wait_text(annotator, "rank-counter", "2 remaining")

    # Arena and Chat: a second model registered after the page loaded is offered when the tab is opened.
    admin.click("button[role=tab]:has-text('Arena')")
    admin.wait_for_selector("#arena-not-ready", state="visible", timeout=20_000)
    from labeler.services.serving import models

    db = open_db(db_path)
    try:
        models.register_model(db, "tiny-two", model_dir, "base")
    finally:
        db.conn.close()
    admin.click("button[role=tab]:has-text('Chat')")
    admin.click("#chat-model input")
    admin.wait_for_selector("ul[role=listbox] li:has-text('tiny-two')", timeout=20_000)
    admin.keyboard.press("Escape")
    admin.click("button[role=tab]:has-text('Arena')")
    admin.wait_for_selector("#arena-not-ready", state="hidden", timeout=20_000)
    assert admin.is_enabled("#arena-start")
    annotator.close()
    admin.close()
