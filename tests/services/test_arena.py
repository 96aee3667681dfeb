"""Arena: blind battles, votes stored as rankings that export as preference pairs, the leaderboard."""
from __future__ import annotations

import random

import pytest

from labeler.services.data import accounts
from labeler.services.serving import arena, models
from labeler.services.serving.chat import ModelCache
from labeler.errors import InputError, PermissionDenied
from labeler.services.labels.export import ExportOptions, preference_rows
from labeler.services.serving.leaderboard import leaderboard
from rlhf.configs import GenerationSettings

SETTINGS = GenerationSettings(max_new_tokens=6, batch_size=1)


@pytest.fixture(scope="module")
def other_tiny_dir(tmp_path_factory, tiny_model_dir):
    """The tiny model's architecture with different random weights: a second, different model."""
    import torch
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM

    out = tmp_path_factory.mktemp("tiny-llama-2")
    torch.manual_seed(1)
    model = LlamaForCausalLM(AutoConfig.from_pretrained(tiny_model_dir))
    model.generation_config.eos_token_id = model.config.eos_token_id
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


@pytest.fixture
def arena_db(db, tiny_model_dir, other_tiny_dir):
    accounts.create_user(db, "alice", "alice-password-1")
    accounts.create_user(db, "bob", "bob-password-1")
    models.register_model(db, "one", str(tiny_model_dir), "policy")
    models.register_model(db, "two", str(other_tiny_dir), "policy")
    return db


@pytest.fixture(scope="module")
def cache():
    return ModelCache()


def test_battle_is_blind_and_vote_exports_a_preference_pair(arena_db, cache):
    db = arena_db
    battle = arena.start_battle(db, cache, "default", "alice", "Rate this film", "one", "two", SETTINGS, random.Random(0))
    assert "one" not in repr(battle) and "two" not in repr(battle)  # nothing names a model before the vote
    row = db.execute("SELECT * FROM battles WHERE id = ?", [battle.id]).fetchone()
    texts = {r["id"]: (r["text"], r["model"], r["source"]) for r in db.execute("SELECT * FROM responses")}
    assert texts[row["response_a"]] == (battle.answer_a, row["model_a"], "arena")
    assert texts[row["response_b"]] == (battle.answer_b, row["model_b"], "arena")
    assert {row["model_a"], row["model_b"]} == {"one", "two"} and row["winner"] is None
    assert battle.answer_a != battle.answer_b

    result = arena.vote(db, battle.id, "alice", "b")
    assert (result.model_a, result.model_b, result.winner) == (row["model_a"], row["model_b"], "b")
    ranking = db.execute("SELECT item_id, user_id, order_json, source FROM rankings WHERE id = ?", [result.ranking_id]).fetchone()
    assert ranking["order_json"] == f"[[{row['response_b']}], [{row['response_a']}]]" and ranking["source"] == "arena"
    item = db.execute("SELECT kind, response_ids_json FROM items WHERE id = ?", [ranking["item_id"]]).fetchone()
    assert item["kind"] == "ranking"
    assert preference_rows(db, "default", ExportOptions()) == [
        {"prompt": "Rate this film", "chosen": battle.answer_b, "rejected": battle.answer_a, "source": "arena"}
    ]
    # A double click stores nothing new; changing the vote is refused.
    assert arena.vote(db, battle.id, "alice", "b") == result
    with pytest.raises(InputError):
        arena.vote(db, battle.id, "alice", "a")
    assert db["rankings"].count == 1


def test_tie_is_one_group_and_exports_no_pair(arena_db, cache):
    db = arena_db
    battle = arena.start_battle(db, cache, "default", "alice", "Hello", "one", "two", SETTINGS, random.Random(1))
    arena.vote(db, battle.id, "alice", "both_bad")
    row = db.execute("SELECT response_a, response_b, winner FROM battles").fetchone()
    order = db.execute("SELECT order_json FROM rankings").fetchone()[0]
    assert order == f"[{sorted([row['response_a'], row['response_b']])}]" and row["winner"] == "both_bad"
    assert preference_rows(db, "default", ExportOptions()) == []


