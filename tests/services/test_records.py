"""The record browser service: filters, paging, a record's labels, audited corrections and deletions."""
from __future__ import annotations

import json

import pytest
from labeling_helpers import add_prompt, make_users

from labeler.services.data import labeling
from labeler.services.labels import records
from labeler.errors import InputError, PermissionDenied
from labeler.services.labels.records import RecordFilters


@pytest.fixture
def labelled(db):
    """Three prompts x 2 answers. alice rates prompt 1's answers 2 and 6, bob ranks prompt 2; prompt 3 is bare."""
    from labeler.services.data import accounts

    make_users(db, "alice", "bob")
    accounts.create_user(db, "root", "root-password-1", role="admin")
    add_prompt(db, "A film about cats", 2)
    add_prompt(db, "A 100% true story_", 2)
    add_prompt(db, "Nothing labelled here", 2)
    labeling.create_items(db, "default", ranking_size=2)
    # Held out after its items were made (create_items queues no held-out prompt's answers).
    db.execute("UPDATE prompts SET split = 'test', source = 'held.csv' WHERE id = 3")
    for score in (2, 6):
        item = labeling.next_item(db, "default", "alice")
        labeling.submit_rating(db, "default", "alice", item.item_id, score)
    item = labeling.next_item(db, "default", "bob", kind="ranking")
    while item.prompt_id != 2:  # bob ranks prompt 2 only
        labeling.skip_item(db, "default", "bob", item.item_id)
        item = labeling.next_item(db, "default", "bob", kind="ranking")
    labeling.submit_ranking(db, "default", "bob", item.item_id, [[4], [3]])
    return db


def ids(page) -> list[int]:
    return [row["id"] for row in page.rows]


@pytest.mark.parametrize("filters, expected", [
    (RecordFilters(), [1, 2, 3]),
    (RecordFilters(search="cats"), [1]),
    (RecordFilters(search="answer 1"), [1, 2, 3]),  # an answer's text matches too
    (RecordFilters(search="100%"), [2]),  # % is a character, not a wildcard
    (RecordFilters(search="y_"), [2]),  # and so is _
    (RecordFilters(annotator="alice"), [1]),
    (RecordFilters(annotator="bob"), [2]),
    (RecordFilters(label_state="unlabelled"), [3]),
    (RecordFilters(label_state="labelled"), [1, 2]),
    (RecordFilters(min_score=5), [1]),
    (RecordFilters(max_score=1), []),
    (RecordFilters(min_score=2, max_score=2), [1]),
    (RecordFilters(split="test"), [3]),
    (RecordFilters(source="held.csv"), [3]),
    (RecordFilters(split="train", label_state="labelled", annotator="bob"), [2]),
])
def test_filters(labelled, filters, expected):
    page = records.list_records(labelled, filters)
    assert ids(page) == expected and page.total == len(expected)


def test_rows_count_answers_and_labels(labelled):
    rows = records.list_records(labelled, RecordFilters()).rows
    assert [(r["answers"], r["ratings"], r["mean_score"], r["rankings"], r["gold"]) for r in rows] == [
        (2, 2, 4.0, 0, False), (2, 0, None, 1, False), (2, 0, None, 0, False)]


def test_paging(labelled):
    pages = [records.list_records(labelled, RecordFilters(), page=k, page_size=2) for k in (1, 2, 3)]
    assert [ids(p) for p in pages] == [[1, 2], [3], []]
    assert {(p.total, p.pages) for p in pages} == {(3, 2)}
    for page, page_size, field in [(0, 20, "page"), (1, 0, "page_size"), (1, 201, "page_size")]:
        with pytest.raises(InputError) as error:
            records.list_records(labelled, RecordFilters(), page=page, page_size=page_size)
        assert error.value.field == field


def test_bad_filters_name_the_field(labelled):
    for kwargs, field in [({"label_state": "done"}, "label_state"), ({"min_score": 5, "max_score": 2}, "min_score"),
                          ({"min_score": float("nan")}, "min_score")]:
        with pytest.raises(InputError) as error:
            RecordFilters(**kwargs)
        assert error.value.field == field
    with pytest.raises(InputError, match="no user 'carol'"):
        records.list_records(labelled, RecordFilters(annotator="carol"))


