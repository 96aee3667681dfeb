"""Active selection: the serving order with its random share, and a refresh that ranks what the model is unsure
of first (a real MiniLM encoder over a few texts; the ensemble refits in milliseconds)."""
import random

import pytest
from labeling_helpers import add_ranked_pairs, make_users

from labeler.services.labels import active_learning
from labeler.services.data import labeling, projects
from labeler.services.data.labeling import create_items, next_item

P = "default"


def test_order_with_random_share_by_hand():
    ids, info = [10, 11, 12, 13, 14, 15, 16, 17], [0.1, 0.8, 0.3, 0.8, 0.0, 0.5, 0.2, 0.6]
    order = active_learning.order_with_random_share(ids, info, 0.25, random.Random(0))
    # Most informative first (ties by id: 11 before 13), every 4th place a random draw from what is left.
    assert [o[0] for o in order][:3] == [11, 13, 17]
    assert "random" in order[3][2] and "random" in order[7][2]
    assert all("unsure" in o[2] for i, o in enumerate(order) if (i + 1) % 4)
    assert sorted(o[0] for o in order) == ids
    assert [o[1] for o in order] == [8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]
    # share 1: every item random; the result is still a permutation.
    assert sorted(o[0] for o in active_learning.order_with_random_share(ids, info, 1.0, random.Random(1))) == ids
    with pytest.raises(ValueError, match="share"):
        active_learning.order_with_random_share(ids, info, 0.0, random.Random(0))


@pytest.fixture(scope="module")
def encoder():
    from rlhf.preference_ensemble import FrozenTextEncoder

    return FrozenTextEncoder("default-encoder")


def _add(db, text, answers):
    import hashlib

    project_id = projects.get_project(db, P).id
    prompt_id = db.execute("INSERT INTO prompts (project_id, text, text_hash) VALUES (?, ?, ?)",
                           [project_id, text, hashlib.sha256(text.encode()).hexdigest()]).lastrowid
    for answer in answers:
        db.execute("INSERT INTO responses (prompt_id, text, model) VALUES (?, ?, 'm')", [prompt_id, answer])


def test_refresh_serves_what_the_labels_leave_open_first(db, encoder):
    make_users(db, "ann", "alice")
    add_ranked_pairs(db, 12, annotator="ann")  # 12 ranked pairs: wonderful film > dull boring mess
    # Two open items: one like the labelled pairs (the order is clear), one the labels say nothing about.
    _add(db, "Review 100: this film was", ["a truly wonderful, moving film", "a dull and boring mess"])
    _add(db, "Recipe: the soup needs", ["more salt and some pepper", "a pinch of cumin and lemon"])
    create_items(db, P, ranking_size=2, kinds=("ranking",))
    report = active_learning.refresh_selection(db, P, encoder)
    assert report.pairs == 12 and report.labels == 12 and report.items_scored == 2
    rows = db.execute("SELECT p.text, i.selection_score, i.selection_reason FROM items i JOIN prompts p"
                      " ON p.id = i.prompt_id WHERE i.is_open = 1 ORDER BY i.selection_score DESC").fetchall()
    assert rows[0]["text"].startswith("Recipe") and "unsure" in rows[0]["selection_reason"]
    projects.update_project(db, P, selection="uncertainty")
    served = next_item(db, P, "alice", "ranking")
    assert served.prompt.startswith("Recipe")
    assert "unsure" in labeling.item_detail(db, served.item_id)["selection_reason"]  # what the admin view shows


def test_refresher_refits_only_with_enough_new_labels(db, encoder):
    make_users(db, "ann")
    refresher = active_learning.SelectionRefresher(":unused:", every=3)
    refresher._encoder = encoder
    add_ranked_pairs(db, 2, annotator="ann")
    assert refresher.tick(db) == []  # selection 'arrival': nothing to do
    projects.update_project(db, P, selection="uncertainty")
    assert [r.labels for r in refresher.tick(db)] == [2]
    add_ranked_pairs(db, 2, first=2, annotator="ann")
    assert refresher.tick(db) == []  # 2 new labels < every=3
    add_ranked_pairs(db, 1, first=4, annotator="ann")
    assert [r.labels for r in refresher.tick(db)] == [5]


def test_each_kind_gets_its_own_order_with_its_own_random_share(db, encoder):
    make_users(db, "ann")
    add_ranked_pairs(db, 12, annotator="ann")
    for n in range(8):
        _add(db, f"Review {200 + n}: it was", [f"great fun number {n}", f"a dull chore number {n}"])
    create_items(db, P, ranking_size=2, kinds=("ranking", "rating"))
    active_learning.refresh_selection(db, P, encoder)
    for kind in ("ranking", "rating"):
        rows = db.execute("SELECT selection_score, selection_reason FROM items WHERE is_open = 1 AND kind = ?"
                          " ORDER BY selection_score DESC", [kind]).fetchall()
        assert len(rows) == 8 if kind == "ranking" else len(rows) >= 16  # rating items for every answer
        # Within the kind's own queue: places 4, 8, ... random, the others by information; scores count down
        # from the number of the kind's items (mixed with the other kind, the rating items' larger spreads
        # took the informative places and the ranking queue was mostly random picks).
        reasons = ["random" if "random" in r["selection_reason"] else "unsure" for r in rows]
        assert reasons == [("random" if (i + 1) % 4 == 0 else "unsure") for i in range(len(rows))]
        assert [r["selection_score"] for r in rows] == [float(len(rows) - i) for i in range(len(rows))]
