"""The Arena tab's handlers (module functions, called as their events call them) on two registered copies of the
tiny model: a battle, a vote that reveals the names and is stored as a ranking, and the refusals."""
from __future__ import annotations

import json

import gradio as gr
import pytest

from labeler.ui.tabs import arena

USER = "vic"


@pytest.fixture
def tab(db_path, tmp_path, tiny_model_dir):
    """What the tab's handlers take first (the UIContext and the tab's caches), on a database with a user and
    two registered copies of the tiny model."""
    from labeler.services.data import accounts
    from labeler.services.serving import models
    from labeler.services.serving.leaderboard import LeaderboardCache
    from labeler.ui.context import ServeSettings, UIContext
    from storage import open_db

    db = open_db(db_path)
    accounts.create_user(db, USER, "vic-password-1")
    for name in ("left", "right"):
        models.register_model(db, name, str(tiny_model_dir), "policy")
    db.conn.close()
    ctx = UIContext(ServeSettings(db_path=db_path, model=str(tiny_model_dir), runs_dir=str(tmp_path / "runs")))
    return ctx, arena.ArenaCaches(LeaderboardCache())


def test_battle_then_vote_reveals_the_models_and_stores_a_ranking(tab, db_path):
    from storage import open_db

    request = gr.Request(username=USER)
    model_1, model_2, board, note, start, tokens = arena.load(*tab, request=request)
    assert tokens == 128  # the project's answer length (a chat project)
    assert {"left", "right"} <= set(model_1["choices"]) and start["interactive"] is True and note["visible"] is False
    answer_a, answer_b, reveal, identical, state, *buttons = arena.start_battle(
        *tab, "Tell me about a film", "left", "right", 8, request=request)
    assert reveal == "" and all(b["interactive"] for b in buttons) and "left" not in answer_a + answer_b
    text, *_ = arena.vote(*tab, "a", state, request=request)
    db = open_db(db_path)
    try:
        battle = db.execute("SELECT model_a, model_b, winner, response_a, response_b, ranking_id FROM battles").fetchone()
        ranking = db.execute("SELECT order_json, source FROM rankings WHERE id = ?", [battle["ranking_id"]]).fetchone()
    finally:
        db.conn.close()
    assert {battle["model_a"], battle["model_b"]} == {"left", "right"} and battle["winner"] == "a"
    assert text.startswith(f"**A** was `{battle['model_a']}`, **B** was `{battle['model_b']}`: you preferred **A**")
    assert json.loads(ranking["order_json"]) == [[battle["response_a"]], [battle["response_b"]]]
    assert ranking["source"] == "arena"
    with pytest.raises(gr.Error, match="already has a vote"):  # a different vote on the same battle
        arena.vote(*tab, "b", state, request=request)


def test_refusals(tab):
    request = gr.Request(username=USER)
    with pytest.raises(gr.Error, match="start a battle first"):
        arena.vote(*tab, "a", None, request=request)
    with pytest.raises(gr.Error, match="pick two different models"):
        arena.start_battle(*tab, "Hi", "left", "left", 8, request=request)
    with pytest.raises(gr.Error, match="is empty"):
        arena.start_battle(*tab, "  ", "left", "right", 8, request=request)
    with pytest.raises(gr.Error):
        arena.start_battle(*tab, "Hi", "left", "right", 8, request=gr.Request(username="nobody"))
