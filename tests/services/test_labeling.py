import json

import pytest
from labeling_helpers import add_prompt, make_users, rating_items, set_overlap

from labeler.services.data import accounts, labeling, projects
from labeler.errors import InputError, PermissionDenied
from labeler.services.data.labeling import create_items, next_item, submit_ranking, submit_rating
from helpers import rows

P = "default"


def backdate(db, item_id, username, minutes):
    """Pretend the user was shown the item `minutes` ago."""
    db.execute(
        "UPDATE assignments SET assigned_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?)"
        " WHERE item_id = ? AND user_id = (SELECT id FROM users WHERE username = ?)",
        [f"-{minutes} minutes", item_id, username],
    )


@pytest.fixture
def four_ratings(db):
    """Four rating items (one prompt with 4 responses), users alice, bob, carol; returns item ids."""
    make_users(db, "alice", "bob", "carol")
    add_prompt(db, "p", 4)
    create_items(db, P, kinds=("rating",))
    return rating_items(db)


def test_group_sizes():
    assert labeling.group_sizes(1, 4) == []
    assert labeling.group_sizes(4, 4) == [4]
    assert labeling.group_sizes(5, 4) == [3, 2]  # never a lone response
    assert labeling.group_sizes(9, 4) == [3, 3, 3]
    assert labeling.group_sizes(7, 3) == [3, 2, 2]
    assert labeling.group_sizes(5, 2) == [2, 2]  # the fifth waits for a partner


def test_create_items(db):
    a = add_prompt(db, "a", 5)
    b = add_prompt(db, "b", 1)
    c = add_prompt(db, "c", 2)
    assert create_items(db, P) == 11  # 8 rating items + ranking items a:[3, 2], c:[2]
    got = rows(db, "SELECT kind, response_ids_json FROM items ORDER BY kind, id")
    assert got == [
        *[("ranking", json.dumps(ids)) for ids in (a[:3], a[3:], c)],
        *[("rating", json.dumps([r])) for r in a + b + c],
    ]
    assert create_items(db, P) == 0  # nothing missing any more
    # A second response for b: its rating item, and a ranking with b's older response.
    new = db.execute("INSERT INTO responses (prompt_id, text) SELECT prompt_id, 'b2' FROM responses WHERE id = ?", [b[0]]).lastrowid
    assert create_items(db, P, response_ids=[new], priority=3) == 2
    assert rows(db, "SELECT kind, response_ids_json, priority FROM items WHERE priority = 3 ORDER BY kind") == [
        ("ranking", json.dumps([b[0], new]), 3),
        ("rating", json.dumps([new]), 3),
    ]


def test_create_items_rejects_bad_input(db):
    add_prompt(db, "a", 2)
    for bad in (1, labeling.MAX_RANKING_SIZE + 1, "4"):
        with pytest.raises(InputError, match=r"between 2 and 8, got") as error:
            create_items(db, P, ranking_size=bad)
        assert error.value.field == "ranking_size"
    with pytest.raises(InputError, match=r"\[999\]"):
        create_items(db, P, response_ids=[999])
    assert db["items"].count == 0


def test_a_ranking_of_eight_answers_is_one_item_and_one_label(db):
    """Issue 9: up to 8 answers in one ranking; 9 is refused (test_create_items_rejects_bad_input)."""
    from labeler.services.data.label_kinds import ranking_pairs

    make_users(db, "alice")
    eight = add_prompt(db, "eight", 8)
    nine = add_prompt(db, "nine", 9)
    assert labeling.MAX_RANKING_SIZE == 8
    assert create_items(db, P, ranking_size=8, kinds=("ranking",)) == 3
    # 8 answers: one item; 9: ceil(9 / 8) = 2 items as even as possible, 5 + 4 (never 8 + 1).
    assert rows(db, "SELECT response_ids_json FROM items ORDER BY id") == [
        (json.dumps(eight),), (json.dumps(nine[:5]),), (json.dumps(nine[5:]),),
    ]
    item = next_item(db, P, "alice", "ranking")
    assert sorted(r["id"] for r in item.responses) == eight
    order = [[eight[7]], [eight[0], eight[1]], *[[r] for r in eight[2:7]]]  # best first, two tied
    submit_ranking(db, P, "alice", item.item_id, order)
    stored = json.loads(rows(db, "SELECT order_json FROM rankings")[0][0])
    assert stored == order
    # 8 answers with one tie: 8 * 7 / 2 = 28 pairs, less the tied pair = 27.
    assert len(ranking_pairs(stored)) == 27
    assert len(ranking_pairs([[r] for r in eight])) == 28


