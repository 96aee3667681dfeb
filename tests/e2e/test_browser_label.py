"""A real browser (headless Chromium): log in, rate with a digit key, rank from the keyboard, check SQLite."""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]
SCREENSHOT = "/tmp/rlhf-studio-rate-tab.png"


def counter_starts(page, element_id: str, text: str, timeout: int = 20_000) -> None:
    page.wait_for_function(
        "([id, text]) => { const el = document.getElementById(id); return !!el && el.innerText.startsWith(text); }",
        arg=[element_id, text], timeout=timeout,
    )


def plain(markdown: str) -> str:
    # The seeded answers bold one word ("answer **2** of 3"); the page shows it rendered.
    return markdown.replace("**", "").strip()


def test_label_with_the_keyboard(running_app, login, db_rows):
    username, password = running_app.browser_annotator
    page = login(running_app.url, username, password)
    counter_starts(page, "rate-counter", "0 done")
    shown_answer = page.inner_text("#rate-response").strip()
    # No training run waits: the banner is empty, and studio.css hides it; with text it shows (the keyboard path
    # sends its text without a visibility update).
    assert page.locator("#rate-banner").is_hidden()
    page.evaluate("document.querySelector('#rate-banner span.md').textContent = 'a run waits'")
    assert page.locator("#rate-banner").is_visible()
    page.evaluate("document.querySelector('#rate-banner span.md').textContent = ''")
    assert page.locator("#rate-banner").is_hidden()
    page.wait_for_timeout(300)
    page.screenshot(path=SCREENSHOT)

    # Annotators do not see the admin tabs.
    tab_names = [tab.inner_text() for tab in page.query_selector_all("button[role=tab]") if tab.is_visible()]
    assert "Rate" in tab_names and "Rank" in tab_names and "Admin" not in tab_names and "Data" not in tab_names

    # A digit typed in the comment box is text, not a score.
    page.click("#rate-comment textarea, #rate-comment input")
    page.keyboard.type("7 stars")
    page.wait_for_timeout(400)
    assert db_rows(running_app.db_path, "SELECT * FROM ratings r JOIN users u ON u.id = r.user_id"
                   " WHERE u.username = ?", [username]) == []

    # The digit 5 outside the comment box scores the shown answer and submits.
    page.click("#rate-counter")
    page.keyboard.press("5")
    counter_starts(page, "rate-counter", "1 done")
    ratings = db_rows(
        running_app.db_path,
        "SELECT r.score, r.comment, r.seconds, s.text FROM ratings r JOIN users u ON u.id = r.user_id"
        " JOIN responses s ON s.id = r.response_id WHERE u.username = ?",
        [username],
    )
    assert [(r["score"], r["comment"], plain(r["text"])) for r in ratings] == [(5.0, "7 stars", shown_answer)]
    assert ratings[0]["seconds"] > 0

    # u undoes it: the same answer is back and its rating is gone; 5 rates it again.
    page.keyboard.press("u")
    counter_starts(page, "rate-counter", "0 done")
    assert page.inner_text("#rate-response").strip() == shown_answer
    page.keyboard.press("5")
    counter_starts(page, "rate-counter", "1 done")
    assert len(db_rows(running_app.db_path, "SELECT r.id FROM ratings r JOIN users u ON u.id = r.user_id"
                       " WHERE u.username = ?", [username])) == 1

    # Rank: "2 = 3 1" puts answers 2 and 3 first (tied) and answer 1 last; Enter submits.
    page.click("button[role=tab]:has-text('Rank')")
    page.wait_for_selector("#rank-submit", state="visible")
    counter_starts(page, "rank-counter", "0 done")
    # "Answer k" heading, then the rendered answer.
    answers = [page.inner_text(f"#rank-text-{k}").split("\n", 1)[1].strip() for k in (1, 2, 3)]
    # Three answers: slots 4-8 hidden, and their empty second row takes no room above the comment box.
    assert [page.locator(f"#rank-slot-{k}").is_visible() for k in range(1, 9)] == [True] * 3 + [False] * 5
    # (Gradio does not render hidden columns; studio.css hides the row left empty, or its flex gap would stay.)
    assert page.evaluate("Array.from(document.querySelectorAll('.studio-rank-row'))"
                         ".map(row => getComputedStyle(row).display)") == ["flex", "none"]
    for key in ["2", "=", "3", "1"]:
        page.keyboard.press(key)
    page.wait_for_timeout(300)
    page.keyboard.press("Enter")
    counter_starts(page, "rank-counter", "1 done")
    stored = db_rows(
        running_app.db_path,
        "SELECT r.order_json FROM rankings r JOIN users u ON u.id = r.user_id WHERE u.username = ?",
        [username],
    )
    assert len(stored) == 1
    texts = {r["id"]: plain(r["text"]) for r in db_rows(running_app.db_path, "SELECT id, text FROM responses")}
    order = [sorted(texts[i] for i in group) for group in json.loads(stored[0]["order_json"])]
    assert order == [sorted([answers[1], answers[2]]), [answers[0]]]
    page.close()


