"""The app driven through gradio_client: the same api_names the Rate and Rank buttons call."""
from __future__ import annotations

import json

import pytest

gradio_client = pytest.importorskip("gradio_client")
from gradio_client import Client  # noqa: E402
from service_seed import add_answered_prompt  # noqa: E402


def client(app, credentials) -> Client:
    return Client(app.url, auth=credentials, verbose=False)


def test_rate_and_rank_through_the_button_endpoints(running_app, db_rows):
    user = running_app.second_annotator
    c = client(running_app, user)

    # Rate: fetch, then submit the shown item with score 6 and a comment.
    shown = c.predict(api_name="/rate_next")
    counter, prompt_md, response_md, key = shown[1], shown[2], shown[3], shown[6]
    assert "0** done" in counter and "remaining" in counter
    assert prompt_md.startswith("### Prompt")
    after = c.predict(6, "too short", key, api_name="/rate_submit")
    assert "1** done" in after[1] and after[6] != key  # the next item came back with its own key

    ratings = db_rows(
        running_app.db_path,
        "SELECT r.score, r.comment, r.seconds, r.request_id, s.text FROM ratings r"
        " JOIN users u ON u.id = r.user_id JOIN responses s ON s.id = r.response_id WHERE u.username = ?",
        [user[0]],
    )
    assert len(ratings) == 1
    assert ratings[0]["score"] == 6.0 and ratings[0]["comment"] == "too short"
    assert ratings[0]["text"] == response_md  # the answer that was shown is the one that got the score
    assert ratings[0]["seconds"] is not None and ratings[0]["seconds"] >= 0
    assert ratings[0]["request_id"]

    # Rank the item shown (2 or more answers: earlier tests share this app and its queue, so one more ranking
    # item is added here in case they emptied this user's): the second answer best, all the others tied below it.
    add_answered_prompt(running_app.db_path, "A prompt the button test ranks", 3, "ranking", source="e2e-buttons")
    shown = c.predict(api_name="/rank_next")
    item_prompt = shown[2].removeprefix("### Prompt\n")
    slots = [shown[3 + 2 * k] for k in range(8)]  # "#### Answer k\n\n<text>", "" past the answers shown
    slot_texts = [text.split("\n\n", 1)[1] for text in slots if isinstance(text, str) and "\n\n" in text]
    assert len(slot_texts) >= 2
    ranks = ["2", "1"] + ["2"] * (len(slot_texts) - 2)
    c.predict("", shown[-1], *ranks, api_name="/rank_submit")  # comment, key, then a rank per answer shown

    stored = db_rows(
        running_app.db_path,
        "SELECT r.order_json, r.item_id, p.text AS prompt FROM rankings r JOIN users u ON u.id = r.user_id"
        " JOIN prompts p ON p.id = r.prompt_id WHERE u.username = ?",
        [user[0]],
    )
    assert len(stored) == 1 and stored[0]["prompt"] == item_prompt
    order = json.loads(stored[0]["order_json"])
    texts = {r["id"]: r["text"] for r in db_rows(running_app.db_path, "SELECT id, text FROM responses")}
    # Best group: the answer shown second; then the tie of all the others.
    assert [sorted(texts[i] for i in group) for group in order] == [[slot_texts[1]], sorted([slot_texts[0], *slot_texts[2:]])]


def test_undo_puts_the_last_rating_back(running_app, db_rows):
    c = client(running_app, running_app.annotator)
    first = c.predict(api_name="/rate_next")
    c.predict(3, "", first[6], api_name="/rate_submit")
    user = running_app.annotator[0]
    count_sql = "SELECT COUNT(*) AS n FROM ratings r JOIN users u ON u.id = r.user_id WHERE u.username = ?"
    before = db_rows(running_app.db_path, count_sql, [user])[0]["n"]
    back = c.predict(api_name="/rate_undo")
    assert back[3] == first[3]  # the undone item is shown again
    assert db_rows(running_app.db_path, count_sql, [user])[0]["n"] == before - 1


def test_rate_without_a_score_is_refused_and_stores_nothing(running_app, db_rows):
    from gradio_client.exceptions import AppError

    c = client(running_app, running_app.annotator)
    key = c.predict(api_name="/rate_next")[6]
    count_sql = "SELECT COUNT(*) AS n FROM ratings"
    before = db_rows(running_app.db_path, count_sql)[0]["n"]
    with pytest.raises(AppError, match="Pick a score"):
        c.predict(None, "", key, api_name="/rate_submit")
    assert db_rows(running_app.db_path, count_sql)[0]["n"] == before


def ratings_of(db_rows, running_app, username: str) -> list[dict]:
    return db_rows(running_app.db_path, "SELECT r.item_id, r.score FROM ratings r JOIN users u ON u.id = r.user_id"
                   " WHERE u.username = ? ORDER BY r.id", [username])


