"""A submit from a session the server has not seen before (issue 10 reliability): after a server restart, a page
or API client sends its unanswered submit again, with the item key it holds, in a session the new server never
served. Gradio validates a Radio's input against the session's copy of the widget, so the widgets must be built
with valid choices; they were built empty, and every such retry was refused."""
from __future__ import annotations

import pytest

gradio_client = pytest.importorskip("gradio_client")
from gradio_client import Client  # noqa: E402

PASSWORD = "fresh-session-1"


def _user(running_app, username: str) -> None:
    from labeler.services.data import accounts
    from storage import open_db

    db = open_db(running_app.db_path)
    try:
        accounts.create_user(db, username, PASSWORD)
    finally:
        db.conn.close()


def test_a_rating_sent_again_from_a_new_session_is_stored_once(running_app, db_rows):
    _user(running_app, "fresh-rater")
    shown = Client(running_app.url, auth=("fresh-rater", PASSWORD), verbose=False).predict(api_name="/rate_next")
    key = shown[6]
    for _ in range(2):  # a new session each time, as after a restart; the second is a replay
        Client(running_app.url, auth=("fresh-rater", PASSWORD), verbose=False).predict(6, "", key, api_name="/rate_submit")
    assert db_rows(running_app.db_path, "SELECT r.item_id, r.score, r.request_id FROM ratings r"
                   " JOIN users u ON u.id = r.user_id WHERE u.username = ?", ["fresh-rater"]) == [
        {"item_id": int(key.split(":")[0]), "score": 6.0, "request_id": key.split(":")[1]}]


def test_a_ranking_from_a_new_session_is_refused_clearly_and_stores_nothing(running_app, db_rows):
    # The answers' shown order lives in the session (gr.State), not in the key: a new session cannot know which
    # answer each rank meant, so it is told to fetch the item again, and nothing is stored.
    from gradio_client.exceptions import AppError

    _user(running_app, "fresh-ranker")
    shown = Client(running_app.url, auth=("fresh-ranker", PASSWORD), verbose=False).predict(api_name="/rank_next")
    fresh = Client(running_app.url, auth=("fresh-ranker", PASSWORD), verbose=False)
    with pytest.raises(AppError, match="click Refresh"):
        fresh.predict("", shown[-1], "1", "2", "3", api_name="/rank_submit")
    assert db_rows(running_app.db_path, "SELECT r.id FROM rankings r JOIN users u ON u.id = r.user_id"
                   " WHERE u.username = ?", ["fresh-ranker"]) == []
