"""The Rate and Rank tabs with a project's questions (issue 47), their handlers called in-process: the criteria,
flags and correction shown per item, stored with the label in one submit, and nothing stored when one is refused."""
from __future__ import annotations

import gradio as gr
import pytest
from test_tabs import ANNOTATOR, app_db, as_user, ctx, query, submit_ranks  # noqa: F401 - fixtures

from labeler.services.labels import questions
from labeler.ui.tabs import labelling, rank, rate
from labeler.ui.tabs.rank.item_view import MAX_RESPONSES
from storage import open_db

ANSWERS = ("SELECT a.response_id, a.kind, q.name, a.score, a.text FROM answers a"
           " LEFT JOIN questions q ON q.id = a.question_id ORDER BY a.response_id, a.id")
# Rate's full outputs: the seven of the keyboard path, Submit, Skip, then the questions, the guidelines last.
RATE_CORRECTION, RATE_FLAGS, RATE_HINT, RATE_CRITERIA = 9, 10, 11, 12


@pytest.fixture
def asking(app_db):
    db = open_db(app_db)
    try:
        questions.add_question(db, "default", "helpful", scale_min=1, scale_max=5, guideline="Does it answer it?")
        questions.add_question(db, "default", "spam", kind="flag")
    finally:
        db.conn.close()
    return app_db


def test_rate_shows_the_questions_and_stores_them_with_the_score(asking, ctx):
    shown = rate.next_item(ctx, request=as_user(ANNOTATOR))
    helpful, second = shown[RATE_CRITERIA], shown[RATE_CRITERIA + 1]
    assert helpful["visible"] is True and helpful["label"] == "helpful (1-5): Does it answer it?"
    assert [value for _, value in helpful["choices"]] == [1, 2, 3, 4, 5] and second["visible"] is False
    assert shown[RATE_FLAGS]["choices"] == [("spam (a)", "spam")] and shown[RATE_FLAGS]["visible"] is True
    assert "**a** = spam" in shown[RATE_HINT] and shown[RATE_CORRECTION] == ""
    key = shown[6]

    # A score off the criterion's scale: refused, and the main score is not stored either.
    with pytest.raises(gr.Error, match="(?i)scores.helpful"):
        rate.submit(ctx, 6, "", key, as_user(ANNOTATOR), "Better.", ["spam"], 9)
    assert query(asking, "SELECT COUNT(*) FROM ratings") == [(0,)] and query(asking, ANSWERS) == []

    after = rate.submit(ctx, 6, "", key, as_user(ANNOTATOR), "Better.", ["spam"], 4, None)
    assert after[6] != key and len(after) == 7  # the keyboard path's seven values, the next item
    assert query(asking, "SELECT response_id, score FROM ratings") == [(1, 6.0)]
    assert query(asking, ANSWERS) == [(1, "score", "helpful", 4.0, None), (1, "flag", "spam", None, None),
                                      (1, "correction", None, None, "Better.")]


def test_rate_without_questions_is_as_before(app_db, ctx):
    shown = rate.next_item(ctx, request=as_user(ANNOTATOR))
    assert shown[RATE_HINT] == "" and shown[RATE_FLAGS]["visible"] is False
    assert all(update["visible"] is False for update in shown[RATE_CRITERIA:RATE_CRITERIA + labelling.MAX_CRITERIA])
    rate.submit(ctx, 5, "", shown[6], request=as_user(ANNOTATOR))  # an API caller's three values
    assert query(app_db, "SELECT score FROM ratings") == [(5.0,)] and query(app_db, ANSWERS) == []


def test_rank_stores_each_answers_questions_and_the_correction_of_the_first(asking, ctx):
    shown = rank.next_item(ctx, request=as_user(ANNOTATOR))
    state, key = shown[-2], shown[-1]
    ids = state["response_ids"]  # three answers, in the order shown
    width = 1 + labelling.MAX_CRITERIA
    first_questions = 3 + 3 * MAX_RESPONSES
    flags_1, helpful_1 = shown[first_questions], shown[first_questions + 1]
    assert flags_1["visible"] is True and helpful_1["visible"] is True
    assert shown[first_questions + 3 * width]["visible"] is False  # slot 4: no answer there

    # Per slot: its flags, then its criteria; slot 2's flag names a flag the project does not have.
    per_slot = [[None] * width for _ in range(MAX_RESPONSES)]
    per_slot[0][:2] = [["spam"], 2]
    per_slot[1][:2] = [["rude"], 5]
    values = ["My own better answer.", *(v for slot in per_slot for v in slot)]
    ranks = ["3", "1", "2"] + [None] * (MAX_RESPONSES - 3)
    with pytest.raises(gr.Error, match="no flag 'rude'"):
        submit_ranks(ctx, state, key, *ranks, *values)
    assert query(asking, "SELECT COUNT(*) FROM rankings") == [(0,)] and query(asking, ANSWERS) == []

    per_slot[1][0] = []
    values = ["My own better answer.", *(v for slot in per_slot for v in slot)]
    submit_ranks(ctx, state, key, *ranks, *values)
    best = ids[1]  # ranked 1: the correction is of it
    expected = sorted([(ids[0], "score", "helpful", 2.0, None), (ids[0], "flag", "spam", None, None),
                       (ids[1], "score", "helpful", 5.0, None), (best, "correction", None, None, "My own better answer.")],
                      key=lambda row: (row[0], row[1] != "score", row[1] != "flag"))
    assert query(asking, ANSWERS) == expected