def test_overlap_one_each_user_gets_a_different_item(db, four_ratings):
    i1, i2, i3, i4 = four_ratings
    assert next_item(db, P, "alice").item_id == i1
    assert next_item(db, P, "bob").item_id == i2
    assert next_item(db, P, "alice").item_id == i1  # refresh: the pending item comes back
    submit_rating(db, P, "alice", i1, 5)
    assert next_item(db, P, "alice").item_id == i3
    submit_rating(db, P, "bob", i2, 6)
    assert next_item(db, P, "bob").item_id == i4
    submit_rating(db, P, "alice", i3, 2)
    assert next_item(db, P, "alice") is None  # i4 is bob's
    assert next_item(db, P, "carol") is None


def test_overlap_two(db, four_ratings):
    set_overlap(db, 2)
    i1, i2, i3, i4 = four_ratings
    assert next_item(db, P, "alice").item_id == i1
    assert next_item(db, P, "bob").item_id == i1
    assert next_item(db, P, "carol").item_id == i2  # i1 is full
    submit_rating(db, P, "alice", i1, 5)
    assert next_item(db, P, "alice").item_id == i2  # second slot of i2
    submit_rating(db, P, "bob", i1, 4)
    assert next_item(db, P, "bob").item_id == i3  # i2 is full (carol, alice)
    labelled = []
    for user in ("alice", "bob", "carol"):
        while (item := next_item(db, P, user)) is not None:
            submit_rating(db, P, user, item.item_id, 3)
            labelled.append((user, item.item_id))
    # Every item ends with exactly two ratings from two different users.
    assert rows(db, "SELECT item_id, COUNT(DISTINCT user_id) FROM ratings GROUP BY item_id") == [
        (i, 2) for i in four_ratings
    ]


def test_nobody_gets_an_item_twice(db, four_ratings):
    set_overlap(db, 3)
    seen = []
    while (item := next_item(db, P, "alice")) is not None:
        seen.append(item.item_id)
        if len(seen) % 2:
            submit_rating(db, P, "alice", item.item_id, 4)
        else:
            labeling.skip_item(db, P, "alice", item.item_id)
    assert seen == four_ratings


def test_queue_item_contents_and_progress(db, four_ratings):
    projects.update_project(db, P, likert_min=1, likert_max=5, guidelines="Be kind.")
    item = next_item(db, P, "alice")
    response = db.execute("SELECT id, text, model FROM responses ORDER BY id LIMIT 1").fetchone()
    assert item.kind == "rating"
    assert item.prompt == "p"
    assert item.responses == [{"id": response["id"], "text": response["text"], "model": "m"}]
    assert (item.guidelines, item.likert_min, item.likert_max, item.run_id) == ("Be kind.", 1, 5, None)
    assert (item.done, item.remaining) == (0, 4)  # the shown item counts as remaining
    submit_rating(db, P, "alice", item.item_id, 5)
    assert labeling.progress(db, P, "alice", "rating") == (1, 3)
    nxt = next_item(db, P, "bob")
    assert (nxt.done, nxt.remaining) == (0, 3)
    assert labeling.progress(db, P, "alice", "rating") == (1, 2)  # bob holds one now


def test_expired_pending_is_reassigned(db, four_ratings):
    i1, i2 = four_ratings[:2]
    assert next_item(db, P, "alice").item_id == i1
    backdate(db, i1, "alice", 31)
    assert next_item(db, P, "bob").item_id == i1  # alice walked away: her slot is free
    # Alice's late submit is refused (the item is bob's now) and writes nothing.
    with pytest.raises(InputError, match="went to another annotator"):
        submit_rating(db, P, "alice", i1, 4)
    assert db["ratings"].count == 0
    # Her stale assignment is released and she moves on.
    assert next_item(db, P, "alice").item_id == i2
    # Her assignment is gone, and the refusal still says why: the item went to another annotator.
    with pytest.raises(PermissionDenied, match="not assigned to 'alice': another annotator holds it"):
        submit_rating(db, P, "alice", i1, 4)


