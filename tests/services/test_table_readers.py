"""The readers that other services call instead of querying a table they do not own (prompts, responses,
items and labels, models, battles, metrics): what each returns, on rows written by the tables' writers."""
import json

from labeler.services.data import accounts, labeling, prompts, responses
from labeler.services.serving import arena, models
from labeler.services.execution import run_metrics, runs
from labeler.services.data.prompts import PromptRecord, insert_prompt
from labeler.services.data.responses import insert_response
from storage import write_transaction


def _prompt(db, text, source="file.txt", split="train", project_id=1):
    with write_transaction(db):
        return insert_prompt(db, project_id, PromptRecord(text, None), source, split=split)[0]


def test_prompt_readers(db):
    first = _prompt(db, "one", source="a.txt")
    held = _prompt(db, "two", source="a.txt", split="test")
    typed = _prompt(db, "typed", source="chat", split=prompts.TYPED_SPLIT)
    last = _prompt(db, "three", source="b.txt")
    assert prompts.prompt_text(db, held) == "two"
    assert prompts.prompt_splits(db, 1) == [(first, "train"), (held, "test"), (typed, "chat"), (last, "train")]
    assert prompts.reviewed_prompt_ids(db, 1) == [first, held, last]
    assert prompts.split_texts(db, 1, "train") == ["one", "three"]
    assert prompts.split_texts(db, 1, "test") == ["two"]
    assert prompts.has_heldout(db, 1) and not prompts.has_heldout(db, 2)
    assert prompts.prompt_column_values(db, 1, "source") == ["a.txt", "b.txt", "chat"]
    assert prompts.prompt_column_values(db, 1, "split") == ["chat", "test", "train"]
    assert prompts.prompts_by_id(db, [last, first, 999]) == {first: ("one", None), last: ("three", None)}
    assert {i: tuple(row) for i, row in prompts.project_prompt_rows(db, 1, [held, 999]).items()} == {
        held: (held, "two", None)}
    assert prompts.project_prompt_rows(db, 2, [held]) == {}
    assert prompts.last_import_prompt_ids(db) == [last]
    with write_transaction(db):
        insert_prompt(db, 1, PromptRecord("hi", [{"role": "user", "content": "hi"}]), "c.jsonl", split="test")
    assert prompts.split_prompts(db, 1, "test") == ["two", [{"role": "user", "content": "hi"}]]
    assert prompts.split_prompts(db, 2, "test") == []


def test_reviewed_prompts_count_one_models_answers(db):
    first, second = _prompt(db, "one"), _prompt(db, "two", split="test")
    _prompt(db, "typed", source="chat", split=prompts.TYPED_SPLIT)
    with write_transaction(db):
        insert_response(db, first, "a", model="m", source="generated")
        insert_response(db, first, "b", model="other", source="generated")
    assert [tuple(row) for row in prompts.reviewed_prompts_with_answers(db, 1, "m")] == [
        (first, "one", None, 1), (second, "two", None, 0)]


def test_response_readers(db):
    prompt_id = _prompt(db, "one")
    with write_transaction(db):
        a = insert_response(db, prompt_id, "same", model="m", source="generated")
        b = insert_response(db, prompt_id, "same", model="n", source="chat", server_generated=True)
        c = insert_response(db, prompt_id, "other", model="m", source="generated")
    assert responses.count_responses(db) == 3
    assert responses.find_response(db, prompt_id, "same") == a
    assert responses.find_response(db, prompt_id, "missing") is None
    assert responses.response_texts(db, [c, a, 999]) == {a: "same", c: "other"}
    assert {i: tuple(row) for i, row in responses.response_rows(db, [b]).items()} == {
        b: (b, prompt_id, "same", "n", "chat", 1)}
    assert responses.response_prompts(db, 1) == {a: prompt_id, b: prompt_id, c: prompt_id}
    assert responses.response_prompts(db, 2) == {}


