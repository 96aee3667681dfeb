"""The Rate and Rank submits with the project's questions (issue 47): the main label and the answers beside it are
one transaction, so a refused answer stores no label either and the item stays the person's to label."""
import pytest
from labeling_helpers import add_prompt, make_users

from labeler.services.data import labeling
from labeler.services.labels import questions
from labeler.errors import InputError
from labeler.services.labels.questions import ItemAnswers
from helpers import rows

P = "default"


@pytest.fixture
def asked(db):
    questions.add_question(db, P, "helpful", scale_min=1, scale_max=5)
    questions.add_question(db, P, "spam", kind="flag")
    make_users(db, "alice")
    return add_prompt(db, "How do I reset my password?", 2)


ANSWERS = "SELECT a.kind, q.name, a.score, a.text FROM answers a LEFT JOIN questions q ON q.id = a.question_id ORDER BY a.id"


def test_rating_and_answers_are_one_submit(db, asked):
    labeling.create_items(db, P, kinds=("rating",))
    assert questions.has_questions(db, P)
    item = labeling.next_item(db, P, "alice", "rating")
    shown = item.responses[0]["id"]

    # A flag the project does not have: neither the score nor the answers are stored, the item is still held.
    with pytest.raises(InputError) as refused:
        questions.submit_rating_with_answers(db, P, "alice", item.item_id, 6,
                                             ItemAnswers(scores={"helpful": 4}, flags=["rude"]), request_id="r1")
    assert refused.value.field == "flags"
    assert rows(db, "SELECT COUNT(*) FROM ratings") == [(0,)] and rows(db, ANSWERS) == []
    assert labeling.next_item(db, P, "alice", "rating").item_id == item.item_id

    _, following = questions.submit_rating_with_answers(
        db, P, "alice", item.item_id, 6, ItemAnswers(scores={"helpful": 4}, flags=["spam"], correction=" Better. "),
        comment="ok", request_id="r2")
    assert rows(db, "SELECT item_id, response_id, score, comment FROM ratings") == [(item.item_id, shown, 6.0, "ok")]
    assert rows(db, ANSWERS) == [("score", "helpful", 4.0, None), ("flag", "spam", None, None),
                                 ("correction", None, None, "Better.")]
    assert following is not None and following.item_id != item.item_id


def test_a_resubmitted_item_replaces_every_answer(db, asked):
    """After an undo, the item's second submit replaces the first one's answers, criteria left blank included."""
    labeling.create_items(db, P, kinds=("rating",))
    item = labeling.next_item(db, P, "alice", "rating")
    questions.submit_rating_with_answers(db, P, "alice", item.item_id, 5,
                                         ItemAnswers(scores={"helpful": 2}, flags=["spam"]))
    labeling.undo_last_action(db, P, "alice", "rating")
    questions.submit_rating_with_answers(db, P, "alice", item.item_id, 3, ItemAnswers(correction="Fixed."))
    assert rows(db, "SELECT score FROM ratings") == [(3.0,)]
    assert rows(db, ANSWERS) == [("correction", None, None, "Fixed.")]


def test_ranking_and_answers_are_one_submit(db, asked):
    labeling.create_items(db, P, kinds=("ranking",), ranking_size=2)
    item = labeling.next_item(db, P, "alice", "ranking")
    first, second = (int(r["id"]) for r in item.responses)
    order = [[second], [first]]

    for answers, field in (({first: ItemAnswers(scores={"helpful": 9})}, "scores.helpful"),  # off the 1-5 scale
                           ({12345: ItemAnswers(flags=["spam"])}, "response_id")):  # not shown in the item
        with pytest.raises(InputError) as refused:
            questions.submit_ranking_with_answers(db, P, "alice", item.item_id, order, answers)
        assert refused.value.field == field
    assert rows(db, "SELECT COUNT(*) FROM rankings") == [(0,)] and rows(db, ANSWERS) == []

    questions.submit_ranking_with_answers(db, P, "alice", item.item_id, order,
                                          {first: ItemAnswers(scores={"helpful": 1}, flags=["spam"]),
                                           second: ItemAnswers(scores={"helpful": 5}, correction="Even better.")})
    assert rows(db, "SELECT order_json FROM rankings") == [(f"[[{second}], [{first}]]",)]
    assert rows(db, "SELECT response_id, kind, score, text FROM answers ORDER BY response_id, id") == [
        (first, "score", 1.0, None), (first, "flag", None, None),
        (second, "score", 5.0, None), (second, "correction", None, "Even better.")]


def test_undo_takes_back_the_answers_with_the_label(db, asked):
    labeling.create_items(db, P, kinds=("rating",))
    item = labeling.next_item(db, P, "alice", "rating")
    questions.submit_rating_with_answers(db, P, "alice", item.item_id, 5,
                                         ItemAnswers(scores={"helpful": 2}, flags=["spam"], correction="Fixed."))
    undone = questions.undo_with_answers(db, P, "alice", "rating")
    assert (undone.item_id, undone.action) == (item.item_id, "label")
    assert rows(db, "SELECT COUNT(*) FROM ratings") == [(0,)] and rows(db, ANSWERS) == []
    assert labeling.next_item(db, P, "alice", "rating").item_id == item.item_id  # back, to be answered again
