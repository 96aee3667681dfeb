"""In a real browser (headless Chromium): while an item is shown, Rate's and Rank's "N remaining"
follow the queue when another source adds items (a run, the Data tab, the CLI), without a reload, and the item on
screen stays, with the score or the ranks already picked, which a submit then stores."""
from __future__ import annotations

import json
import re
import time

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


def wait_rows(db_rows, db_path: str, sql: str, args: list, timeout_s: float = 30.0) -> list:
    """The query's rows once there are any: a submit's label is in the database when its request has answered,
    which the page shows only after Gradio's progress overlay, itself a change of the boxes' text."""
    deadline = time.monotonic() + timeout_s
    while not (rows := db_rows(db_path, sql, args)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return rows


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
    stored = wait_rows(db_rows, running_app.db_path,
                       "SELECT s.text, r.score FROM ratings r JOIN users u ON u.id = r.user_id"
                       " JOIN responses s ON s.id = r.response_id WHERE u.username = ?", [RATER[0]])
    # (The page shows the answer's Markdown rendered: the seeded answers' **bold** is plain text on screen.)
    assert [(row["text"].replace("**", "").strip(), row["score"]) for row in stored] == [(answer.strip(), 3.0)]
    wait_remaining(page, "rate-counter", before + 1)
    page.close()


def toasts(page) -> list[str]:
    return page.locator(".toast-body, [data-testid=toast-body]").all_inner_texts()


def prompt_body(page, box_id: str) -> str:
    """The prompt box's text without its heading. The box's innerText also carries Gradio's progress overlay
    ("processing | 0.3s") while a request runs: a wait on "the text changed" ends when the overlay appears, before
    the request has answered (a whole-suite run once read the database then and found no ranking)."""
    return page.inner_text(f"#{box_id}").split("Prompt", 1)[-1].strip()


def wait_next_prompt(page, box_id: str, old_body: str) -> None:
    """Wait until the box shows another prompt and no progress overlay (the request has answered)."""
    page.wait_for_function(
        "([id, old]) => { const t = ((document.getElementById(id) || {}).innerText || '').trim();"
        " return t.startsWith('Prompt') && !t.includes(old); }", arg=[box_id, old_body], timeout=30_000)


def show_own_rank_item(page, own_prompt: str) -> None:
    """Skip the shared app's older ranking items (the seed's and other tests', oldest first) until this test's own
    is shown."""
    page.wait_for_function("() => document.getElementById('rank-prompt').innerText.trim().startsWith('Prompt')",
                           timeout=30_000)
    for _ in range(50):
        old_body = prompt_body(page, "rank-prompt")
        if own_prompt in old_body:
            return
        page.click("#rank-skip")
        wait_next_prompt(page, "rank-prompt", old_body)
    raise AssertionError(f"the Rank tab never showed {own_prompt!r}")


def test_rank_count_changes_while_a_half_made_ranking_stays(running_app, login, db_rows):
    add_user(running_app.db_path, RANKER)
    own_prompt = "A rank-count test prompt about a road movie"
    add_items(running_app.db_path, own_prompt, 3, "ranking")
    page = login(running_app.url, *RANKER)
    page.click("button[role=tab]:has-text('Rank')")
    page.wait_for_selector("#rank-slot-1", state="visible", timeout=30_000)
    show_own_rank_item(page, own_prompt)
    prompt_body_shown = prompt_body(page, "rank-prompt")
    shown = [page.inner_text(f"#rank-text-{k}") for k in (1, 2)]
    before = remaining(page, "rank-counter")
    radio(page, "rank-slot-2", "1").check()  # half a ranking: answer 2 is best, the others not ranked yet

    add_items(running_app.db_path, "A rank-count test prompt about a heist comedy", 2, "ranking")
    assert service_remaining(running_app.db_path, RANKER[0], "ranking") == before + 1
    wait_remaining(page, "rank-counter", before + 1)
    assert prompt_body(page, "rank-prompt") == prompt_body_shown
    assert [page.inner_text(f"#rank-text-{k}") for k in (1, 2)] == shown
    assert radio(page, "rank-slot-2", "1").is_checked()

    # The ranking is finished and stored as made: answer 2 best, the other two answers tied below it.
    others = [k for k in range(1, 9) if k != 2 and page.is_visible(f"#rank-slot-{k}")]
    assert others == [1, 3]
    for k in others:
        radio(page, f"rank-slot-{k}", "2").check()
    page.click("#rank-submit")
    wait_next_prompt(page, "rank-prompt", own_prompt)
    stored = wait_rows(db_rows, running_app.db_path,
                       "SELECT rk.order_json FROM rankings rk JOIN users u ON u.id = rk.user_id WHERE u.username = ?",
                       [RANKER[0]])
    assert len(stored) == 1, f"no ranking stored; the page said {toasts(page)}"
    texts = {row["id"]: row["text"].replace("**", "").strip()  # as shown: Markdown's bold rendered
             for row in db_rows(running_app.db_path, "SELECT id, text FROM responses")}
    order = [[texts[i] for i in group] for group in json.loads(stored[0]["order_json"])]
    best = shown[1].split("\n", 1)[1].strip()  # "Answer 2\n<text>"
    assert order[0] == [best] and len(order) == 2 and len(order[1]) == len(others)
    page.close()
