"""The chat bound in elapsed time (issue 48 item 3): an answer stops at the bound it was promised with what it wrote
so far, and the speed the bound is worked out from follows the machine (a model that slows down)."""
from __future__ import annotations

import time

import pytest

from labeler.services.serving import chat
from rlhf.configs import GenerationSettings

HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture
def slow(tiny_model_dir):
    """A cache with the tiny model loaded and its speed measured, and `slow_down(seconds)`: each forward pass of the
    model takes that much longer from then on (a machine at load 10)."""
    cache = chat.ModelCache()
    path = str(tiny_model_dir)
    model, _ = cache.get(path)
    cache.speed(path, chat.measure_speed)
    forward = model.forward

    def slow_down(seconds: float) -> None:
        def slower(*args, **kwargs):
            time.sleep(seconds)
            return forward(*args, **kwargs)

        model.forward = slower

    yield cache, path, slow_down
    model.forward = forward


def test_an_answer_stops_at_its_time_bound_with_what_it_wrote(slow):
    cache, path, slow_down = slow
    slow_down(0.3)  # ~3 tokens/s now, though the speed was measured before: the token cap allows more
    settings = GenerationSettings(max_new_tokens=300, min_length=16, seed=1, batch_size=1)
    max_new = chat.request_bounds(cache, path, settings, 2.0).settings.max_new_tokens
    # The cap alone (before: the only bound, from a speed measured once) would take at least 16 x 0.3 = 4.8 s.
    assert max_new * 0.3 > 2.0 + 1.5
    told = []
    start = time.monotonic()
    asked = chat.ChatRequest(path, HELLO, None, settings, budget_s=2.0, username="ann", notify=told.append)
    pieces = list(chat.stream_reply(cache, asked))
    elapsed = time.monotonic() - start
    assert elapsed < 2.0 + 1.5, elapsed  # the bound, plus the last token and the thread's end
    model, tokenizer = cache.get(path)
    written = len(tokenizer("".join(pieces), add_special_tokens=False)["input_ids"])
    assert 1 <= written < max_new  # some tokens, shown, not all that were allowed
    assert any(note.startswith("The answer stopped at this server's bound of 2 s (") for note in told), told
    # reply (the Arena's answers) stops the same way
    start = time.monotonic()
    chat.reply(cache, path, HELLO, None, settings, budget_s=1.0)
    assert time.monotonic() - start < 1.0 + 1.5


def test_the_speed_estimate_and_the_bound_follow_a_model_that_slows_down(slow):
    cache, path, slow_down = slow
    fast = cache.speed(path, chat.measure_speed)
    budget_s = 60.0
    before = chat.request_bounds(cache, path, GenerationSettings(max_new_tokens=32_768, batch_size=1), budget_s)
    slow_down(0.2)  # at most 5 tokens/s now
    settings = GenerationSettings(max_new_tokens=8, min_length=8, seed=2, batch_size=1)
    for _ in range(3):
        list(chat.stream_reply(cache, chat.ChatRequest(path, HELLO, None, settings, budget_s=budget_s,
                                                       username="ann")))
    slower = cache.speed(path, chat.measure_speed)
    # Before: measured once, kept for the life of the process, whatever the machine did next.
    assert slower.decode_tokens_per_s < fast.decode_tokens_per_s / 3
    after = chat.request_bounds(cache, path, GenerationSettings(max_new_tokens=32_768, batch_size=1), budget_s)
    assert after.settings.max_new_tokens < before.settings.max_new_tokens
    assert after.settings.max_new_tokens == int(slower.decode_tokens_per_s * budget_s / 2)
    # The person sees it before asking: the bound in words with the tokens it allows now.
    words = chat.bound_words(cache, path, budget_s)
    assert words.startswith("⏱ An answer here stops after **60 s** once it starts being written: about "
                            f"**{after.settings.max_new_tokens} tokens** at this model's speed on this server now")


def test_the_bound_before_any_answer_needs_no_model_loaded():
    cache = chat.ModelCache()
    assert chat.bound_words(cache, "/not/loaded", 30.0) == (
        "⏱ An answer here stops after **30 s** once it starts being written; how many tokens that is follows this "
        "model's speed, measured on its first answer.")
    assert len(cache) == 0
