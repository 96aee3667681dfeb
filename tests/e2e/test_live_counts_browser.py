"""In a real browser (headless Chromium): while an item is shown, Rate's and Rank's "N remaining"
follow the queue when another source adds items (a run, the Data tab, the CLI), without a reload, and the item on
screen stays, with the score or the ranks already picked, which a submit then stores."""
from __future__ import annotations

import json
import re

import pytest
from service_seed import add_answered_prompt

pytestmark = [pytest.mark.slow, pytest.mark.browser]
RATER = ("rosa", "rosa-password-1")  # only this module uses these two, so their queues and labels are their own
RANKER = ("ruben", "ruben-password-1")
COUNT_WAIT_MS = 25_000  # the counter's timer ticks every rate.COUNT_REFRESH_S (5 s)


def add_user(db_path: str, user: tuple[str, str]) -> None:
    from labeler.services.data import accounts
    from storage import open_db

    db = open_db(db_path)
    try:
        if accounts.get_user(db, user[0]) is None:
            accounts.create_user(db, *user)
    finally:
        db.conn.close()


def add_items(db_path: str, prompt: str, answers: int, kind: str) -> list[int]:
    """What a background generation leaves: a prompt, its answers and their items of `kind`."""
    return add_answered_prompt(db_path, prompt, answers, kind, source="e2e-live-counts")


def remaining(page, counter_id: str) -> int:
    text = page.inner_text(f"#{counter_id}")
    match = re.search(r"(\d+) remaining", text)
    assert match, f"#{counter_id} shows {text!r}"
    return int(match.group(1))


def service_remaining(db_path: str, username: str, kind: str) -> int:
    from labeler.services.data import labeling
    from storage import open_db

    db = open_db(db_path)
    try:
        return labeling.progress(db, "default", username, kind)[1]
    finally:
        db.conn.close()


def wait_remaining(page, counter_id: str, expected: int) -> None:
    try:
        page.wait_for_function(
            "([id, n]) => ((document.getElementById(id) || {}).innerText || '').includes(n + ' remaining')",
            arg=[counter_id, expected], timeout=COUNT_WAIT_MS)
    except Exception as error:
        raise AssertionError(f"#{counter_id} never showed {expected} remaining; it shows "
                             f"{page.inner_text('#' + counter_id)!r}") from error


def radio(page, widget_id: str, label: str):
    """The <input type=radio> of the choice shown as `label` in the Gradio Radio `widget_id`."""
    return page.locator(f"#{widget_id} label").filter(has_text=re.compile(rf"^\s*{re.escape(label)}\s*$")).locator("input")


def test_rate_count_changes_while_the_item_and_its_picked_score_stay(running_app, login, db_rows):
    add_user(running_app.db_path, RATER)
    add_items(running_app.db_path, "A rate-count test prompt about a silent film", 1, "rating")
    page = login(running_app.url, *RATER)
    # An item is shown (its prompt's heading; the box is empty until the page's load event has answered).
    page.wait_for_function("() => document.getElementById('rate-prompt').innerText.trim().startsWith('Prompt')",
                           timeout=30_000)
    prompt, answer = page.inner_text("#rate-prompt"), page.inner_text("#rate-response")
    before = remaining(page, "rate-counter")
    radio(page, "rate-score", "3").check()  # picked with the mouse, not submitted yet

    add_items(running_app.db_path, "A rate-count test prompt about a stage musical", 2, "rating")
    assert service_remaining(running_app.db_path, RATER[0], "rating") == before + 2
    wait_remaining(page, "rate-counter", before + 2)
    # Only the count changed: the same prompt and answer, the picked score still picked.
    assert (page.inner_text("#rate-prompt"), page.inner_text("#rate-response")) == (prompt, answer)
    assert radio(page, "rate-score", "3").is_checked()

    page.click("#rate-submit")  # the score picked before the count changed is the one stored, for that answer
    page.wait_for_function("(shown) => document.getElementById('rate-response').innerText !== shown", arg=answer,
                           timeout=30_000)
    stored = db_rows(running_app.db_path,
                     "SELECT s.text, r.score FROM ratings r JOIN users u ON u.id = r.user_id"
                     " JOIN responses s ON s.id = r.response_id WHERE u.username = ?", [RATER[0]])
    # (The page shows the answer's Markdown rendered: the seeded answers' **bold** is plain text on screen.)
    assert [(row["text"].replace("**", "").strip(), row["score"]) for row in stored] == [(answer.strip(), 3.0)]
    wait_remaining(page, "rate-counter", before + 1)
    page.close()


def test_rank_count_changes_while_a_half_made_ranking_stays(running_app, login, db_rows):
    add_user(running_app.db_path, RANKER)
    add_items(running_app.db_path, "A rank-count test prompt about a road movie", 3, "ranking")
    page = login(running_app.url, *RANKER)
    page.click("button[role=tab]:has-text('Rank')")
    page.wait_for_selector("#rank-slot-1", state="visible", timeout=30_000)
    prompt = page.inner_text("#rank-prompt")
    shown = [page.inner_text(f"#rank-text-{k}") for k in (1, 2)]
    before = remaining(page, "rank-counter")
    radio(page, "rank-slot-2", "1").check()  # half a ranking: answer 2 is best, the others not ranked yet

    add_items(running_app.db_path, "A rank-count test prompt about a heist comedy", 2, "ranking")
    assert service_remaining(running_app.db_path, RANKER[0], "ranking") == before + 1
    wait_remaining(page, "rank-counter", before + 1)
    assert page.inner_text("#rank-prompt") == prompt
    assert [page.inner_text(f"#rank-text-{k}") for k in (1, 2)] == shown
    assert radio(page, "rank-slot-2", "1").is_checked()

    # The ranking is finished and stored as made: answer 2 best, every other answer shown tied below it (the
    # item shown first may be another test's, with 2 to 8 answers: the shared app's queue is oldest first).
    others = [k for k in range(1, 9) if k != 2 and page.is_visible(f"#rank-slot-{k}")]
    for k in others:
        radio(page, f"rank-slot-{k}", "2").check()
    page.click("#rank-submit")
    page.wait_for_function("(shown) => document.getElementById('rank-prompt').innerText !== shown", arg=prompt,
                           timeout=30_000)
    stored = db_rows(running_app.db_path,
                     "SELECT rk.order_json FROM rankings rk JOIN users u ON u.id = rk.user_id WHERE u.username = ?",
                     [RANKER[0]])
    assert len(stored) == 1
    texts = {row["id"]: row["text"].replace("**", "").strip()  # as shown: Markdown's bold rendered
             for row in db_rows(running_app.db_path, "SELECT id, text FROM responses")}
    order = [[texts[i] for i in group] for group in json.loads(stored[0]["order_json"])]
    best = shown[1].split("\n", 1)[1].strip()  # "Answer 2\n<text>"
    assert order[0] == [best] and len(order) == 2 and len(order[1]) == len(others)
    page.close()
