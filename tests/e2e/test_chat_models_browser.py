"""Issue 24 items 7-8 in a real browser (headless Chromium): each Chat answer names the model that wrote it, a
rating stores the answer without that line, and picking another model starts a new conversation."""
from __future__ import annotations

import pytest
from test_chat_arena_browser import wait_for_finished_answer
from test_smaller_browser import make_user

pytestmark = [pytest.mark.slow, pytest.mark.browser]
SECOND_MODEL = "tiny-b"
BUBBLES = "() => document.querySelectorAll('#chat-chatbot [data-testid=bot], #chat-chatbot [data-testid=user]').length"


def pick_model(page, name: str) -> None:
    page.click("#chat-model input")
    page.click(f"ul[role=listbox] li:text-is('{name}')")


def test_answers_name_their_model_and_a_new_model_clears_the_chat(running_app, login, db_rows):
    from labeler.services.serving import models
    from storage import open_db

    db = open_db(running_app.db_path)
    try:
        if SECOND_MODEL not in models.chat_model_names(db):
            models.register_model(db, SECOND_MODEL, running_app.model_dir, "base")
    finally:
        db.conn.close()
    username, password = make_user(running_app, "gina")
    page = login(running_app.url, username, password)
    page.click("button[role=tab]:has-text('Chat')")
    page.wait_for_selector("#chat-input", state="visible")
    pick_model(page, running_app.model_name)
    page.fill("#chat-input textarea", "Tell me about the film.")
    page.press("#chat-input textarea", "Enter")
    answer = wait_for_finished_answer(page)
    assert answer.startswith(f"answered by {running_app.model_name}"), answer

    # A rating stores the answer alone, under the model that wrote it.
    page.click("#chat-thumbs-up")
    page.wait_for_function("() => (document.getElementById('chat-rate-status') || {}).innerText?.includes('Stored')",
                           timeout=30_000)
    stored = db_rows(running_app.db_path, "SELECT s.text, s.model FROM ratings r JOIN users u ON u.id = r.user_id"
                     " JOIN responses s ON s.id = r.response_id WHERE u.username = ?", [username])
    assert len(stored) == 1 and stored[0]["model"] == running_app.model_name
    assert "answered by" not in stored[0]["text"] and stored[0]["text"].strip() == answer.split("\n", 1)[-1].strip()

    # Another model: the conversation starts over, and the next answer names the new model.
    assert page.evaluate(BUBBLES) == 2
    pick_model(page, SECOND_MODEL)
    page.wait_for_function(f"() => ({BUBBLES})() === 0", timeout=20_000)
    page.fill("#chat-input textarea", "And the soundtrack?")
    page.press("#chat-input textarea", "Enter")
    assert wait_for_finished_answer(page).startswith(f"answered by {SECOND_MODEL}")
    page.close()