def test_stale_pending_comes_back_when_nobody_took_it(db, four_ratings):
    i1 = four_ratings[0]
    next_item(db, P, "alice")
    backdate(db, i1, "alice", 45)
    assert next_item(db, P, "alice").item_id == i1
    # Showing it renewed the reservation, so bob does not get it.
    assert next_item(db, P, "bob").item_id == four_ratings[1]
    # A pending reservation under 30 minutes old still holds its slot.
    backdate(db, four_ratings[1], "bob", 29)
    assert next_item(db, P, "carol").item_id == four_ratings[2]


def test_priority_first_then_oldest(db):
    make_users(db, "alice")
    old = add_prompt(db, "old", 2)
    create_items(db, P, kinds=("rating",))
    urgent = add_prompt(db, "urgent", 2)
    create_items(db, P, response_ids=urgent, kinds=("rating",), priority=10)
    served = []
    while (item := next_item(db, P, "alice")) is not None:
        served.append(item.responses[0]["id"])
        submit_rating(db, P, "alice", item.item_id, 3)
    assert served == urgent + old


def test_skip(db, four_ratings):
    i1, i2 = four_ratings[:2]
    with pytest.raises(PermissionDenied):
        labeling.skip_item(db, P, "alice", i1)  # never served
    assert next_item(db, P, "alice").item_id == i1
    labeling.skip_item(db, P, "alice", i1)
    labeling.skip_item(db, P, "alice", i1)  # a second click changes nothing
    assert next_item(db, P, "alice").item_id == i2
    assert next_item(db, P, "bob").item_id == i1  # a skip frees the slot
    submit_rating(db, P, "alice", i2, 3)
    with pytest.raises(InputError, match="already labelled"):
        labeling.skip_item(db, P, "alice", i2)
    with pytest.raises(InputError, match="skipped"):
        submit_rating(db, P, "alice", i1, 3)
    assert rows(db, "SELECT status, COUNT(*) FROM assignments GROUP BY status ORDER BY status") == [
        ("done", 1), ("pending", 1), ("skipped", 1)
    ]


def test_undo_puts_the_item_back_first(db, four_ratings):
    i1, i2, i3 = four_ratings[:3]
    assert labeling.undo_last_action(db, P, "alice", "rating") is None
    for item_id, score in ((i1, 2), (i2, 3)):
        assert next_item(db, P, "alice").item_id == item_id
        submit_rating(db, P, "alice", item_id, score)
    assert next_item(db, P, "alice").item_id == i3  # i3 is pending when she undoes
    assert labeling.undo_last_action(db, P, "alice", "rating") == labeling.Undone(i2, "label")
    assert rows(db, "SELECT item_id, score FROM ratings") == [(i1, 2.0)]
    assert next_item(db, P, "alice").item_id == i2  # ahead of the pending i3
    assert submit_rating(db, P, "alice", i2, 7).created  # a different score is fine after undo
    assert next_item(db, P, "alice").item_id == i3
    assert labeling.undo_last_action(db, P, "alice", "rating") == labeling.Undone(i2, "label")
    assert labeling.undo_last_action(db, P, "alice", "rating") == labeling.Undone(i1, "label")
    assert labeling.undo_last_action(db, P, "alice", "ranking") is None
    assert db["ratings"].count == 0


def test_idempotent_submits(db, four_ratings):
    i1, i2 = four_ratings[:2]
    next_item(db, P, "alice")
    first = submit_rating(db, P, "alice", i1, 5, request_id="r-1")
    assert first.created
    assert submit_rating(db, P, "alice", i1, 5, request_id="r-1") == labeling.LabelResult(first.label_id, False)
    # A double click that sent a new request id with the same value: still one label.
    assert submit_rating(db, P, "alice", i1, 5, request_id="r-2") == labeling.LabelResult(first.label_id, False)
    assert submit_rating(db, P, "alice", i1, 5) == labeling.LabelResult(first.label_id, False)
    with pytest.raises(InputError, match="undo to change"):
        submit_rating(db, P, "alice", i1, 6)
    next_item(db, P, "alice")
    with pytest.raises(InputError) as error:
        submit_rating(db, P, "alice", i2, 5, request_id="r-1")  # a request id belongs to one label
    assert error.value.field == "request_id"
    assert rows(db, "SELECT item_id, score, request_id FROM ratings") == [(i1, 5.0, "r-1")]


