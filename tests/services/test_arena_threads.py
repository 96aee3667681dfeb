"""The arena generates its two answers on one torch thread (issue 24 item 7: batch-1 decoding waits on its own
threads), and leaves the thread count as it found it, also when generation fails."""
from __future__ import annotations

import random

import pytest
import torch
from test_arena import SETTINGS, arena_db, cache, other_tiny_dir  # noqa: F401 - fixtures

from labeler.services.serving import arena


def test_both_answers_are_generated_on_one_thread_and_the_count_is_restored(arena_db, cache, monkeypatch):
    seen = []
    real_reply = arena.reply

    def reply(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real_reply(*args, **kwargs)

    monkeypatch.setattr(arena, "reply", reply)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        battle = arena.start_battle(arena_db, cache, "default", "alice", "The film", "one", "two", SETTINGS,
                                    random.Random(0))
        assert seen == [arena.ARENA_CPU_THREADS] * 2 == [1, 1] and battle.id
        assert torch.get_num_threads() == 2

        def broken(*args, **kwargs):
            raise RuntimeError("out of memory")

        monkeypatch.setattr(arena, "reply", broken)
        with pytest.raises(RuntimeError):
            arena.start_battle(arena_db, cache, "default", "alice", "The film", "one", "two", SETTINGS, random.Random(0))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