def test_a_retried_submit_stores_one_label(running_app, db_rows):
    """Issue 10: the key comes with the item and goes back with the label, so a retry is a replay."""
    username = "retry-rater"
    with_user(running_app, username)
    c = client(running_app, (username, PASSWORD))
    shown = c.predict(api_name="/rate_next")
    item_id = int(shown[6].split(":")[0])
    first = c.predict(5, "", shown[6], api_name="/rate_submit")
    again = c.predict(5, "", shown[6], api_name="/rate_submit")  # the client retries: same key, same label
    assert ratings_of(db_rows, running_app, username) == [{"item_id": item_id, "score": 5.0}]
    assert again[3] == first[3] and again[1] == first[1]  # the same next item and counter, not one more label
    # A key for an item that is not this user's (here: the next item's id with a made-up key) is refused: nothing
    # stored, a warning, and the answer is the user's own item again (the Rate tab loads it by itself).
    other = int(first[6].split(":")[0]) + 1
    refused = c.predict(5, "", f"{other}:made-up", api_name="/rate_submit")
    assert refused[6].split(":")[0] == first[6].split(":")[0]
    assert len(ratings_of(db_rows, running_app, username)) == 1


def test_two_concurrent_submits_store_one_label(running_app, db_rows):
    from concurrent.futures import ThreadPoolExecutor

    username = "double-rater"
    with_user(running_app, username)
    c = client(running_app, (username, PASSWORD))
    shown = c.predict(api_name="/rate_next")
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda _: c.predict(4, "", shown[6], api_name="/rate_submit"), range(2)))
    assert ratings_of(db_rows, running_app, username) == [{"item_id": int(shown[6].split(":")[0]), "score": 4.0}]
    # Both were shown the same next item (each showing with its own key).
    assert answers[0][6].split(":")[0] == answers[1][6].split(":")[0] != shown[6].split(":")[0]
    assert "**1** done" in answers[0][1] and "**1** done" in answers[1][1]


PASSWORD = "rater-password-1"


def with_user(running_app, username: str) -> None:
    from labeler.services.data import accounts
    from storage import open_db

    db = open_db(running_app.db_path)
    try:
        accounts.create_user(db, username, PASSWORD)
    finally:
        db.conn.close()


def test_calls_without_login_are_refused(running_app):
    from gradio_client.exceptions import AuthenticationError

    with pytest.raises(AuthenticationError):
        Client(running_app.url, verbose=False)
    with pytest.raises(Exception):
        Client(running_app.url, auth=(running_app.annotator[0], "wrong-password"), verbose=False)


def test_admin_endpoints_refuse_an_annotator(running_app, db_rows):
    from gradio_client.exceptions import AppError

    c = client(running_app, running_app.annotator)
    with pytest.raises(AppError, match="not an admin"):
        c.predict(api_name="/admin_refresh")
    with pytest.raises(AppError, match="not an admin"):
        c.predict("mallory", "mallory-password", "admin", api_name="/admin_add_user")
    with pytest.raises(AppError, match="not an admin"):
        c.predict(api_name="/admin_backup")
    assert db_rows(running_app.db_path, "SELECT * FROM users WHERE username = 'mallory'") == []


def test_admin_adds_a_user_who_can_then_log_in(running_app):
    admin = client(running_app, running_app.admin)
    result = admin.predict("carol", "carol-password-1", "annotator", api_name="/admin_add_user")
    assert ["carol", "annotator", "yes"] in result[0]["data"]
    assert client(running_app, ("carol", "carol-password-1")).predict(api_name="/whoami").startswith(
        "Logged in as **carol**"
    )


def test_uploads_over_the_size_cap_are_refused(running_app, tmp_path, db_rows):
    from gradio_client import handle_file

    admin = client(running_app, running_app.admin)
    before = db_rows(running_app.db_path, "SELECT COUNT(*) AS n FROM prompts")[0]["n"]
    big = tmp_path / "big.txt"  # the fixture caps uploads at 2 MB
    big.write_text("".join(f"A long prompt number {i} " + "x" * 200 + "\n" for i in range(12_000)), encoding="utf-8")
    assert big.stat().st_size > 2 * 1024 * 1024
    with pytest.raises(Exception, match="(?i)size|large|413"):
        admin.predict(handle_file(str(big)), api_name="/data_import_prompts")
    assert db_rows(running_app.db_path, "SELECT COUNT(*) AS n FROM prompts")[0]["n"] == before

    small = tmp_path / "small.txt"
    small.write_text("An uploaded prompt\n", encoding="utf-8")
    summary, _ = admin.predict(handle_file(str(small)), api_name="/data_import_prompts")
    assert f"**{before + 1}** prompts" in summary
