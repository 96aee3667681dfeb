"""A chat request's cost is bounded (issue 25): the history was re-tokenized once per dropped turn, so one
request cost the square of its length (10/20/40 messages of 20k characters: 1.1/4.4/24.8 s; the allowed 200
about 10 CPU-minutes). Now the conversation is capped in characters before any work, and a prompt over the
model's context is trimmed with a bounded number of tokenizer passes.
"""
from __future__ import annotations

import time

import pytest

from labeler.services.serving import chat
from labeler.errors import InputError

pytestmark = pytest.mark.reliability


class CountingTokenizer:
    """A real tokenizer that counts how often it tokenizes (its own calls and chat-template renderings)."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self._tokenizer(*args, **kwargs)

    def apply_chat_template(self, *args, **kwargs):
        self.calls += 1
        return self._tokenizer.apply_chat_template(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def _conversation(messages: int, chars: int) -> list[dict]:
    words = ("the film was long and slow but the ending made up for it " * (chars // 50 + 1))[:chars]
    turns = [{"role": "user" if k % 2 == 0 else "assistant", "content": f"turn {k}: {words}"[:chars]}
             for k in range(messages)]
    turns[-1]["role"] = "user"
    return turns


def test_the_largest_request_allowed_before_is_refused_at_once():
    history = _conversation(chat.MAX_MESSAGES, chat.MAX_MESSAGE_CHARS)  # 200 messages of 20k: 4M characters
    start = time.process_time()
    with pytest.raises(InputError, match=r"over 100,000 characters at message 6; clear the chat") as error:
        chat.check_history(history)
    assert error.value.field == "history"
    assert time.process_time() - start < 0.5
    # Exactly at the cap is accepted; one character of system prompt more is not.
    at_cap = _conversation(5, 20_000)
    assert len(chat.check_history(at_cap)) == 5
    with pytest.raises(InputError, match="over 100,000 characters at message 5"):
        chat.check_history(at_cap, system_prompt="s")


def test_a_long_chat_is_trimmed_with_a_bounded_number_of_tokenizer_passes(tiny):
    model, tokenizer = tiny
    counting = CountingTokenizer(tokenizer)
    # Under the character cap, far over the tiny model's 512-token context: 200 turns of 499 characters.
    history = chat.check_history(_conversation(chat.MAX_MESSAGES, 499))
    start = time.process_time()
    ids = chat._prompt_ids(model, counting, history, "Be brief.", max_new_tokens=64)
    cpu = time.process_time() - start
    # The whole prompt, the turns counted in one batch, the kept turns (each rendered then tokenized): 5 calls,
    # where dropping turn by turn re-rendered and re-tokenized the prompt ~195 times.
    assert counting.calls <= 5, counting.calls
    assert cpu < 2.0, cpu
    budget = model.config.max_position_embeddings - 64
    assert 0 < len(ids) <= budget
    text = tokenizer.decode(ids)
    # Whole turns were dropped, oldest first: the system prompt leads, the newest turn is there, the oldest not.
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>"), text[:80]
    assert "turn 199:" in text and "turn 0:" not in text


def test_a_chat_that_fits_is_tokenized_once_and_kept_whole(tiny):
    from rlhf.generation import build_prompt_ids

    model, tokenizer = tiny
    counting = CountingTokenizer(tokenizer)
    history = chat.check_history(_conversation(3, 40))
    ids = chat._prompt_ids(model, counting, history, None, max_new_tokens=16)
    assert ids.tolist() == build_prompt_ids(tokenizer, history).tolist()
    assert counting.calls == 2  # the template rendered once, tokenized once


def test_chat_follows_the_projects_prompt_format(tiny):
    """A project in the continue format chats in plain text, as its generation does (Project.chat_template)."""
    from rlhf.generation import build_prompt_ids

    model, tokenizer = tiny
    history = [{"role": "user", "content": "The film opens with"}]
    plain = chat._prompt_ids(model, tokenizer, history, None, 16, chat_template=False)
    templated = chat._prompt_ids(model, tokenizer, history, None, 16, chat_template=None)
    assert plain.tolist() == build_prompt_ids(tokenizer, history, use_chat_template=False).tolist()
    assert "<|im_start|>" not in tokenizer.decode(plain) and "<|im_start|>" in tokenizer.decode(templated)


# Issue 36 item 5: a request's cost bounded by the model's speed measured on this server, one running answer per
# user, the user told the limit.

def test_the_speed_is_measured_once_and_bounds_a_huge_request_to_the_budget(tiny_model_dir):
    from rlhf.configs import GenerationSettings

    cache = chat.ModelCache()
    path = str(tiny_model_dir)
    speed = cache.speed(path, chat.measure_speed)
    assert speed.prefill_tokens_per_s > 0 and speed.decode_tokens_per_s > 0
    assert cache.speed(path, chat.measure_speed) is speed  # measured once while loaded
    budget_s = 1.0
    max_new, max_prompt = speed.limits(budget_s)
    told = []
    huge = GenerationSettings(max_new_tokens=32_768, do_sample=False, batch_size=1)  # the most settings allow
    # Before: generated until max_new_tokens or the context, whatever it cost (1,024 tokens: > 900 s).
    asked = chat.ChatRequest(path, [{"role": "user", "content": "hello"}], None, huge, budget_s=budget_s,
                             username="ann", notify=told.append)
    pieces = list(chat.stream_reply(cache, asked))
    model, tokenizer = cache.get(path)
    assert len(tokenizer("".join(pieces), add_special_tokens=False)["input_ids"]) <= max_new + 2
    assert told == [f"Answers are capped at {max_new} tokens here (asked: 32768): this model writes about "
                    f"{speed.decode_tokens_per_s:.0f} tokens/s on this server now, and one request stops after 1 s."]
    told.clear()
    small = GenerationSettings(max_new_tokens=min(max_new, 8), do_sample=False, batch_size=1)
    chat.reply(cache, path, [{"role": "user", "content": "hello"}], None, small, budget_s=budget_s, notify=told.append)
    assert told == []  # under the cap: nothing to say


def test_limits_follow_the_speed_by_hand():
    speed = chat.ModelSpeed(prefill_tokens_per_s=200.0, decode_tokens_per_s=10.0)
    # 60 s: half (30 s) to write at 10 tokens/s = 300 tokens; half to read at 200 tokens/s = 6,000 tokens.
    assert speed.limits(60.0) == (300, 6000)
    assert speed.limits(60.0, answers=4) == (75, 6000)  # best of 4 shares the writing half: 300 / 4
    assert speed.limits(0.1) == (chat.MIN_ANSWER_TOKENS, chat.MIN_PROMPT_TOKENS)  # never below the floors


def test_a_long_history_is_cut_to_the_prompt_budget(tiny):
    model, tokenizer = tiny
    history = chat.check_history(_conversation(40, 400))  # ~3.5k tokens of turns
    ids = chat._prompt_ids(model, tokenizer, history, None, 16, max_prompt_tokens=300)
    assert 0 < len(ids) <= 300
    assert "turn 39:" in tokenizer.decode(ids)  # the newest turn kept, the oldest dropped


def test_one_running_answer_per_user(tiny_model_dir):
    from rlhf.configs import GenerationSettings

    cache = chat.ModelCache(slots=2)  # two people may write at once here
    path = str(tiny_model_dir)
    settings = GenerationSettings(max_new_tokens=64, do_sample=False, batch_size=1)
    history = [{"role": "user", "content": "hello"}]
    first = chat.stream_reply(cache, chat.ChatRequest(path, history, None, settings, username="ann"))
    next(first)  # ann's first answer is being written
    with pytest.raises(InputError, match=r"you already have an answer being written \(one at a time per user, across Chat, Arena and best-of-N\)"):
        next(chat.stream_reply(cache, chat.ChatRequest(path, history, None, settings, username="ann")))
    with pytest.raises(InputError, match="one at a time per user"):
        chat.best_of_n(cache, path, "unused-reward", history, 2, settings, username="ann")
    other = chat.stream_reply(cache, chat.ChatRequest(path, history, None, settings, username="bob"))
    next(other)  # another user is not held up
    other.close()
    first.close()  # Stop: ann may ask again
    list(chat.stream_reply(cache, chat.ChatRequest(path, history, None, settings, username="ann")))
    assert cache.turns.people() == set()