def test_invalid_submits_write_nothing(db, four_ratings):
    i1 = four_ratings[0]
    make_users(db, "dora")
    db.execute("UPDATE users SET active = 0 WHERE username = 'dora'")
    with pytest.raises(PermissionDenied):
        next_item(db, P, "dora")
    with pytest.raises(PermissionDenied):
        next_item(db, P, "nobody")
    next_item(db, P, "alice")
    for kwargs, field in (
        ({"score": 8}, "score"),
        ({"score": 4.5}, "score"),
        ({"score": 4, "seconds": -1}, "seconds"),
        ({"score": 4, "comment": None}, "comment"),
    ):
        with pytest.raises(InputError) as error:
            submit_rating(db, P, "alice", i1, **kwargs)
        assert error.value.field == field
    with pytest.raises(InputError) as error:
        submit_rating(db, P, "alice", 12345, 4)
    assert error.value.field == "item_id"
    with pytest.raises(InputError, match="not a ranking item"):
        submit_ranking(db, P, "alice", i1, [[1]])
    with pytest.raises(PermissionDenied):
        submit_rating(db, P, "bob", i1, 4)  # alice holds it
    with pytest.raises(InputError):
        next_item(db, P, "alice", "vote")
    assert db["ratings"].count == 0
    assert rows(db, "SELECT status FROM assignments") == [("pending",)]


def test_claim_rates_an_item_never_served(db, four_ratings):
    i4 = four_ratings[3]
    with pytest.raises(PermissionDenied):
        submit_rating(db, P, "bob", i4, 6)
    assert submit_rating(db, P, "bob", i4, 6, claim=True).created
    with pytest.raises(InputError, match="already has 1 annotator"):
        submit_rating(db, P, "carol", i4, 6, claim=True)
    # The claimed item is done for bob and full for everyone else.
    served = []
    while (item := next_item(db, P, "alice")) is not None:
        served.append(item.item_id)
        submit_rating(db, P, "alice", item.item_id, 1)
    assert served == four_ratings[:3]


def test_ranking_with_ties(db):
    make_users(db, "alice", "bob")
    r = add_prompt(db, "rank me", 3)
    create_items(db, P, kinds=("ranking",))
    item = next_item(db, P, "alice", "ranking")
    assert item.kind == "ranking"
    shown = [resp["id"] for resp in item.responses]
    assert sorted(shown) == r
    assert [resp["id"] for resp in next_item(db, P, "alice", "ranking").responses] == shown  # same after refresh
    # A seeded shuffle per (item, user): the same call with the same seed gives the same order.
    import random

    expected = list(r)
    random.Random(f"{item.item_id}:{accounts.get_user(db, 'alice').id}").shuffle(expected)
    assert shown == expected
    with pytest.raises(InputError, match="missing"):
        submit_ranking(db, P, "alice", item.item_id, [[r[0]], [r[1]]])
    with pytest.raises(InputError, match="more than once"):
        submit_ranking(db, P, "alice", item.item_id, [[r[0]], [r[1], r[0]], [r[2]]])
    result = submit_ranking(db, P, "alice", item.item_id, [[r[2]], [r[1], r[0]]], comment="1 and 0 tie", seconds=12.5)
    assert result.created
    assert rows(db, "SELECT item_id, prompt_id, order_json, comment, seconds, source FROM rankings") == [
        (item.item_id, item.prompt_id, json.dumps([[r[2]], [r[0], r[1]]]), "1 and 0 tie", 12.5, "annotator")
    ]
    # Same ranking again (groups in another inner order): the same label.
    assert submit_ranking(db, P, "alice", item.item_id, [[r[2]], [r[0], r[1]]]) == labeling.LabelResult(result.label_id, False)
    assert next_item(db, P, "alice", "ranking") is None
    assert next_item(db, P, "bob", "ranking") is None  # overlap 1
    assert labeling.undo_last_action(db, P, "alice", "ranking") == labeling.Undone(item.item_id, "label")
    assert db["rankings"].count == 0


def test_gold_items_are_served_to_everyone(db, four_ratings):
    i1, i2 = four_ratings[:2]
    labeling.set_gold(db, i1, {"score": 6})
    assert rows(db, "SELECT gold_json FROM items WHERE id = ?", [i1]) == [('{"score": 6}',)]
    # Overlap 1, yet every annotator meets the gold item, in its usual place in the queue.
    assert next_item(db, P, "alice").item_id == i1
    assert next_item(db, P, "bob").item_id == i1
    submit_rating(db, P, "alice", i1, 6)
    submit_rating(db, P, "bob", i1, 2)
    assert next_item(db, P, "carol").item_id == i1
    labeling.set_gold(db, i1, None)
    assert rows(db, "SELECT gold_json FROM items WHERE id = ?", [i1]) == [(None,)]