def test_a_record_shows_every_label_with_its_annotator(labelled):
    detail = records.record_detail(labelled, 1)
    assert detail["text"] == "A film about cats" and [a["id"] for a in detail["answers"]] == [1, 2]
    assert [(r["username"], r["response_id"], r["score"]) for r in detail["ratings"]] == [("alice", 1, 2.0), ("alice", 2, 6.0)]
    assert {i["kind"] for i in detail["items"]} == {"rating", "ranking"}
    ranked = records.record_detail(labelled, 2)["rankings"]
    assert [(r["username"], r["order"], r["source"]) for r in ranked] == [("bob", [[4], [3]], "annotator")]
    with pytest.raises(InputError, match="no prompt 99"):
        records.record_detail(labelled, 99)


def test_corrections_and_deletions_are_audited(labelled):
    db = labelled
    after = records.correct_label(db, "root", "rating", 1, 3, reason="typo: meant 3")
    assert after["score"] == 3.0
    ranking_id = records.record_detail(db, 2)["rankings"][0]["id"]
    records.correct_label(db, "root", "ranking", ranking_id, [[3, 4]], reason="a tie")
    assert json.loads(db.execute("SELECT order_json FROM rankings WHERE id = ?", [ranking_id]).fetchone()[0]) == [[3, 4]]
    # Refused, naming the field; nothing changes.
    for kind, label_id, value, field in [("rating", 1, 9, "score"), ("ranking", ranking_id, [[3]], "order"),
                                         ("rating", 99, 3, "label_id"), ("vote", 1, 3, "kind")]:
        with pytest.raises(InputError) as error:
            records.correct_label(db, "root", kind, label_id, value)
        assert error.value.field == field
    with pytest.raises(PermissionDenied):
        records.correct_label(db, "alice", "rating", 1, 4)
    with pytest.raises(PermissionDenied):
        records.delete_label(db, "alice", "rating", 1)

    item_id = db.execute("SELECT item_id FROM ratings WHERE id = 2").fetchone()[0]
    records.delete_label(db, "root", "rating", 2, reason="spam")
    assert db.execute("SELECT COUNT(*) FROM ratings WHERE id = 2").fetchone()[0] == 0
    # The annotator's assignment went with it: their done count drops and the item is open again.
    assert db.execute("SELECT COUNT(*) FROM assignments WHERE item_id = ?", [item_id]).fetchone()[0] == 0
    assert db.execute("SELECT is_open FROM items WHERE id = ?", [item_id]).fetchone()[0] == 1
    assert labeling.progress(db, "default", "alice")[0] == 1

    log = records.audit_log(db)
    assert [(e["admin"], e["action"], e["label_kind"], e["reason"]) for e in log] == [
        ("root", "delete", "rating", "spam"), ("root", "correct", "ranking", "a tie"),
        ("root", "correct", "rating", "typo: meant 3")]
    assert (log[0]["before"]["score"], log[0]["after"]) == (6.0, None)
    assert (log[2]["before"]["score"], log[2]["after"]["score"]) == (2.0, 3.0)


def test_mark_gold_from_a_record(labelled):
    item = next(i for i in records.record_detail(labelled, 3)["items"] if i["kind"] == "rating")
    records.mark_gold(labelled, "root", item["id"], {"score": 5})
    assert records.list_records(labelled, RecordFilters(label_state="gold")).rows[0]["id"] == 3
    with pytest.raises(PermissionDenied):
        records.mark_gold(labelled, "alice", item["id"], None)


def test_the_listing_query_uses_indexes(labelled):
    where, params = records._where(labelled, RecordFilters(split="test", annotator="alice", min_score=1))
    plan = " ".join(row[3] for row in labelled.execute(
        f"EXPLAIN QUERY PLAN SELECT p.id FROM prompts p WHERE {where} ORDER BY p.id LIMIT 20", params))
    # Prompts are searched by project and split, the annotator's labels by user (once, not per prompt).
    assert "SEARCH p USING COVERING INDEX prompts_project_split" in plan and "SCAN p" not in plan, plan
    assert "LIST SUBQUERY" in plan and "ratings_user" in plan and "rankings_user" in plan, plan
    assert "SCAN r" not in plan and "SCAN k" not in plan and "SCAN s" not in plan, plan
