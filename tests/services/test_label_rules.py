"""Labels obey holds, overlap and splits when they are stored, with two annotators: a held-out prompt takes only
evaluation labels, a hold that passed to another annotator refuses the old holder, the overlap is never exceeded,
a deactivated account's items return to the queue, and answers added later join the prompt's rankings."""
from __future__ import annotations

import json

import pytest
from labeling_helpers import add_prompt, make_users, set_overlap

from labeler.services.data import accounts, labeling
from labeler.services.evals import people_eval
from labeler.errors import PermissionDenied
from labeler.services.data.responses import insert_response
from storage import write_transaction
from helpers import rows

P = "default"


@pytest.fixture
def two(db):
    make_users(db, "alice", "bob")
    set_overlap(db, 1)
    return db


def hold_age(db, item_id, username, seconds):
    """Pretend `username` was shown the item `seconds` ago."""
    db.execute("UPDATE assignments SET assigned_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?)"
               " WHERE item_id = ? AND user_id = (SELECT id FROM users WHERE username = ?)",
               [f"-{seconds} seconds", item_id, username])


def test_a_prompt_held_out_after_its_items_were_made_takes_no_training_label(two):
    db = two
    add_prompt(db, "soon held out", 2)
    labeling.create_items(db, P, ranking_size=2)
    rate = labeling.next_item(db, P, "alice", "rating")
    rank = labeling.next_item(db, P, "bob", "ranking")
    db.execute("UPDATE prompts SET split = 'test' WHERE id = ?", [rate.prompt_id])  # held out meanwhile
    with pytest.raises(labeling.ItemUnavailable, match=f"item {rate.item_id}'s prompt is held out for evaluation"):
        labeling.submit_rating(db, P, "alice", rate.item_id, 5)
    order = [[r["id"]] for r in rank.responses]
    with pytest.raises(labeling.ItemUnavailable, match="held out for evaluation"):
        labeling.submit_ranking_and_next(db, P, "bob", rank.item_id, order)
    with pytest.raises(labeling.ItemUnavailable, match="held out"):
        labeling.submit_rating(db, P, "bob", rate.item_id + 1, 5, claim=True)
    assert rows(db, "SELECT COUNT(*) FROM ratings") == [(0,)]
    assert rows(db, "SELECT COUNT(*) FROM rankings") == [(0,)]
    assert rows(db, "SELECT status FROM assignments ORDER BY id") == [("pending",), ("pending",)]


def test_a_held_out_prompt_gets_no_items_even_when_its_answers_are_named(two):
    db = two
    ids = add_prompt(db, "held out", 3)
    db.execute("UPDATE prompts SET split = 'test'")
    assert labeling.create_items(db, P, ids, ranking_size=4) == 0
    assert rows(db, "SELECT COUNT(*) FROM items") == [(0,)]


def test_the_people_measure_s_blind_pair_on_a_held_out_prompt_takes_its_label(two):
    db = two
    assert people_eval.EVALUATION_SOURCE == labeling.EVALUATION_SOURCE
    add_prompt(db, "held out", 0)
    db.execute("UPDATE prompts SET split = 'test'")
    prompt_id = db.execute("SELECT id FROM prompts").fetchone()[0]
    with write_transaction(db):
        ids = [insert_response(db, prompt_id, text, model=name, source=people_eval.EVALUATION_SOURCE)
               for text, name in (("base answer", "base"), ("tuned answer", "tuned"))]
        labeling.insert_item(db, 1, "ranking", prompt_id, ids, priority=people_eval.PEOPLE_EVAL_PRIORITY)
    item = labeling.next_item(db, P, "alice", "ranking")
    assert labeling.submit_ranking(db, P, "alice", item.item_id, [[ids[1]], [ids[0]]]).created


