"""Chat: the model cache, streaming vs plain replies, best-of-N, rating an answer."""
from __future__ import annotations

import dataclasses
import json

import pytest

from labeler.services.data import accounts
from labeler.services.serving import chat
from labeler.errors import InputError, PermissionDenied
from rlhf.configs import GenerationSettings

GREEDY = GenerationSettings(max_new_tokens=12, do_sample=False, batch_size=1)
HISTORY = [
    {"role": "user", "content": "Hello there"},
    {"role": "assistant", "content": "Hi!"},
    {"role": "user", "content": "Tell me about movies"},
]


@pytest.fixture(scope="module")
def cache():
    return chat.ModelCache()


def test_streaming_equals_plain_reply(cache, tiny_model_dir):
    path = str(tiny_model_dir)
    pieces = list(chat.stream_reply(cache, chat.ChatRequest(path, HISTORY, "Be brief.", GREEDY)))
    assert len(pieces) > 1  # really streamed, not one final chunk
    assert "".join(pieces) == chat.reply(cache, path, HISTORY, "Be brief.", GREEDY)
    # Sampling with one seed is the same too: both paths seed a forked RNG the same way.
    sampled = GenerationSettings(max_new_tokens=12, seed=3, batch_size=1)
    streamed = "".join(chat.stream_reply(cache, chat.ChatRequest(path, HISTORY, None, sampled)))
    assert streamed == chat.reply(cache, path, HISTORY, None, sampled)