def test_admin_sees_the_admin_tabs(running_app, login, db_rows):
    page = login(running_app.url, *running_app.admin)
    page.wait_for_selector("button[role=tab]:has-text('Admin')", state="visible", timeout=20_000)
    page.click("button[role=tab]:has-text('Admin')")
    # The users table is filled on load from SQLite.
    page.wait_for_selector(f"text={running_app.browser_annotator[0]}", timeout=20_000)
    page.close()


def test_fast_typing_stores_every_digit_in_order(running_app, login, db_rows):
    """Issue 14 item 3: ten digits typed 0.10-0.15 s apart are ten ratings, in the order typed, and the
    counter on screen says what was stored. Keys typed while a submit is in flight wait their turn."""
    from labeler.services.data import accounts, labeling
    from storage import open_db, write_transaction

    username, password = "typist", "typist-password-1"
    db = open_db(running_app.db_path)
    try:
        accounts.create_user(db, username, password)
        # Twenty more rating items of the typist's own, so other tests' labels cannot empty the queue.
        with write_transaction(db):
            prompt_id = db.execute("SELECT id FROM prompts ORDER BY id LIMIT 1").fetchone()[0]
            for k in range(20):
                db.execute("INSERT INTO responses (prompt_id, text, model, source) VALUES (?, ?, 'tiny', 'e2e')",
                           [prompt_id, f"Typist answer {k}."])
        labeling.create_items(db, "default", kinds=("rating",))
    finally:
        db.conn.close()

    page = login(running_app.url, username, password)
    counter_starts(page, "rate-counter", "0 done")
    page.click("#rate-counter")
    digits = [3, 5, 1, 7, 2, 6, 4, 3, 5, 1]
    for index, digit in enumerate(digits):
        page.keyboard.press(str(digit))
        page.wait_for_timeout(100 + 50 * (index % 2))  # 0.10 and 0.15 s apart, faster than a round trip here
    counter_starts(page, "rate-counter", "10 done", timeout=60_000)
    page.wait_for_timeout(1000)  # a key wrongly sent twice would show up as an 11th label by now

    stored = db_rows(
        running_app.db_path,
        "SELECT r.score, r.item_id FROM ratings r JOIN users u ON u.id = r.user_id WHERE u.username = ? ORDER BY r.id",
        [username],
    )
    assert [row["score"] for row in stored] == digits
    assert len({row["item_id"] for row in stored}) == 10  # ten different items, one label each

    # A burst 30 ms apart: every key but the first arrives while a submit is in flight and must wait for it
    # (Gradio drops a click on a button whose event is still running).
    burst = [2, 7, 4, 6, 1]
    for digit in burst:
        page.keyboard.press(str(digit))
        page.wait_for_timeout(30)
    counter_starts(page, "rate-counter", "15 done", timeout=60_000)
    page.wait_for_timeout(1000)
    digits += burst
    stored = db_rows(
        running_app.db_path,
        "SELECT r.score, r.item_id FROM ratings r JOIN users u ON u.id = r.user_id WHERE u.username = ? ORDER BY r.id",
        [username],
    )
    assert [row["score"] for row in stored] == digits
    assert len({row["item_id"] for row in stored}) == 15
    # The counter matches the database, and the item on screen is the one the queue reserved next.
    assert page.inner_text("#rate-counter").startswith("15 done")
    pending = db_rows(
        running_app.db_path,
        "SELECT s.text FROM assignments a JOIN users u ON u.id = a.user_id JOIN items i ON i.id = a.item_id"
        " JOIN responses s ON s.id = json_extract(i.response_ids_json, '$[0]')"
        " WHERE u.username = ? AND a.status = 'pending' AND i.kind = 'rating'",
        [username],
    )
    assert [plain(row["text"]) for row in pending] == [page.inner_text("#rate-response").strip()]
    page.close()


