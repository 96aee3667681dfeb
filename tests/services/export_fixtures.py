"""A small hand-built labelled database for the export and labels-import tests (plain SQL, no services).

Project `default` (Likert 1..7):
  prompt 1 "Review Alien" (plain): responses 1 "great", 2 "bad", 3 "okay"
  prompt 2 "Review Heat." (system + user conversation): responses 4 "=SUM(A1)", 5 "-fine"
Project `other`: prompt 3 "Other prompt": responses 6 "x", 7 "y"

Rankings (best to worst):   item 1 (responses 1,2,3)  alice [[1],[3],[2]] 2025-01-10
                                                      bob   [[1],[2,3]]   2025-01-12
                                                      carol [[3],[1],[2]] 2025-01-20
                            item 2 (responses 4,5)    import (no user) [[5],[4]] 2025-02-01
                            item 3 (other project)    alice [[6],[7]]
Ratings: response 1 alice 6, bob 7; response 2 alice 2, bob 4; response 3 alice 4; response 4 carol 5;
         response 6 (other project) alice 1.   alice's at 2025-01-10, bob's 2025-01-12, carol's 2025-01-20.
"""
from __future__ import annotations

import json

SYSTEM = {"role": "system", "content": "Be brief."}
DATES = {"alice": "2025-01-10T09:00:00.000Z", "bob": "2025-01-12T09:00:00.000Z", "carol": "2025-01-20T09:00:00.000Z"}


def build_labelled_db(db) -> None:
    with db.conn:  # sqlite3 with isolation_level=None: plain statements; fine for test setup
        for name in ("alice", "bob", "carol"):
            db.execute("INSERT INTO users (username, password_hash, salt, role) VALUES (?, 'x', 'x', 'annotator')", [name])
        db.execute("INSERT INTO projects (name) VALUES ('other')")
        prompts = [
            (1, 1, "Review Alien", None),
            (2, 1, "Review Heat.", json.dumps([SYSTEM, {"role": "user", "content": "Review Heat."}])),
            (3, 2, "Other prompt", None),
        ]
        for pid, project, text, messages in prompts:
            db.execute(
                "INSERT INTO prompts (id, project_id, text, messages_json, text_hash) VALUES (?, ?, ?, ?, ?)",
                [pid, project, text, messages, f"hash{pid}"],
            )
        for rid, pid, text in [(1, 1, "great"), (2, 1, "bad"), (3, 1, "okay"), (4, 2, "=SUM(A1)"), (5, 2, "-fine"), (6, 3, "x"), (7, 3, "y")]:
            db.execute("INSERT INTO responses (id, prompt_id, text, model) VALUES (?, ?, ?, 'm')", [rid, pid, text])
        items = [(1, 1, "ranking", 1, [1, 2, 3]), (2, 1, "ranking", 2, [4, 5]), (3, 2, "ranking", 3, [6, 7])]
        items += [(10 + r, 1, "rating", p, [r]) for r, p in [(1, 1), (2, 1), (3, 1), (4, 2)]] + [(16, 2, "rating", 3, [6])]
        for iid, project, kind, pid, ids in items:
            db.execute(
                "INSERT INTO items (id, project_id, kind, prompt_id, response_ids_json) VALUES (?, ?, ?, ?, ?)",
                [iid, project, kind, pid, json.dumps(ids)],
            )
        user = {"alice": 1, "bob": 2, "carol": 3}
        for item, pid, name, order in [(1, 1, "alice", [[1], [3], [2]]), (1, 1, "bob", [[1], [2, 3]]),
                                       (1, 1, "carol", [[3], [1], [2]]), (3, 3, "alice", [[6], [7]])]:
            db.execute(
                "INSERT INTO rankings (item_id, prompt_id, user_id, order_json, created_at) VALUES (?, ?, ?, ?, ?)",
                [item, pid, user[name], json.dumps(order), DATES[name]],
            )
        db.execute(
            "INSERT INTO rankings (item_id, prompt_id, user_id, order_json, source, created_at)"
            " VALUES (2, 2, NULL, '[[5], [4]]', 'import', '2025-02-01T00:00:00.000Z')"
        )
        for response, name, score in [(1, "alice", 6), (1, "bob", 7), (2, "alice", 2), (2, "bob", 4), (3, "alice", 4),
                                      (4, "carol", 5), (6, "alice", 1)]:
            db.execute(
                "INSERT INTO ratings (item_id, response_id, user_id, score, created_at) VALUES (?, ?, ?, ?, ?)",
                [10 + response, response, user[name], score, DATES[name]],
            )


def build_heldout_db(db) -> None:
    """build_labelled_db with prompt 2 held out (split 'test'): in 'default' prompt 1 trains and prompt 2 is kept
    for evaluation, which a run's preview counts apart."""
    build_labelled_db(db)
    db.execute("UPDATE prompts SET split = 'test' WHERE id = 2")
