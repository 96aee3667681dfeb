"""A real browser (headless Chromium) answers a project's questions about each ranked answer by keyboard (issue 47):
digits rank, j moves the focus to an answer, digits then score its criteria and letters tick its flags, e opens the
correction with the answer ranked first in it, Enter submits once: the ranking and the answers are in SQLite.
Its own server and database (helpers.serving_questions)."""
from __future__ import annotations

import json

import pytest
from helpers import serving_questions

pytestmark = [pytest.mark.slow, pytest.mark.browser]
RANKER = ("rosa", "rosa-password-1")
SCREENSHOT = "/tmp/rlhf-studio-rank-questions.png"
QUESTIONS = [{"name": "helpful", "scale_min": 1, "scale_max": 5, "guideline": "Does it answer it?"},
             {"name": "short", "scale_min": 1, "scale_max": 3},
             {"name": "spam", "kind": "flag"}, {"name": "unsafe", "kind": "flag"}]
ANSWERS = {"How do I boil an egg?": ["Boil it.", "Put it in boiling water for eight minutes.",
                                     "Eggs are laid by hens."]}


@pytest.fixture(scope="module")
def asking_app(tmp_path_factory):
    with serving_questions(tmp_path_factory.mktemp("rank-questions-app"), RANKER, QUESTIONS, ANSWERS,
                           ranking_size=3, kinds=("ranking",)) as app:
        yield app


def test_rank_then_each_answers_questions_from_the_keyboard(asking_app, login, db_rows):
    url, db_path = asking_app
    page = login(url, *RANKER)
    page.click("button[role=tab]:has-text('Rank')")
    page.wait_for_selector("#rank-criterion-1-1", state="visible", timeout=20_000)
    assert "helpful (1-5): Does it answer it?" in page.inner_text("#rank-criterion-1-1")
    assert "j / k" in page.inner_text("body")  # the keys are listed with Rank's others
    # "Answer k" heading, then the answer as shown (the order is shuffled).
    shown = [page.inner_text(f"#rank-text-{k}").split("\n", 1)[1].strip() for k in (1, 2, 3)]

    page.click("#rank-counter")  # out of any text box
    for key in ["2", "3", "1"]:  # the digits rank: answer 2 best, then 3, then 1
        page.keyboard.press(key)
    for key in ["j", "4", "2", "b",  # answer 1: helpful 4, short 2, flag unsafe
                "j", "5", "a",  # answer 2: helpful 5, flag spam
                "Escape"]:  # the digits rank again; the ranks typed stay
        page.keyboard.press(key)
    page.wait_for_timeout(300)
    assert db_rows(db_path, "SELECT * FROM rankings") == []  # nothing is stored before Enter
    assert page.locator("#rank-slot-2 input:checked").input_value() == "1"
    page.keyboard.press("e")  # the correction, starting from the answer ranked first
    area = page.locator("#rank-correction textarea")
    page.wait_for_function("() => document.activeElement && document.activeElement.closest('#rank-correction')")
    assert area.input_value() == shown[1]
    area.fill("Eight minutes in boiling water, then cold water.")
    page.keyboard.press("Escape")  # leaves the box, so Enter submits
    page.screenshot(path=SCREENSHOT, full_page=True)
    page.keyboard.press("Enter")
    page.keyboard.press("Enter")  # a second Enter finds the empty queue: still one ranking
    page.wait_for_function("() => document.getElementById('rank-counter').innerText.startsWith('1 done')",
                           timeout=20_000)
    page.wait_for_timeout(500)

    text_of = {r["id"]: r["text"] for r in db_rows(db_path, "SELECT id, text FROM responses")}
    stored = db_rows(db_path, "SELECT order_json FROM rankings")
    assert len(stored) == 1
    assert [[text_of[i] for i in group] for group in json.loads(stored[0]["order_json"])] == [
        [shown[1]], [shown[2]], [shown[0]]]
    answers = db_rows(db_path, "SELECT a.kind, q.name, a.response_id, a.score, a.text FROM answers a "
                               "LEFT JOIN questions q ON q.id = a.question_id ORDER BY a.kind, q.name, a.response_id")
    assert [(a["kind"], a["name"], text_of[a["response_id"]], a["score"], a["text"]) for a in answers] == [
        ("correction", None, shown[1], None, "Eight minutes in boiling water, then cold water."),
        ("flag", "spam", shown[1], None, None),
        ("flag", "unsafe", shown[0], None, None),
        ("score", "helpful", shown[0], 4.0, None),
        ("score", "helpful", shown[1], 5.0, None),
        ("score", "short", shown[0], 2.0, None),
    ]