def test_item_and_label_readers(db):
    prompt_id = _prompt(db, "one")
    accounts.create_user(db, "ann", "a-long-password")
    user = accounts.get_user(db, "ann")
    with write_transaction(db):
        r1, r2 = (insert_response(db, prompt_id, text, model="m", source="generated") for text in ("x", "y"))
        rating_item = labeling.insert_item(db, 1, "rating", prompt_id, [r1])
        ranking_item = labeling.insert_item(db, 1, "ranking", prompt_id, [r2, r1], priority=5, run_id=None)
        labeling.insert_ranking(db, ranking_item, prompt_id, None, json.dumps([[r2], [r1]]), source="import")
        labeling.insert_ranking(db, ranking_item, prompt_id, user.id, json.dumps([[r1, r2]]))
    labeling.submit_rating(db, "default", "ann", rating_item, 4, claim=True)
    assert labeling.find_item(db, 1, "ranking", [r1, r2]) == ranking_item
    assert labeling.find_item(db, 1, "rating", [r2]) is None
    assert labeling.item_response_ids(db, [ranking_item, rating_item]) == {ranking_item: [r1, r2], rating_item: [r1]}
    assert labeling.rating_means(db, [rating_item, ranking_item]) == {rating_item: (4.0, 1)}
    assert labeling.ranking_orders(db, [ranking_item]) == {ranking_item: [[[r2], [r1]], [[r1, r2]]]}
    assert labeling.rankings_from(db, "import") == {(ranking_item, json.dumps([[r2], [r1]]))}
    assert labeling.label_count(db, 1) == 3
    assert labeling.selectable_items(db, 1, limit=10) == []  # rated, and the ranking item has priority 5
    with write_transaction(db):
        labeling.release_items(db, [ranking_item])
    assert labeling.selectable_items(db, 1, limit=10) == [(ranking_item, "ranking", "one", [r1, r2])]


def test_models_battles_and_metrics_readers(db, tmp_path):
    run_id = runs.insert_run(db, "sft", {}, "default", None, "a run", tmp_path / "runs")
    folder = tmp_path / "policy"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"")  # the registry checks the folder holds weights, not them
    assert models.model_of_run(db, run_id) is None
    models.register_model(db, "mine", str(folder), "policy", run_id=run_id)
    assert models.model_of_run(db, run_id) == {"name": "mine", "path": str(folder.resolve())}
    assert models.model_exists(db, "mine") and not models.model_exists(db, "other")
    assert models.model_name_at(db, str(folder.resolve())) == "mine"
    assert models.model_name_at(db, str(tmp_path)) is None

    prompt_id = _prompt(db, "one")
    with write_transaction(db):
        a, b = (insert_response(db, prompt_id, t, model=t, source="arena") for t in ("a", "b"))
        # Three battles: voted second, not voted, voted first (voted_at orders them, not the id).
        db.conn.executemany(
            "INSERT INTO battles (project_id, prompt_id, model_a, model_b, response_a, response_b, winner, voted_at)"
            " VALUES (1, ?, ?, ?, ?, ?, ?, ?)",
            [(prompt_id, "m1", "m2", a, b, "a", "2026-01-02"), (prompt_id, "m1", "m3", a, b, None, None),
             (prompt_id, "m2", "m3", a, b, "tie", "2026-01-01")])
        db.conn.executemany("INSERT INTO metrics (run_id, step, name, value) VALUES (?, ?, ?, ?)",
                            [(run_id, 1, "loss", 3.0), (run_id, 2, "loss", 2.0), (run_id, 4, "loss", 1.0),
                             (run_id, 1, "lr", 0.1)])
    assert arena.voted_battles(db, 1) == [("m2", "m3", "tie"), ("m1", "m2", "a")]
    assert arena.voted_battles(db, 2) == []
    assert run_metrics.metrics_at(db, run_id, 3) == {"loss": 2.0, "lr": 0.1}
    assert run_metrics.metrics_at(db, run_id, 0) == {}
    assert [(step, value) for step, value, _ in run_metrics.metric_history(db, run_id, "loss")] == [
        (1, 3.0), (2, 2.0), (4, 1.0)]
    assert run_metrics.metric_history(db, run_id, "missing") == []
