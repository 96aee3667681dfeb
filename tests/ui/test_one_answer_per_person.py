"""One running generation per person across Chat, Arena and best-of-N, through the tabs' handlers as their events
call them (issue 48 item 2): before, the Chat and the Arena tabs kept their own model caches and so their own
per-user locks, and chat_send and arena_start ran together for one annotator. Also the queue's place shown in the
Chat, and the bound shown before asking."""
from __future__ import annotations

import gradio as gr
import pytest

from labeler.ui.tabs import arena
from labeler.ui.tabs.chat import conversation
from labeler.ui.tabs.chat.best_of_n import best_of_n
from labeler.ui.tabs.chat.bound import show_bound

SETTINGS = (24, True, 1.0, 1.0, 0, 0)  # tokens, sample, temperature, top_p, top_k, seed


@pytest.fixture
def ctx(db_path, tmp_path, tiny_model_dir, tiny_encoder_dir):
    """The UIContext every tab gets (with the server's one ModelCache, one answer at a time on the server), on a
    database with two users, two registered copies of the tiny model and a reward model."""
    from labeler.services.data import accounts
    from labeler.services.serving import models
    from labeler.services.serving.inference import ModelCache
    from labeler.ui.context import ServeSettings, UIContext
    from storage import open_db

    db = open_db(db_path)
    for user in ("ann", "bob"):
        accounts.create_user(db, user, f"{user}-password-1")
    for name in ("left", "right"):
        models.register_model(db, name, str(tiny_model_dir), "policy")
    models.register_model(db, "judge", str(tiny_encoder_dir), "reward")
    db.conn.close()
    settings = ServeSettings(db_path=db_path, model=str(tiny_model_dir), runs_dir=str(tmp_path / "runs"))
    return UIContext(settings, models=ModelCache(slots=1))


def as_user(name: str) -> gr.Request:
    return gr.Request(username=name)


def test_chat_send_and_arena_start_for_one_person_cannot_run_together(ctx):
    from labeler.services.serving.leaderboard import LeaderboardCache

    caches = arena.ArenaCaches(LeaderboardCache())
    chatting = conversation.send(ctx, "Hello there", [], "", "", *SETTINGS, request=as_user("ann"))
    next(chatting)  # the empty bubble
    next(chatting)  # the first piece: ann's answer is being written
    with pytest.raises(gr.Error, match="one at a time per user, across Chat, Arena and best-of-N"):
        arena.start_battle(ctx, caches, "Tell me about a film", "left", "right", 8, request=as_user("ann"))
    with pytest.raises(gr.Error, match="one at a time per user"):
        best_of_n(ctx, "Hi", [], "left", "judge", 2, "", *SETTINGS, request=as_user("ann"))
    with pytest.raises(gr.Error, match="one at a time per user"):
        list(conversation.send(ctx, "Again", [], "", "", *SETTINGS, request=as_user("ann")))
    chatting.close()  # Stop: ann may ask again, in the Arena too
    answer_a, answer_b, *_ = arena.start_battle(ctx, caches, "Tell me about a film", "left", "right", 8,
                                                request=as_user("ann"))
    assert answer_a and answer_b and ctx.models.turns.people() == set()


def test_a_waiting_answer_shows_its_place_in_the_chat(ctx):
    chatting = conversation.send(ctx, "Hello there", [], "", "", *SETTINGS, request=as_user("ann"))
    next(chatting)
    next(chatting)  # ann holds the server's one slot
    waiting = conversation.send(ctx, "Hi", [], "", "", *SETTINGS, request=as_user("bob"))
    next(waiting)  # the empty bubble
    shown, _ = next(waiting)
    assert shown[-1]["content"].endswith("*⏳ 1 answer ahead of yours: it starts when it finishes.*")
    chatting.close()
    steps = list(waiting)  # bob's turn comes: his answer replaces the place
    assert "⏳" not in steps[-1][0][-1]["content"] and ctx.models.turns.people() == set()


def test_the_chat_tab_shows_the_bound_before_asking(ctx):
    before = show_bound(ctx, "", request=as_user("ann"))
    assert before.startswith("⏱ An answer here stops after **60 s** once it starts being written; how many tokens")
    list(conversation.send(ctx, "Hello there", [], "", "", *SETTINGS, request=as_user("ann")))
    after = show_bound(ctx, "", request=as_user("ann"))
    assert after.startswith("⏱ An answer here stops after **60 s** once it starts being written: about **")