def test_set_gold_validates(db, four_ratings):
    a, b = add_prompt(db, "r", 2)
    create_items(db, P, response_ids=[a, b], kinds=("ranking",))
    (ranking_id,) = db.execute("SELECT id FROM items WHERE kind = 'ranking'").fetchone()
    for item_id, gold, field in (
        (four_ratings[0], {"score": 0}, "gold.score"),
        (four_ratings[0], {"order": [[1]]}, "gold"),
        (ranking_id, {"order": [[a]]}, "gold.order"),
        (ranking_id, [[a], [b]], "gold"),
        (999, {"score": 3}, "item_id"),
    ):
        with pytest.raises(InputError) as error:
            labeling.set_gold(db, item_id, gold)
        assert error.value.field == field
    labeling.set_gold(db, ranking_id, {"order": [[b], [a]]})
    assert rows(db, "SELECT gold_json FROM items WHERE gold_json IS NOT NULL") == [(json.dumps({"order": [[b], [a]]}),)]


def test_run_items_and_waiting_count(db):
    make_users(db, "alice")
    old = add_prompt(db, "old", 1)
    create_items(db, P, kinds=("rating",))
    run_id = db.execute("INSERT INTO runs (project_id, stage) VALUES (1, 'ppo')").lastrowid
    rollouts = add_prompt(db, "rollout", 2)
    create_items(db, P, response_ids=rollouts, kinds=("rating",), priority=100, run_id=run_id)
    assert labeling.waiting_for_run(db, run_id) == 2
    item = next_item(db, P, "alice")
    assert (item.run_id, item.responses[0]["id"]) == (run_id, rollouts[0])
    submit_rating(db, P, "alice", item.item_id, 4)
    assert labeling.waiting_for_run(db, run_id) == 1
    assert next_item(db, P, "alice").run_id == run_id
    assert old  # the older, unprioritised item waits behind the run's
    # Released (the run timed out on it, or ended): no longer waited for, though still unrated.
    db.execute("UPDATE items SET priority = 0 WHERE run_id = ?", [run_id])
    assert labeling.waiting_for_run(db, run_id) == 0


def test_comments_have_a_length_limit(db):
    # Issue 10 item 8: a 5 MB comment was once stored. One over the limit is refused, naming the field.
    make_users(db, "alice")
    add_prompt(db, "Review", 2)
    create_items(db, P)
    item = next_item(db, P, "alice", "rating")
    with pytest.raises(InputError, match="field 'comment': 5,001 characters: at most 5,000"):
        submit_rating(db, P, "alice", item.item_id, 3, comment="c" * (labeling.MAX_COMMENT_CHARS + 1))
    assert db["ratings"].count == 0
    assert submit_rating(db, P, "alice", item.item_id, 3, comment="c" * labeling.MAX_COMMENT_CHARS).created


def test_project_counts_and_item_detail(db):
    make_users(db, "alice")
    projects.create_project(db, "other")
    add_prompt(db, "elsewhere", 3, project="other")
    assert projects.project_counts(db, P) == {"prompts": 0, "responses": 0, "ratings": 0, "rankings": 0}
    a, b = add_prompt(db, "Hi", 2)
    create_items(db, P)
    rating = next_item(db, P, "alice")
    submit_rating(db, P, "alice", rating.item_id, 5)
    ranking = next_item(db, P, "alice", "ranking")
    submit_ranking(db, P, "alice", ranking.item_id, [[b], [a]])
    assert projects.project_counts(db, P) == {"prompts": 1, "responses": 2, "ratings": 1, "rankings": 1}
    assert projects.project_counts(db, "other") == {"prompts": 1, "responses": 3, "ratings": 0, "rankings": 0}
    assert labeling.item_detail(db, ranking.item_id) == {
        "kind": "ranking", "prompt": "Hi", "responses": [(a, "Hi / answer 0"), (b, "Hi / answer 1")], "gold_json": None,
        "selection_reason": None,
    }
    with pytest.raises(InputError) as error:
        labeling.item_detail(db, 999)
    assert error.value.field == "item_id"
