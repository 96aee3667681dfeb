"""Two annotators through the web API: a late submit on an overlap-1 item whose hold passed to the other annotator
is refused and the answer is the next item (the keyboard goes on: it once refused every key until the mouse
pressed Refresh), and the Refresh event tells the keyboard script when it is done, so the key `r` can press it."""
from __future__ import annotations

import pytest
from helpers import serving

gradio_client = pytest.importorskip("gradio_client")
from gradio_client import Client  # noqa: E402

FIRST = ("late-one", "late-one-password-1")
SECOND = ("quick-one", "quick-one-password-1")


@pytest.fixture(scope="module")
def two_annotators(tmp_path_factory):
    from labeler.services.data import accounts, labeling, projects
    from storage import open_db, write_transaction

    root = tmp_path_factory.mktemp("refusal-app")
    db_path = str(root / "studio.db")
    db = open_db(db_path, create=True)
    try:
        accounts.create_user(db, "refusal-admin", "refusal-admin-password-1", role="admin")
        accounts.create_user(db, *FIRST)
        accounts.create_user(db, *SECOND)
        projects.update_project(db, "default", overlap=1)
        with write_transaction(db):
            for n in range(3):
                prompt_id = db.execute("INSERT INTO prompts (project_id, text, text_hash, split) VALUES (1, ?, ?, 'train')",
                                       [f"question {n}", f"hash {n}"]).lastrowid
                db.execute("INSERT INTO responses (prompt_id, text, model) VALUES (?, ?, 'm')", [prompt_id, f"answer {n}"])
        labeling.create_items(db, "default", kinds=("rating",))
    finally:
        db.conn.close()
    with serving(db_path, root) as server:
        yield server.url, db_path


def test_a_refused_late_submit_answers_with_the_next_item(two_annotators, db_rows):
    url, db_path = two_annotators
    late = Client(url, auth=FIRST, verbose=False)
    shown = late.predict(api_name="/rate_next")
    key = shown[6]
    item_id = int(key.split(":")[0])
    # The late annotator walked away past the hold; the quick one is served the item and rates it.
    from storage import open_db
    db = open_db(db_path)
    try:
        db.execute("UPDATE assignments SET assigned_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-31 minutes')")
    finally:
        db.conn.close()
    quick = Client(url, auth=SECOND, verbose=False)
    taken = quick.predict(api_name="/rate_next")
    assert taken[6].split(":")[0] == str(item_id)
    quick.predict(4, "", taken[6], api_name="/rate_submit")
    # The late submit stores nothing and shows the late annotator's next item, with its own key.
    after = late.predict(6, "", key, api_name="/rate_submit")
    assert after[6] and after[6].split(":")[0] != str(item_id)
    assert db_rows(db_path, "SELECT u.username, r.score FROM ratings r JOIN users u ON u.id = r.user_id") == [
        {"username": SECOND[0], "score": 4.0}]
    # That next item takes a label at once (no Refresh needed).
    late.predict(5, "", after[6], api_name="/rate_submit")
    assert len(db_rows(db_path, "SELECT id FROM ratings")) == 2


def test_refresh_tells_the_keyboard_script_when_it_is_done(two_annotators):
    url, _ = two_annotators
    config = Client(url, auth=FIRST, verbose=False).config
    names = {dep.get("api_name") for dep in config["dependencies"]}
    assert {"rate_next_done", "rate_next_refused", "rank_next_done", "rank_next_refused"} <= names


BROWSER = ("keyboard-one", "keyboard-one-password-1")


def _shown_question(page) -> str:
    return page.inner_text("#rate-prompt").strip()


@pytest.mark.slow
@pytest.mark.browser
def test_in_the_browser_a_refused_key_loads_the_next_item_and_r_refreshes(two_annotators, login, db_rows):
    from labeler.services.data import accounts, labeling
    from storage import open_db

    url, db_path = two_annotators
    db = open_db(db_path)
    try:
        accounts.create_user(db, *BROWSER)
        for n in range(3, 6):  # items of its own, so the other tests' labels cannot empty this queue
            prompt_id = db.execute("INSERT INTO prompts (project_id, text, text_hash, split) VALUES (1, ?, ?, 'train')",
                                   [f"keyboard question {n}", f"keyboard hash {n}"]).lastrowid
            db.execute("INSERT INTO responses (prompt_id, text, model) VALUES (?, ?, 'm')", [prompt_id, f"answer {n}"])
        labeling.create_items(db, "default", kinds=("rating",))
    finally:
        db.conn.close()
    page = login(url, *BROWSER)
    page.wait_for_function("() => document.getElementById('rate-prompt').innerText.includes('question')")
    first = _shown_question(page)

    def give_away_shown_item():
        """The item on screen goes to another annotator and is labelled there (the browser's hold lapsed)."""
        db = open_db(db_path)
        try:
            item_id = db.execute("SELECT a.item_id FROM assignments a JOIN users u ON u.id = a.user_id"
                                 " WHERE u.username = ? AND a.status = 'pending'", [BROWSER[0]]).fetchone()[0]
            db.execute("DELETE FROM assignments WHERE item_id = ?", [item_id])
            db.execute("INSERT INTO assignments (item_id, user_id, status) SELECT ?, id, 'done' FROM users"
                       " WHERE username = ?", [item_id, SECOND[0]])
            db.execute("INSERT INTO ratings (item_id, response_id, user_id, score) SELECT i.id,"
                       " json_extract(i.response_ids_json, '$[0]'), u.id, 3 FROM items i, users u"
                       " WHERE i.id = ? AND u.username = ?", [item_id, SECOND[0]])
        finally:
            db.conn.close()

    # A digit on an item that went to someone else: refused with the reason, and the next item is on screen.
    give_away_shown_item()
    page.click("#rate-counter")
    page.keyboard.press("5")
    page.wait_for_selector("text=another annotator holds it", timeout=20_000)
    page.wait_for_function(f"() => !document.getElementById('rate-prompt').innerText.includes({first!r})",
                           timeout=20_000)
    second = _shown_question(page)
    # The keyboard goes on at once: the next digit is a label on the new item.
    page.keyboard.press("6")
    page.wait_for_function(f"() => !document.getElementById('rate-prompt').innerText.includes({second!r})",
                           timeout=20_000)
    assert db_rows(db_path, "SELECT r.score FROM ratings r JOIN users u ON u.id = r.user_id WHERE u.username = ?",
                   [BROWSER[0]]) == [{"score": 6.0}]
    # `r` refreshes: the item on screen was given away meanwhile, and the key shows the next one (no poll runs
    # while an item is shown).
    third = _shown_question(page)
    give_away_shown_item()
    page.keyboard.press("r")
    page.wait_for_function(f"() => !document.getElementById('rate-prompt').innerText.includes({third!r})",
                           timeout=10_000)
    page.close()