def test_rank_eight_answers_by_keyboard_in_two_rows_of_four(running_app, login, db_rows):
    """Issue 9: an item of 8 answers (labeling.MAX_RANKING_SIZE) shows 8 slots in two rows of 4 and is ranked
    from the keyboard: "8 = 7 1 2 3 4 5 6" puts answers 8 and 7 first (tied), then 1 to 6."""
    from labeler.services.data import accounts, labeling, prompts
    from storage import open_db, write_transaction

    username, password = "ranker8", "ranker8-password-1"
    db = open_db(running_app.db_path)
    try:
        accounts.create_user(db, username, password)
        # A prompt of its own: create_items joins a prompt's older unranked answers (other tests add some).
        prompts.add_prompts(db, ["An opening with eight continuations"], source="e2e")
        # In training: the held-out share may hold a new prompt out, and a held-out prompt takes no training label.
        db.execute("UPDATE prompts SET split = 'train' WHERE text = 'An opening with eight continuations'")
        with write_transaction(db):
            prompt_id = db.execute("SELECT id FROM prompts WHERE text = 'An opening with eight continuations'").fetchone()[0]
            eight = [db.execute("INSERT INTO responses (prompt_id, text, model, source) VALUES (?, ?, 'tiny', 'e2e')",
                                [prompt_id, f"Eight-way answer {k}."]).lastrowid for k in range(8)]
        # First in the queue (priority), and reserved for this user now so no other test's annotator takes it.
        labeling.create_items(db, "default", eight, ranking_size=8, kinds=("ranking",), priority=5)
        assert len(labeling.next_item(db, "default", username, "ranking").responses) == 8
    finally:
        db.conn.close()

    page = login(running_app.url, username, password, ready="button[role=tab]:has-text('Rank')")
    page.click("button[role=tab]:has-text('Rank')")
    page.wait_for_selector("#rank-slot-8", state="visible", timeout=20_000)
    boxes = [page.locator(f"#rank-text-{k}").bounding_box() for k in range(1, 9)]
    first_row, second_row = boxes[:4], boxes[4:]
    assert len({round(b["y"]) for b in first_row}) == 1 and len({round(b["y"]) for b in second_row}) == 1
    assert second_row[0]["y"] > first_row[0]["y"] + first_row[0]["height"]  # below the first row, not squeezed beside
    assert min(b["width"] for b in boxes) >= 200  # readable: each slot keeps its min_width
    assert [page.locator(f"#rank-slot-{k} label").count() for k in range(1, 9)] == [8] * 8  # ranks 1..8 each
    page.screenshot(path="/tmp/rlhf-studio-rank-eight.png", full_page=True)

    answers = [page.inner_text(f"#rank-text-{k}").split("\n", 1)[1].strip() for k in range(1, 9)]
    page.click("#rank-counter")
    for key in ["8", "=", "7", "1", "2", "3", "4", "5", "6"]:
        page.keyboard.press(key)
    page.wait_for_timeout(300)
    page.keyboard.press("Enter")
    counter_starts(page, "rank-counter", "1 done")
    stored = db_rows(running_app.db_path, "SELECT r.order_json FROM rankings r JOIN users u ON u.id = r.user_id"
                     " WHERE u.username = ?", [username])
    assert len(stored) == 1
    texts = {r["id"]: r["text"] for r in db_rows(running_app.db_path, "SELECT id, text FROM responses")}
    order = [sorted(texts[i] for i in group) for group in json.loads(stored[0]["order_json"])]
    assert order == [sorted([answers[7], answers[6]]), *[[answers[k]] for k in range(6)]]
    page.close()
