"""The one writer of responses, items, rankings and assignments: whole rows as stored."""
import pytest

from labeler.services.data import labeling
from labeler.services.data.accounts import create_user
from labeler.services.data.prompts import PromptRecord, insert_prompt
from labeler.services.data.responses import insert_response
from storage import write_transaction
from helpers import rows


def test_insert_response_defaults_and_every_column(db):
    with write_transaction(db):
        prompt_id, _ = insert_prompt(db, 1, PromptRecord("Hi", None), "test")
        first = insert_response(db, prompt_id, "Hello", model="m", source="generated")
        second = insert_response(db, prompt_id, "Hey", model="arena-a", source="arena", settings_json='{"seed": 3}',
                                 server_generated=True)
    assert (first, second) == (1, 2)
    assert rows(db, "SELECT id, prompt_id, text, model, settings_json, run_id, source, server_generated FROM responses") == [
        (1, prompt_id, "Hello", "m", "{}", None, "generated", 0),
        (2, prompt_id, "Hey", "arena-a", '{"seed": 3}', None, "arena", 1),
    ]


def test_insert_item_if_new_keeps_the_existing_item(db):
    with write_transaction(db):
        prompt_id, _ = insert_prompt(db, 1, PromptRecord("Hi", None), "test")
        a = insert_response(db, prompt_id, "A", model="m", source="generated")
        b = insert_response(db, prompt_id, "B", model="m", source="generated")
        item = labeling.insert_item(db, 1, "ranking", prompt_id, [b, a], priority=5)
        assert labeling.insert_item(db, 1, "ranking", prompt_id, [a, b], if_new=True) is None
        with pytest.raises(Exception, match="UNIQUE"):
            labeling.insert_item(db, 1, "ranking", prompt_id, [a, b])
    assert rows(db, "SELECT id, kind, prompt_id, response_ids_json, priority, run_id FROM items") == [
        (item, "ranking", prompt_id, "[1, 2]", 5, None)
    ]


def test_insert_ranking_and_assignments(db):
    create_user(db, "ann", "pw-123456", role="annotator")
    user_id = db.execute("SELECT id FROM users WHERE username = 'ann'").fetchone()[0]
    with write_transaction(db):
        prompt_id, _ = insert_prompt(db, 1, PromptRecord("Hi", None), "test")
        a = insert_response(db, prompt_id, "A", model="m", source="generated")
        b = insert_response(db, prompt_id, "B", model="m", source="generated")
        item = labeling.insert_item(db, 1, "ranking", prompt_id, [a, b])
        labeling.add_assignment(db, item, user_id, "done")
        ranking = labeling.insert_ranking(db, item, prompt_id, user_id, "[[1], [2]]", source="arena")
        imported = labeling.insert_ranking(db, item, prompt_id, None, "[[2], [1]]", source="import")
    assert rows(db, "SELECT id, item_id, user_id, order_json, comment, seconds, source, request_id FROM rankings") == [
        (ranking, item, user_id, "[[1], [2]]", "", None, "arena", None),
        (imported, item, None, "[[2], [1]]", "", None, "import", None),
    ]
    assert rows(db, "SELECT item_id, user_id, status FROM assignments") == [(item, user_id, "done")]
    with write_transaction(db):
        labeling.drop_assignment(db, item, user_id)
    assert rows(db, "SELECT item_id FROM assignments") == []