def test_order_is_randomised(arena_db, cache):
    firsts = set()
    short = GenerationSettings(max_new_tokens=1, batch_size=1)
    for seed in range(4):  # random.Random(0).random() = 0.84, Random(1) = 0.13: both orders occur
        battle = arena.start_battle(arena_db, cache, "default", "alice", "Hi", "one", "two", short, random.Random(seed))
        firsts.add(arena_db.execute("SELECT model_a FROM battles WHERE id = ?", [battle.id]).fetchone()[0])
    assert firsts == {"one", "two"}


def test_bad_votes_and_battles(arena_db, cache):
    db = arena_db
    battle = arena.start_battle(db, cache, "default", "alice", "Hi", "one", "two", SETTINGS, random.Random(0))
    with pytest.raises(PermissionDenied):
        arena.vote(db, battle.id, "bob", "a")
    with pytest.raises(InputError) as error:
        arena.vote(db, battle.id, "alice", "c")
    assert error.value.field == "winner"
    with pytest.raises(InputError):
        arena.vote(db, 999, "alice", "a")
    before = db["responses"].count
    for prompt, a, b, field in [("", "one", "two", "prompt"), ("Hi", "one", "one", "model_b"), ("Hi", "one", "nope", "model")]:
        with pytest.raises(InputError) as error:
            arena.start_battle(db, cache, "default", "alice", prompt, a, b, SETTINGS, random.Random(0))
        assert error.value.field == field
    assert db["responses"].count == before and db["rankings"].count == 0


def test_leaderboard_from_votes(arena_db, cache):
    db = arena_db
    # "one" wins 3 of 4 decided votes, plus a tie. Whatever the A/B order, vote for the side that is "one".
    for k, wanted in enumerate(["one", "one", "one", "two", "tie"]):
        battle = arena.start_battle(db, cache, "default", "alice", f"Prompt {k}", "one", "two", SETTINGS, random.Random(k))
        model_a = db.execute("SELECT model_a FROM battles WHERE id = ?", [battle.id]).fetchone()[0]
        arena.vote(db, battle.id, "alice", "tie" if wanted == "tie" else ("a" if model_a == wanted else "b"))
    # Five votes each: below the default minimum, so no interval is shown (issue 14 item 6)...
    assert [(row["ci_low"], row["ci_high"]) for row in leaderboard(db, "default")] == [(None, None)] * 2
    # ...and with the minimum lowered to 5, the intervals are there and hold the scores.
    board = leaderboard(db, "default", n_bootstrap=50, min_votes_for_interval=5)
    assert [row["model"] for row in board] == ["one", "two"]
    assert [row["votes"] for row in board] == [5, 5]
    for row in board:
        assert row["ci_low"] <= row["bt_score"] <= row["ci_high"]
    assert board[0]["elo"] > 1000 > board[1]["elo"]
    # Typed in the arena: picked for others only once an admin promoted them (issue 25).
    with pytest.raises(InputError, match="no prompts yet"):
        arena.random_prompt(db, "default", random.Random(0))
    from labeler.services.data.prompts import promote_prompts

    assert promote_prompts(db, "default") == 5
    assert arena.random_prompt(db, "default", random.Random(0)).startswith("Prompt ")


def test_identical_answers_are_flagged_and_readiness_needs_two_models(db, arena_db):
    from labeler.services.serving.arena import Battle

    assert Battle(1, "p", "Same answer.", " Same answer.\n").identical
    assert not Battle(1, "p", "One answer.", "Another answer.").identical
    # arena_db registered 'one' and 'two' besides 'default': ready.
    assert arena.not_ready_reason(arena_db) is None


def test_a_fresh_install_is_not_ready_to_battle(db):
    # Only the embedded 'default' model: the reason names it and says how to get a second one.
    reason = arena.not_ready_reason(db, server_models=("default",))
    assert "only one is registered ('default')" in reason and "Admin > Models" in reason
    assert arena.battle_models(db, ("default",)) == ["default"]
    # The server's own --model counts as a second one.
    assert arena.not_ready_reason(db, server_models=("default", "/models/served")) is None