def test_a_late_submit_on_an_overlap_one_run_item_labelled_by_another_is_refused(two):
    # The walk's case: alice's hold on a run item lapsed, bob took it and ranked it, the run released the item
    # to normal priority (where alice's 61 s old hold looks fresh again), then alice's keyboard submit arrived.
    db = two
    ids = add_prompt(db, "run answers", 2)
    with write_transaction(db):
        item_id = labeling.insert_item(db, 1, "ranking", 1, ids, priority=10)
    assert labeling.next_item(db, P, "alice", "ranking").item_id == item_id
    hold_age(db, item_id, "alice", labeling.RUN_ITEM_IDLE_SECONDS + 1)
    assert labeling.next_item(db, P, "bob", "ranking").item_id == item_id
    labeling.submit_ranking(db, P, "bob", item_id, [[ids[0]], [ids[1]]])
    with write_transaction(db):
        labeling.release_items(db, [item_id])
    with pytest.raises(labeling.ItemUnavailable, match=f"item {item_id} already has the 1 label"):
        labeling.submit_ranking(db, P, "alice", item_id, [[ids[1]], [ids[0]]])
    assert rows(db, "SELECT u.username FROM rankings k JOIN users u ON u.id = k.user_id") == [("bob",)]


def test_the_old_holder_s_submit_names_the_hold_that_passed(two):
    db = two
    add_prompt(db, "one", 1)
    labeling.create_items(db, P, kinds=("rating",))
    item_id = labeling.next_item(db, P, "alice").item_id
    hold_age(db, item_id, "alice", labeling.PENDING_TTL_MINUTES * 60 + 1)
    assert labeling.next_item(db, P, "bob").item_id == item_id
    with pytest.raises(labeling.ItemUnavailable, match="idle for over 30 minutes and went to another annotator"):
        labeling.submit_rating(db, P, "alice", item_id, 3)
    assert labeling.next_item(db, P, "alice") is None  # her stale hold is dropped; the item is bob's
    with pytest.raises(PermissionDenied, match="another annotator holds it"):
        labeling.submit_rating(db, P, "alice", item_id, 3)
    assert labeling.submit_rating(db, P, "bob", item_id, 3).created


@pytest.mark.parametrize("switch_off", [
    lambda db: accounts.set_active(db, "alice", False),
    lambda db: accounts.set_simulated_active(db, "alice", False),
])
def test_a_deactivated_account_s_pending_items_return_to_the_queue(two, switch_off):
    db = two
    accounts.create_user(db, "admin", "correct horse battery", role="admin")
    add_prompt(db, "one", 1)
    labeling.create_items(db, P, kinds=("rating",))
    item_id = labeling.next_item(db, P, "alice").item_id
    assert labeling.next_item(db, P, "bob") is None  # overlap 1: alice holds it
    switch_off(db)
    assert labeling.next_item(db, P, "bob").item_id == item_id
    assert labeling.progress(db, P, "bob") == (0, 1)


def test_a_deactivated_account_keeps_its_labels_and_skips(two):
    db = two
    accounts.create_user(db, "admin", "correct horse battery", role="admin")
    add_prompt(db, "three", 3)
    labeling.create_items(db, P, kinds=("rating",))
    first = labeling.next_item(db, P, "alice").item_id
    labeling.submit_rating(db, P, "alice", first, 4)
    labeling.skip_item(db, P, "alice", labeling.next_item(db, P, "alice").item_id)
    labeling.next_item(db, P, "alice")
    accounts.set_active(db, "alice", False)
    assert rows(db, "SELECT status FROM assignments ORDER BY id") == [("done",), ("skipped",)]


def ranking_groups(db):
    return [json.loads(row[0]) for row in db.execute("SELECT response_ids_json FROM items WHERE kind = 'ranking' ORDER BY id")]


def test_a_third_answer_joins_its_prompt_s_untouched_ranking_group(two):
    db = two
    first = add_prompt(db, "topped up", 2)
    labeling.create_items(db, P, first, ranking_size=4)
    assert ranking_groups(db) == [first]
    third = db.execute("INSERT INTO responses (prompt_id, text, model) VALUES (1, 'third', 'm')").lastrowid
    labeling.create_items(db, P, [third], ranking_size=4, kinds=("rating",))
    labeling.create_items(db, P, [third], ranking_size=4, kinds=("ranking",))  # as generate_responses does
    assert ranking_groups(db) == [[*first, third]]
    assert rows(db, "SELECT COUNT(*) FROM items WHERE kind = 'rating'") == [(3,)]


