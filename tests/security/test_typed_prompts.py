"""Prompts typed by annotators in Chat and Arena stay in their own split until an admin promotes them (issue 25):
they joined the training prompts (split train), so PPO trained on them and Generate sent them to other
annotators. A held-out prompt rated in Chat stays held out, once. Arena answers follow the project's prompt
format, as generation does.
"""
from __future__ import annotations

import random

import pytest

from labeler.cli import main
from labeler.services.data import accounts, projects, prompts
from labeler.services.serving import arena, chat, generation, models
from labeler.errors import InputError
from rlhf.configs import GenerationSettings
from storage import write_transaction

pytestmark = pytest.mark.reliability

SETTINGS = GenerationSettings(max_new_tokens=4, batch_size=4, seed=0)


def _splits(db) -> dict[str, str]:
    return {row["text"]: row["split"] for row in db.execute("SELECT text, split FROM prompts")}


@pytest.fixture
def studio(db, tiny_model_dir):
    accounts.create_user(db, "alice", "alice-password-1")
    models.register_model(db, "tiny", str(tiny_model_dir), "policy")
    prompts.add_prompts(db, ["An imported prompt", "A held-out prompt"], source="test")
    with write_transaction(db):
        prompts.hold_out(db, [2])
    return db


def test_typed_prompts_wait_for_an_admin_before_training_or_generation(studio):
    db = studio
    # (Answers rated as another model's, so that Generate's "answers from tiny" count starts at zero everywhere.)
    chat.rate_answer(db, "default", "alice", "Something alice typed", "an answer", "chat-model", 5)
    chat.rate_answer(db, "default", "alice", [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"},
                                              {"role": "user", "content": "A second turn"}], "ok", "chat-model", 4)
    # Rating a held-out prompt in Chat is refused, and writes nothing: no label, no second copy in any split.
    responses_before = db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    with pytest.raises(InputError, match="held-out prompts, kept for judging runs"):
        chat.rate_answer(db, "default", "alice", "A held-out prompt", "an answer", "chat-model", 6)
    assert db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == responses_before
    assert _splits(db) == {"An imported prompt": "train", "A held-out prompt": "test",
                           "Something alice typed": prompts.TYPED_SPLIT, "A second turn": prompts.TYPED_SPLIT}
    # PPO and GRPO read split 'train' (labeler/services/training/runners/); Generate and Arena's "surprise me" skip
    # typed prompts.
    generation.generate_responses(db, "default", "tiny", n_per_prompt=1, settings=SETTINGS)
    generated = {row[0] for row in db.execute(
        "SELECT p.text FROM responses r JOIN prompts p ON p.id = r.prompt_id WHERE r.source = 'generated'")}
    assert generated == {"An imported prompt"}  # held-out prompts are answered only when named (prompt_ids)
    picked = {arena.random_prompt(db, "default", random.Random(seed)) for seed in range(40)}
    assert picked == {"An imported prompt"}  # held-out prompts are for judging runs (issue 48)

    # An admin promotes one by id (an id that is not a typed prompt moves nothing), then the rest.
    typed = dict(db.execute("SELECT text, id FROM prompts WHERE split = ?", [prompts.TYPED_SPLIT]).fetchall())
    with pytest.raises(InputError, match=r"not prompts typed in Chat or Arena of project 'default': \[1\]"):
        prompts.promote_prompts(db, "default", [typed["Something alice typed"], 1])
    assert _splits(db)["Something alice typed"] == prompts.TYPED_SPLIT
    assert prompts.promote_prompts(db, "default", [typed["Something alice typed"]]) == 1
    assert _splits(db)["Something alice typed"] == "train" and _splits(db)["A second turn"] == prompts.TYPED_SPLIT
    assert main(["prompts", "promote", "--db", str(db.execute("PRAGMA database_list").fetchone()[2])]) == 0
    assert prompts.TYPED_SPLIT not in _splits(db).values()
    generation.generate_responses(db, "default", "tiny", n_per_prompt=1, settings=SETTINGS)
    assert db.execute("SELECT COUNT(DISTINCT prompt_id) FROM responses WHERE source = 'generated'").fetchone()[0] == 3


def test_arena_prompts_are_typed_prompts_and_follow_the_prompt_format(studio, tiny_model_dir, monkeypatch):
    db = studio
    models.register_model(db, "tiny-too", str(tiny_model_dir), "policy")
    projects.update_project(db, "default", prompt_format="continue")
    seen = []
    real = chat._prompt_ids

    def recording(model, tokenizer, history, system_prompt, max_new_tokens, chat_template=None, *args):
        seen.append(chat_template)
        return real(model, tokenizer, history, system_prompt, max_new_tokens, chat_template, *args)

    monkeypatch.setattr(chat, "_prompt_ids", recording)
    arena.start_battle(db, chat.ModelCache(), "default", "alice", "The film opens with", "tiny", "tiny-too", SETTINGS,
                       random.Random(0))
    assert _splits(db)["The film opens with"] == prompts.TYPED_SPLIT
    assert seen == [False, False]  # plain text to continue, not the chat template