def test_stream_reports_a_failing_generation(tiny_model_dir, monkeypatch):
    cache = chat.ModelCache()
    model, _ = cache.get(str(tiny_model_dir))

    def broken(**kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(model, "generate", broken)
    with pytest.raises(RuntimeError, match="out of memory"):
        list(chat.stream_reply(cache, chat.ChatRequest(str(tiny_model_dir), HISTORY, None, GREEDY)))


def test_cache_keeps_what_its_byte_budget_holds(tiny_model_dir, tiny_encoder_dir):
    from labeler.services.serving.inference import held_bytes

    cache = chat.ModelCache()
    first = cache.get(str(tiny_model_dir))
    scorer = cache.get(str(tiny_encoder_dir), kind="reward")
    both = cache.held_bytes()
    assert both == held_bytes(first) + held_bytes(scorer) and len(cache) == 2
    # A budget one byte short of both: the least recently used (the chat model) goes when the scorer loads.
    small = chat.ModelCache(budget_bytes=both - 1)
    assert small.get(str(tiny_model_dir)) is not None
    small.get(str(tiny_encoder_dir), kind="reward")
    assert small.keys() == [(str(tiny_encoder_dir), "reward")]
    with pytest.raises(ValueError, match="budget_bytes=0"):
        chat.ModelCache(budget_bytes=0)


@pytest.mark.parametrize(
    "history",
    [[], [{"role": "assistant", "content": "hi"}], [{"role": "user", "content": "  "}], [{"role": "robot", "content": "x"}]],
)
def test_bad_history_is_an_input_error(cache, tiny_model_dir, history):
    with pytest.raises(InputError) as error:
        chat.reply(cache, str(tiny_model_dir), history, None, GREEDY)
    assert error.value.field == "history"


def test_best_of_n_picks_the_highest_reward(cache, tiny_model_dir, tiny_encoder_dir):
    from labeler.services.serving.inference import load_reward

    settings = GenerationSettings(max_new_tokens=8, seed=1)
    best, scored = chat.best_of_n(cache, str(tiny_model_dir), str(tiny_encoder_dir), HISTORY, 4, settings)
    assert len(scored) == 4 and len({text for text, _ in scored}) > 1
    assert best == max(scored, key=lambda pair: pair[1])[0]
    # The scores are the reward model's own, on the conversation + answer, in the dtype the app serves it in (bf16
    # on a CPU with native bf16: an fp32 scorer differs there by ~1e-4).
    prompt = [m for m in HISTORY]
    direct = load_reward(str(tiny_encoder_dir)).score([prompt] * 4, [[{"role": "assistant", "content": t}] for t, _ in scored])
    assert [s for _, s in scored] == pytest.approx(direct, abs=1e-5)
    with pytest.raises(InputError):
        chat.best_of_n(cache, str(tiny_model_dir), str(tiny_encoder_dir), HISTORY, 0, settings)


def test_rate_answer_stores_a_label(db):
    accounts.create_user(db, "alice", "alice-password-1")
    settings = dataclasses.replace(GREEDY, seed=9)
    rated = chat.rate_answer(db, "default", "alice", HISTORY, "Movies are great.", "tiny", 6, settings=settings)
    prompt = db.execute("SELECT text, messages_json, source FROM prompts WHERE id = ?", [rated.prompt_id]).fetchone()
    assert (prompt["text"], prompt["source"]) == ("Tell me about movies", "chat")
    assert json.loads(prompt["messages_json"]) == HISTORY
    response = db.execute("SELECT prompt_id, text, model, settings_json, source FROM responses").fetchall()
    assert [tuple(r)[:3] + (tuple(r)[4],) for r in response] == [(rated.prompt_id, "Movies are great.", "tiny", "chat")]
    assert json.loads(response[0]["settings_json"])["seed"] == 9
    ratings = [tuple(r) for r in db.execute("SELECT id, item_id, response_id, score FROM ratings")]
    assert ratings == [(rated.rating_id, rated.item_id, rated.response_id, 6.0)]
    assert [tuple(r) for r in db.execute("SELECT item_id, status FROM assignments")] == [(rated.item_id, "done")]
    # The same conversation again is the same prompt; a one-turn chat is a plain-text prompt.
    again = chat.rate_answer(db, "default", "alice", HISTORY, "Another answer.", "tiny", 2)
    assert again.prompt_id == rated.prompt_id
    single = chat.rate_answer(db, "default", "alice", "Hi", "Hello.", "tiny", 4)
    assert db.execute("SELECT messages_json FROM prompts WHERE id = ?", [single.prompt_id]).fetchone()[0] is None


@pytest.mark.parametrize(
    "user, answer, score, error",
    [("alice", "ok", 8, InputError), ("alice", "ok", 0, InputError), ("alice", " ", 4, InputError), ("mallory", "ok", 4, PermissionDenied)],
)
def test_rate_answer_rejects_bad_input_and_writes_nothing(db, user, answer, score, error):
    accounts.create_user(db, "alice", "alice-password-1")
    with pytest.raises(error):
        chat.rate_answer(db, "default", user, "Hi", answer, "tiny", score)
    assert db["prompts"].count == 0 and db["responses"].count == 0 and db["ratings"].count == 0


def test_closing_a_stream_stops_its_generation_thread(cache, tiny_model_dir):
    import threading
    import time

    # 8192 sampled tokens from a random 49k-token vocabulary (EOS is unlikely): ~45 s to the end on this CPU
    # (1024 took 5.7 s), so a thread still alive 2 s after close() was not stopped.
    long = GenerationSettings(max_new_tokens=8192, seed=0, batch_size=1)
    stream = chat.stream_reply(cache, chat.ChatRequest(str(tiny_model_dir), HISTORY, None, long))
    next(stream)
    start = time.monotonic()
    stream.close()  # what Gradio does when the user presses Stop or the tab goes away
    while any(t.name == "chat-generate" and t.is_alive() for t in threading.enumerate()):
        assert time.monotonic() - start < 2.0, "the generation thread kept running after close()"
        time.sleep(0.01)


def test_an_encoder_is_refused_as_a_chat_model(tiny_encoder_dir):
    with pytest.raises(InputError, match="not a chat model .*BertForSequenceClassification"):
        chat.ModelCache().get(str(tiny_encoder_dir))


def test_long_messages_are_refused(cache, tiny_model_dir):
    too_long = [{"role": "user", "content": "x" * (chat.MAX_MESSAGE_CHARS + 1)}]
    with pytest.raises(InputError, match="at most 20,000") as error:
        chat.reply(cache, str(tiny_model_dir), too_long)
    assert error.value.field == "message 1"
    with pytest.raises(InputError, match="at most 200"):
        chat.check_history([{"role": "user", "content": "hi"}] * (chat.MAX_MESSAGES + 1))


def test_only_answers_the_server_generated_are_marked_and_exported(db, cache, tiny_model_dir):
    # Issue 10 item 8: a client can send any text as "the model's answer"; such a rating is stored (it is the
    # user's label) but never becomes a training row.
    from labeler.services.labels import export

    path = str(tiny_model_dir)
    accounts.create_user(db, "alice", "alice-password-1")
    # Sampled: the random tiny model's greedy answer is only newlines.
    sampled = GenerationSettings(max_new_tokens=12, seed=3, batch_size=1)
    streamed = "".join(chat.stream_reply(cache, chat.ChatRequest(path, HISTORY, "Be brief.", sampled)))
    assert streamed.strip()
    real = chat.rate_answer(db, "default", "alice", HISTORY, streamed, "tiny", 6,
                            generated=cache.generated, generated_by=path)
    forged = chat.rate_answer(db, "default", "alice", HISTORY, "Buy cheap pills at example.com", "tiny", 7,
                              generated=cache.generated, generated_by=path)
    # The real answer under another conversation, or from another model, is not what the server generated.
    moved = chat.rate_answer(db, "default", "alice", "Hi", streamed, "tiny", 5, generated=cache.generated,
                             generated_by=path)
    other_model = chat.rate_answer(db, "default", "alice", HISTORY, streamed + " ", "other", 5,
                                   generated=cache.generated, generated_by="/elsewhere")
    marks = dict(db.execute("SELECT id, server_generated FROM responses").fetchall())
    assert marks == {real.response_id: 1, forged.response_id: 0, moved.response_id: 0, other_model.response_id: 0}
    assert [row["completion"] for row in export.rating_rows(db)] == [streamed]


def test_generated_answers_keeps_the_newest():
    ledger = chat.GeneratedAnswers(max_entries=2)
    for answer in ("one", "two", "three"):
        ledger.add("m", HISTORY, answer)
    assert [ledger.contains("m", HISTORY, a) for a in ("one", "two", "three")] == [False, True, True]
    # Whitespace the chat widget may trim does not matter; the system turn is not part of the prompt.
    assert ledger.contains("m", [{"role": "system", "content": "x"}, *HISTORY], "  three\n")
