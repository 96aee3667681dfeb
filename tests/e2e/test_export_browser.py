"""Issue 24 item 8 in a real browser (headless Chromium): the preferences export with rating pairs lists a
pair that was both ranked and rated once, not twice."""
from __future__ import annotations

import json

import pytest
from test_smaller_browser import make_user

pytestmark = [pytest.mark.slow, pytest.mark.browser]


def seed_ranked_and_rated(db_path: str, username: str) -> None:
    """One prompt, two answers; the user rates them 7 and 2 and ranks the first above the second."""
    from labeler.services.data import labeling, prompts
    from labeler.services.data.responses import insert_response
    from storage import open_db, write_transaction

    db = open_db(db_path)
    try:
        prompts.add_prompts(db, ["An export test opening line"], source="e2e-export")
        prompt_id = db.execute("SELECT id FROM prompts WHERE source = 'e2e-export'").fetchone()[0]
        # In training: the held-out share may hold a new prompt out, and a held-out prompt takes no training label.
        db.execute("UPDATE prompts SET split = 'train' WHERE id = ?", [prompt_id])
        with write_transaction(db):
            ids = [insert_response(db, prompt_id, text, model="tiny", source="e2e") for text in
                   ("the export test's better answer", "the export test's worse answer")]
        labeling.create_items(db, "default", ids, ranking_size=2)
        user_id = db.execute("SELECT id FROM users WHERE username = ?", [username]).fetchone()[0]
        rating_items = [db.execute("SELECT id FROM items WHERE kind = 'rating' AND response_ids_json = ?",
                                   [json.dumps([response_id])]).fetchone()[0] for response_id in ids]
        ranking_item = db.execute("SELECT id FROM items WHERE kind = 'ranking' AND prompt_id = ?", [prompt_id]).fetchone()[0]
        with write_transaction(db):  # handed to this user, as the queue would
            for item in [*rating_items, ranking_item]:
                labeling.add_assignment(db, item, user_id, "pending")
        for item, score in zip(rating_items, (7, 2)):
            labeling.submit_rating(db, "default", username, item, score)
        labeling.submit_ranking(db, "default", username, ranking_item, [[ids[0]], [ids[1]]])
    finally:
        db.conn.close()


def test_a_ranked_and_rated_pair_is_exported_once(running_app, login):
    username, _ = make_user(running_app, "olga")
    seed_ranked_and_rated(running_app.db_path, username)
    page = login(running_app.url, *running_app.admin, ready="button[role=tab]:has-text('Data')", height=1600)
    page.click("button[role=tab]:has-text('Data')")
    page.click("text=3. Export labels as a dataset")
    page.click("#data-export-switches label:has-text('Also turn ratings into preference pairs')")
    page.click("#data-export")
    link = page.wait_for_selector("#data-export-file a[href]", timeout=30_000)
    body = page.request.get(link.get_attribute("href")).text()
    rows = [json.loads(line) for line in body.splitlines() if line.strip()]
    ours = [row for row in rows if row["prompt"] == "An export test opening line"]
    assert ours == [{"prompt": "An export test opening line", "chosen": "the export test's better answer",
                     "rejected": "the export test's worse answer", "source": "e2e", "margin": 5.0}]
    keys = [(json.dumps(r["prompt"]), json.dumps(r["chosen"]), json.dumps(r["rejected"])) for r in rows]
    assert len(keys) == len(set(keys))
    page.close()
