"""Held-out prompts (split 'test') are for judging runs: they never reach a person for labelling unless an admin
asks for evaluation labels (the `people` measure's blind pairs, responses named by id), and a label on one is in
no export unless asked for (`include_heldout`). Issue 48: the Arena drew 9 of 80 prompts from the held-out ones,
and a vote on one appeared in a default export. One test per path that draws prompts for people."""
from __future__ import annotations

import random

import pytest

from labeler.services.data import accounts, labeling, prompts
from labeler.services.serving import arena, generation
from labeler.services.evals import people_eval
from labeler.errors import InputError
from labeler.services.labels.export import ExportOptions, preference_rows
from labeler.services.data.responses import insert_response
from storage import write_transaction

TRAIN = ["A training prompt", "Another training prompt"]
HELD = ["A held-out prompt", "Another held-out prompt", "A third held-out prompt"]


@pytest.fixture
def studio(db):
    accounts.create_user(db, "alice", "alice-password-1")
    prompts.add_prompts(db, TRAIN + HELD, source="test")
    with write_transaction(db):
        prompts.hold_out(db, [3, 4, 5])
    return db


def _answer(db, prompt_id: int, text: str, model: str = "m", source: str = "generated") -> int:
    with write_transaction(db):
        return insert_response(db, prompt_id, text, model=model, source=source, server_generated=True)


def test_the_arena_never_draws_a_held_out_prompt(studio):
    picked = {arena.random_prompt(studio, "default", random.Random(seed)) for seed in range(60)}
    assert picked == set(TRAIN)
    # Only held-out prompts left: nothing to draw, as for an empty project.
    studio.execute("UPDATE prompts SET split = 'test'")
    with pytest.raises(InputError, match="no prompts yet"):
        arena.random_prompt(studio, "default", random.Random(0))


def test_generation_answers_held_out_prompts_only_when_an_admin_names_them(studio):
    work = generation._work_list(studio, 1, "m", 1, None, None)
    assert [row["text"] for row in work] == TRAIN
    named = generation._work_list(studio, 1, "m", 1, [3], None)
    assert [row["text"] for row in named] == [HELD[0]]


def test_the_queue_never_gets_items_of_held_out_prompts(studio):
    train_ids = [_answer(studio, 1, f"answer {i}") for i in range(2)]
    held_ids = [_answer(studio, 3, f"held answer {i}") for i in range(2)]
    assert labeling.create_items(studio, "default") == 3  # two ratings and one ranking, all of prompt 1
    seen = set()
    while (item := labeling.next_item(studio, "default", "alice", "rating")) is not None:
        seen.add(item.prompt)
        labeling.submit_rating(studio, "default", "alice", item.item_id, 5)
    assert seen == {TRAIN[0]}
    # Named answers of a held-out prompt get no items either (a prompt can become held-out while its answers are
    # generated): evaluation labels reach people only as the `people` measure's blind pairs (next test).
    assert labeling.create_items(studio, "default", response_ids=held_ids, kinds=("rating",)) == 0
    assert labeling.next_item(studio, "default", "alice", "rating") is None
    assert train_ids


def test_people_eval_pairs_still_reach_people_and_stay_out_of_exports(studio):
    # The measure `people`: blind pairs of base and tuned answers to held-out prompts, queued for ranking. These
    # are the evaluation labels an admin asked for; their rankings are read by people_win_rate, never exported.
    studio.execute("INSERT INTO runs (project_id, stage, config_json, status) VALUES (1, 'sft', '{}', 'succeeded')")
    run_id = studio.execute("SELECT MAX(id) FROM runs").fetchone()[0]
    base = [{"answer": f"base {i}"} for i in range(3)]
    tuned = [{"answer": f"tuned {i}"} for i in range(3)]
    assert people_eval.queue_comparisons(studio, "default", run_id, "base", "tuned", base, tuned, 1) == 3
    item = labeling.next_item(studio, "default", "alice", "ranking")
    assert item is not None and item.prompt in HELD
    by_model = {r["model"]: r["id"] for r in item.responses}
    labeling.submit_ranking(studio, "default", "alice", item.item_id, [[by_model["tuned"]], [by_model["base"]]])
    assert people_eval.people_win_rate(studio, run_id, "tuned").wins == 1
    assert preference_rows(studio) == []
    rows = preference_rows(studio, options=ExportOptions(include_heldout=True))
    assert [(r["prompt"] in HELD, r["chosen"].startswith("tuned")) for r in rows] == [(True, True)]


def test_an_arena_vote_on_a_held_out_prompt_is_not_exported(studio):
    # A battle on a prompt typed to be the same as a held-out one (typed prompts reuse the held-out row): its vote
    # is stored, as any label, but a default export leaves it out.
    ids = [_answer(studio, 3, text, model=name, source="arena") for text, name in (("left", "a"), ("right", "b"))]
    with write_transaction(studio):
        item_id = labeling.insert_item(studio, 1, "ranking", 3, ids)
        labeling.insert_ranking(studio, item_id, 3, 1, f"[[{ids[0]}], [{ids[1]}]]")
    assert preference_rows(studio) == []
    assert [r["chosen"] for r in preference_rows(studio, options=ExportOptions(include_heldout=True))] == ["left"]
