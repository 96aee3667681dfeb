"""A real browser (headless Chromium): chat one turn and rate it, cast one arena vote, check SQLite."""
from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]
USER = ("frank", "frank-password-1")  # only this test uses frank, so its rows are its own
SCREENSHOT = "/tmp/rlhf-studio-chat-arena.png"


@pytest.fixture(scope="module")
def page(running_app, tmp_path_factory, chromium_path, login):
    from playwright.sync_api import sync_playwright

    from labeler.services.data import accounts
    from storage import open_db

    db = open_db(running_app.db_path)
    try:
        if accounts.get_user(db, USER[0]) is None:
            accounts.create_user(db, *USER)
    finally:
        db.conn.close()
    with sync_playwright() as p:
        # A fresh profile: no cookies or cache from another run.
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=chromium_path, headless=True,
            args=["--no-sandbox", "--disable-background-networking", "--disable-gpu"],
            viewport={"width": 1400, "height": 1000},
        )
        page = login(running_app.url, *USER, page=context.new_page())
        yield page
        context.close()


def text_contains(page, selector: str, text: str, timeout: int = 60_000) -> None:
    try:
        page.wait_for_function(
            "([sel, text]) => { const el = document.querySelector(sel); return !!el && el.innerText.includes(text); }",
            arg=[selector, text], timeout=timeout,
        )
    except Exception as error:  # say what the page showed instead: a timeout alone does not tell why
        raise AssertionError(f"{selector} never showed {text!r}; it shows {_shown(page, selector)!r}") from error


def _shown(page, selector: str) -> str:
    return page.evaluate("(sel) => { const el = document.querySelector(sel); return el ? el.innerText : '(no element)'; }",
                         selector)[:500]


def wait_for_finished_answer(page, timeout_s: float = 60.0) -> str:
    """The bot's answer once it is non-empty and has not changed for a second. The answer's bubble appears
    empty as soon as streaming starts (and the first chat also loads the model), so rating right after the
    bubble appears can rate an empty answer, which the app rightly refuses."""
    script = ("() => { const bots = document.querySelectorAll('#chat-chatbot [data-testid=bot], #chat-chatbot .bot');"
              " return bots.length ? bots[bots.length - 1].innerText.trim() : ''; }")
    last, unchanged_since = None, time.monotonic()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = page.evaluate(script)
        if text != last:
            last, unchanged_since = text, time.monotonic()
        elif text and time.monotonic() - unchanged_since >= 1.0:
            return text
        page.wait_for_timeout(200)
    raise AssertionError(f"no finished answer in the chat after {timeout_s:.0f} s; it shows {_shown(page, '#chat-chatbot')!r}")


def test_chat_one_turn_then_rate_it(running_app, page, db_rows):
    page.click("button[role=tab]:has-text('Chat')")
    page.wait_for_selector("#chat-input textarea", state="visible")
    # The tab's default settings sample (a random tiny model's greedy answer may be only special tokens).
    page.fill("#chat-input textarea", "Hello from the browser")
    page.click("#chat-send")
    text_contains(page, "#chat-chatbot", "Hello from the browser")
    wait_for_finished_answer(page)
    page.click("#chat-thumbs-up")
    text_contains(page, "#chat-rate-status", "Stored")
    stored = db_rows(
        running_app.db_path,
        "SELECT p.text AS prompt, s.text AS answer, s.source, r.score FROM ratings r JOIN users u ON u.id = r.user_id"
        " JOIN responses s ON s.id = r.response_id JOIN prompts p ON p.id = s.prompt_id WHERE u.username = ?",
        [USER[0]],
    )
    assert len(stored) == 1
    assert (stored[0]["prompt"], stored[0]["source"], stored[0]["score"]) == ("Hello from the browser", "chat", 7.0)
    assert stored[0]["answer"].strip()[:10] in page.inner_text("#chat-chatbot")


def test_arena_vote(running_app, page, db_rows):
    page.click("button[role=tab]:has-text('Arena')")
    page.wait_for_selector("#arena-prompt textarea", state="visible")
    page.fill("#arena-prompt textarea", "Which film should I watch?")
    # Both models are drawn at random by default (and 'default', the real 135M model, is registered too):
    # pick the two tiny ones in the folded-away pickers so the battle is quick.
    page.click("text=Pick the two models yourself")
    for selector, name in [("#arena-model-1 input", running_app.model_name), ("#arena-model-2 input", running_app.model_dir)]:
        page.fill(selector, name)
        page.press(selector, "Enter")
    page.click("#arena-start")
    page.wait_for_selector("#arena-vote-b:not([disabled])", timeout=60_000)
    assert page.inner_text("#arena-reveal").strip() == ""  # no names before the vote
    page.click("#arena-vote-b")
    text_contains(page, "#arena-reveal", "A was")
    page.screenshot(path=SCREENSHOT)
    battles = db_rows(
        running_app.db_path,
        "SELECT b.model_a, b.model_b, b.winner, rk.order_json, b.response_a, b.response_b FROM battles b"
        " JOIN users u ON u.id = b.user_id JOIN rankings rk ON rk.id = b.ranking_id WHERE u.username = ?",
        [USER[0]],
    )
    assert len(battles) == 1 and battles[0]["winner"] == "b"
    assert battles[0]["order_json"] == f"[[{battles[0]['response_b']}], [{battles[0]['response_a']}]]"
    reveal = page.inner_text("#arena-reveal")
    assert battles[0]["model_a"] in reveal and battles[0]["model_b"] in reveal
    text_contains(page, "#arena-leaderboard", battles[0]["model_b"])
