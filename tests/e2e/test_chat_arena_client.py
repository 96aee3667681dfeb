"""The Chat and Arena tabs driven through gradio_client: the same api_names their buttons call."""
from __future__ import annotations

import inspect

import pytest

gradio_client = pytest.importorskip("gradio_client")
from gradio_client import Client  # noqa: E402

USER = ("erin", "erin-password-1")  # only these tests chat and battle as erin


@pytest.fixture(scope="module")
def erin(running_app):
    from labeler.services.data import accounts
    from storage import open_db

    db = open_db(running_app.db_path)
    try:
        if accounts.get_user(db, USER[0]) is None:
            accounts.create_user(db, *USER)
    finally:
        db.conn.close()
    return Client(running_app.url, auth=USER, verbose=False)


def test_chat_turn_and_thumbs_up(running_app, erin, db_rows):
    models, rewards, _, answer_tokens = erin.predict(api_name="/chat_models")
    assert answer_tokens == 128  # the project's answer length
    # Settings: max_new_tokens, do_sample, temperature, top_p, top_k, seed.
    # Sampled (a random tiny model's greedy answer can be all special tokens, i.e. empty text).
    settings = [5, True, 1.0, 1.0, 0, 1]
    history, box = erin.predict("Hello", [], running_app.model_name, "", *settings, api_name="/chat_send")
    assert box == "" and [m["role"] for m in history] == ["user", "assistant"]
    assert history[1]["content"][0]["text"].strip()
    status = erin.predict(history, running_app.model_name, *settings, api_name="/chat_thumbs_up")
    assert "Stored" in status
    stored = db_rows(
        running_app.db_path,
        "SELECT p.text AS prompt, s.model, r.score FROM ratings r JOIN users u ON u.id = r.user_id"
        " JOIN responses s ON s.id = r.response_id JOIN prompts p ON p.id = s.prompt_id WHERE u.username = ?",
        [USER[0]],
    )
    assert stored == [{"prompt": "Hello", "model": running_app.model_name, "score": 7.0}]  # project scale 1..7


def test_arena_battle_and_vote(running_app, erin, db_rows):
    answer_a, answer_b, reveal_before, identical = erin.predict(
        "Say something", running_app.model_name, running_app.model_dir, 8, api_name="/arena_start"
    )
    reveal, identical_after, board = erin.predict(api_name="/arena_vote_a")
    battle = db_rows(
        running_app.db_path,
        "SELECT b.model_a, b.model_b, b.winner, rk.order_json, b.response_a, b.response_b, ra.text AS text_a,"
        " rb.text AS text_b FROM battles b JOIN users u ON u.id = b.user_id JOIN rankings rk ON rk.id = b.ranking_id"
        " JOIN responses ra ON ra.id = b.response_a JOIN responses rb ON rb.id = b.response_b WHERE u.username = ?",
        [USER[0]],
    )
    assert len(battle) == 1 and battle[0]["winner"] == "a"
    assert battle[0]["order_json"] == f"[[{battle[0]['response_a']}], [{battle[0]['response_b']}]]"
    assert f"`{battle[0]['model_a']}`" in reveal and f"`{battle[0]['model_b']}`" in reveal
    assert {r[0] for r in board["data"]} == {running_app.model_name, running_app.model_dir}
    # Before the vote the page got the two answers and an empty reveal line: no names.
    assert reveal_before == "" and identical_after == ""
    # The identical-answers note is there exactly when the two texts are the same.
    assert (identical != "") == (battle[0]["text_a"].strip() == battle[0]["text_b"].strip())
    # gr.Markdown sends its value through inspect.cleandoc (lines after the first lose their common indentation):
    # a random tiny model's answer "a\r\r\n        b" reaches the page as "a\r\r\nb" (seen in CI).
    shown = [inspect.cleandoc(battle[0]["text_a"].strip() or "*(empty answer)*"),
             inspect.cleandoc(battle[0]["text_b"].strip() or "*(empty answer)*")]
    assert [answer_a.strip(), answer_b.strip()] == shown


def test_best_of_n_with_a_registered_reward_model(running_app, erin, tiny_encoder_dir):
    from labeler.services.serving import models
    from storage import open_db

    db = open_db(running_app.db_path)
    try:
        if "client-rm" not in [m["name"] for m in models.list_models(db, kind="reward")]:
            models.register_model(db, "client-rm", str(tiny_encoder_dir), "reward")
    finally:
        db.conn.close()
    _, rewards, _, _ = erin.predict(api_name="/chat_models")
    # The newest reward model is offered and preselected.
    assert rewards["value"] == "client-rm" and ["client-rm", "client-rm"] in rewards["choices"]
    settings = [6, True, 1.0, 1.0, 0, 2]
    history, box, table = erin.predict(
        "Pick a film", [], running_app.model_name, "client-rm", 3, "", *settings, api_name="/chat_best_of_n"
    )
    scores = [row[0] for row in table["data"]]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True)
    # The answer shown is the best-scored one, under the line naming the model that wrote it.
    shown = history[-1]["content"][0]["text"]
    assert f"answered by {running_app.model_name}" in shown
    assert shown.split("</sub>", 1)[-1].strip() == table["data"][0][1].strip()


def test_random_prompt_comes_from_the_project(running_app, erin):
    from labeler.services.data.prompts import list_prompts
    from storage import open_db

    drawn = erin.predict(api_name="/arena_random_prompt")
    db = open_db(running_app.db_path)
    try:
        texts = {p["text"] for p in list_prompts(db, limit=10_000)}
    finally:
        db.conn.close()
    assert drawn in texts