def test_a_third_answer_after_its_pair_was_ranked_makes_a_new_group(two):
    db = two
    first = add_prompt(db, "topped up", 2)
    labeling.create_items(db, P, first, ranking_size=4)
    pair = labeling.next_item(db, P, "alice", "ranking")
    labeling.submit_ranking(db, P, "alice", pair.item_id, [[first[0]], [first[1]]])
    third = db.execute("INSERT INTO responses (prompt_id, text, model) VALUES (1, 'third', 'm')").lastrowid
    labeling.create_items(db, P, [third], ranking_size=4, kinds=("ranking",))
    assert ranking_groups(db) == [first, sorted([third, *first])]
    # The ranked pair stays as it was, with its label; bob gets the new group of three.
    assert labeling.next_item(db, P, "bob", "ranking").item_id != pair.item_id
    # A group someone was shown (not labelled yet) is not changed under them either.
    fourth = db.execute("INSERT INTO responses (prompt_id, text, model) VALUES (1, 'fourth', 'm')").lastrowid
    labeling.create_items(db, P, [fourth], ranking_size=4, kinds=("ranking",))
    assert ranking_groups(db)[:2] == [first, sorted([third, *first])]
    assert sorted(ranking_groups(db)[2]) == sorted([fourth, third, *first][:4])


def test_topping_prompts_up_from_two_answers_to_three_reaches_the_rank_tab(db, tiny_model_dir):
    from labeler.services.serving import models
    from labeler.services.data import prompts
    from labeler.services.serving.generation import generate_responses
    from rlhf.configs import GenerationSettings

    settings = GenerationSettings(max_new_tokens=4, batch_size=4, seed=5)
    make_users(db, "alice")
    models.register_model(db, "tiny", str(tiny_model_dir), "policy")
    prompts.add_prompts(db, ["First prompt", "Second prompt"])
    db.execute("UPDATE prompts SET split = 'train'")
    generate_responses(db, P, "tiny", n_per_prompt=2, settings=settings)
    pair = labeling.next_item(db, P, "alice", "ranking")  # one pair ranked before the top-up, one not
    labeling.submit_ranking(db, P, "alice", pair.item_id, [[r["id"]] for r in pair.responses])
    assert len(generate_responses(db, P, "tiny", n_per_prompt=3, settings=settings)) == 2
    answers = {prompt: sorted(ids) for prompt, ids in _answers_by_prompt(db).items()}
    groups = ranking_groups(db)
    # Every prompt's three answers are ranked together: the unranked pair took its third answer in, the ranked
    # pair stays with its label and the third answer makes a new group with it.
    assert all(ids in groups for ids in answers.values())
    assert pair.item_id in {row[0] for row in db.execute("SELECT item_id FROM rankings")}
    assert len(groups) == 3
    assert rows(db, "SELECT COUNT(*) FROM items WHERE kind = 'rating'") == [(6,)]


def _answers_by_prompt(db):
    found = {}
    for response_id, prompt_id in db.execute("SELECT id, prompt_id FROM responses"):
        found.setdefault(prompt_id, []).append(response_id)
    return found


def test_the_queue_serves_no_item_of_a_prompt_held_out_after_it_was_made(two):
    # After the refusal the next item loads: it must not be the refused one again, for this user or another.
    db = two
    add_prompt(db, "soon held out", 1)
    add_prompt(db, "stays in training", 1)
    labeling.create_items(db, P, kinds=("rating",))
    shown = labeling.next_item(db, P, "alice")
    db.execute("UPDATE prompts SET split = 'test' WHERE id = ?", [shown.prompt_id])
    with pytest.raises(labeling.ItemUnavailable):
        labeling.submit_rating(db, P, "alice", shown.item_id, 4)
    after = labeling.next_item(db, P, "alice")
    assert after.item_id != shown.item_id and after.prompt == "stays in training"
    assert labeling.next_item(db, P, "bob") is None  # overlap 1: alice holds the other; the held-out one is nobody's
