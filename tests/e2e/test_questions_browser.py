"""A real browser (headless Chromium) answers a project's questions beside the score (issue 47): a digit for the
score, one for the criterion, a letter for a flag, `e` for the correction, Enter: the rows are in SQLite. Its own
server and database (helpers.serving_questions)."""
from __future__ import annotations

import pytest
from helpers import serving_questions

pytestmark = [pytest.mark.slow, pytest.mark.browser]
RATER = ("rita", "rita-password-1")
SCREENSHOT = "/tmp/rlhf-studio-rate-questions.png"
QUESTIONS = [{"name": "helpful", "scale_min": 1, "scale_max": 5, "guideline": "Does it answer it?"},
             {"name": "spam", "kind": "flag"}, {"name": "unsafe", "kind": "flag"}]
ANSWERS = {text: [f"An answer to: {text}"] for text in ["How do I boil an egg?", "Name a prime number."]}


@pytest.fixture(scope="module")
def asking_app(tmp_path_factory):
    with serving_questions(tmp_path_factory.mktemp("questions-app"), RATER, QUESTIONS, ANSWERS,
                           kinds=("rating",)) as app:
        yield app


def test_score_criterion_flag_and_correction_from_the_keyboard(asking_app, login, db_rows):
    url, db_path = asking_app
    page = login(url, *RATER)
    page.wait_for_selector("#rate-criterion-1", state="visible", timeout=20_000)
    assert "helpful (1-5): Does it answer it?" in page.inner_text("#rate-criterion-1")
    assert page.locator("#rate-criterion-2").count() == 0 or page.locator("#rate-criterion-2").is_hidden()
    hint = page.inner_text("#rate-questions-hint")
    assert "a = spam" in hint and "b = unsafe" in hint and "e = write a better answer" in hint
    shown = page.inner_text("#rate-response").strip()

    page.click("#rate-counter")  # out of any text box
    page.keyboard.press("6")  # the main score (1-7), then the focus moves to helpful
    page.keyboard.press("4")  # helpful
    page.keyboard.press("a")  # the flag spam
    page.wait_for_timeout(300)
    assert db_rows(db_path, "SELECT * FROM ratings") == []  # with questions a digit does not submit: Enter does
    page.keyboard.press("e")  # the correction, starting from the shown answer
    area = page.locator("#rate-correction textarea")
    page.wait_for_function("() => document.activeElement && document.activeElement.closest('#rate-correction')")
    assert area.input_value() == shown
    area.fill("Put the egg in boiling water for eight minutes.")
    page.keyboard.press("Escape")  # leaves the box, so Enter submits
    page.screenshot(path=SCREENSHOT)
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.getElementById('rate-counter').innerText.startsWith('1 done')",
                           timeout=20_000)

    assert [(r["score"], r["text"]) for r in db_rows(
        db_path, "SELECT r.score, s.text FROM ratings r JOIN responses s ON s.id = r.response_id")] == [(6.0, shown)]
    assert [tuple(r.values()) for r in db_rows(
        db_path, "SELECT a.kind, q.name, a.score, a.text FROM answers a LEFT JOIN questions q ON q.id = a.question_id"
        " ORDER BY a.id")] == [("score", "helpful", 4.0, None), ("flag", "spam", None, None),
                               ("correction", None, None, "Put the egg in boiling water for eight minutes.")]
    # The next item starts unanswered: no flag ticked, no criterion picked, an empty correction.
    page.wait_for_function("() => !document.querySelector('#rate-flags input:checked')"
                           " && !document.querySelector('#rate-criterion-1 input:checked')")
    assert area.input_value() == ""
