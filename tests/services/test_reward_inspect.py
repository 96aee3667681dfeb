"""labeler/services/evals/reward_inspect.py with a fake scorer (the count of 'good'): side by side, distribution,
agreement."""
import json

import pytest

from labeler.services.evals import reward_inspect


def scorer(prompts, responses):
    return [float(r.count("good")) for r in responses]


def prompt(db, text, split):
    return db.execute("INSERT INTO prompts (project_id, text, text_hash, split) VALUES (1, ?, ?, ?)",
                      [text, text, split]).lastrowid


def ranking(db, prompt_id, texts, order):
    ids = [db.execute("INSERT INTO responses (prompt_id, text) VALUES (?, ?)", [prompt_id, t]).lastrowid for t in texts]
    item = db.execute("INSERT INTO items (project_id, kind, prompt_id, response_ids_json) VALUES (1, 'ranking', ?, ?)",
                      [prompt_id, json.dumps(sorted(ids))]).lastrowid
    db.execute("INSERT INTO rankings (item_id, prompt_id, order_json, source) VALUES (?, ?, ?, 'import')",
               [item, prompt_id, json.dumps([[ids[i] for i in group] for group in order])])
    return ids


def test_side_by_side_best_first_without_blanks():
    rows = reward_inspect.score_side_by_side(scorer, "p", ["bad", "good good", "", "  ", "good"])
    assert rows == [{"response": "good good", "score": 2.0}, {"response": "good", "score": 1.0},
                    {"response": "bad", "score": 0.0}]


def test_agreement_on_heldout_ranked_pairs(db):
    train, test = prompt(db, "train prompt", "train"), prompt(db, "test prompt", "test")
    ranking(db, train, ["bad", "good"], [[0], [1]])  # humans prefer "bad" here: a training pair, ignored
    # Held out: good > bad (agree), [good good, good] tied > bad bad (pairs: gg>bb agree, g>bb agree)
    ranking(db, test, ["good", "bad"], [[0], [1]])
    ranking(db, test, ["good good", "good", "bad bad"], [[0, 1], [2]])
    result = reward_inspect.agreement(db, scorer, "default")
    # 3 held-out pairs, all ordered like the humans: accuracy 1.0; margins 1, 2, 1 -> mean 4/3
    assert result == {"pairs": 3, "accuracy": 1.0, "mean_margin": pytest.approx(4 / 3), "heldout": True}
    distribution = reward_inspect.score_distribution(db, scorer, "default")
    assert sorted(row["score"] for row in distribution) == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 2.0]


def test_without_heldout_prompts_every_pair_counts_and_says_so(db):
    assert reward_inspect.agreement(db, scorer, "default") == {"pairs": 0, "accuracy": None, "heldout": False}
    first = prompt(db, "one", "train")
    ranking(db, first, ["bad", "good"], [[0], [1]])  # the scorer disagrees: margin 0 - 1 = -1
    ranking(db, first, ["good good", "x"], [[0], [1]])  # agrees: margin 2 - 0 = 2
    assert reward_inspect.agreement(db, scorer, "default") == {
        "pairs": 2, "accuracy": 0.5, "mean_margin": 0.5, "heldout": False}  # (-1 + 2) / 2


def test_score_distribution_with_the_mean_human_rating_and_a_limit(db):
    from labeler.services.data.accounts import create_user

    bad, good = ranking(db, prompt(db, "p", "train"), ["bad", "good"], [[1], [0]])
    item = db.execute("INSERT INTO items (project_id, kind, prompt_id, response_ids_json) VALUES (1, 'rating', 1, ?)",
                      [json.dumps([good])]).lastrowid
    for name, score in (("ann", 6), ("bob", 3)):
        user = create_user(db, name, "password-123")
        db.execute("INSERT INTO ratings (item_id, response_id, user_id, score) VALUES (?, ?, ?, ?)",
                   [item, good, user.id, score])
    assert reward_inspect.score_distribution(db, scorer, "default") == [
        {"response_id": bad, "score": 0.0, "human": None}, {"response_id": good, "score": 1.0, "human": 4.5}]
    assert reward_inspect.score_distribution(db, scorer, "default", limit=1) == [
        {"response_id": bad, "score": 0.0, "human": None}]


def test_score_histogram_equal_width_bins():
    # 10 scores 0..9: 10 // 5 = 2 bins over [0, 9]; pandas moves the lowest edge down by 0.1% of the range 9:
    # edges -0.009, 4.5, 9 -> midpoints 2.2455 and 6.75, five scores each.
    assert reward_inspect.score_histogram([float(i) for i in range(10)]) == [
        (pytest.approx(2.2455), 5), (pytest.approx(6.75), 5)]
    # 3 scores: one bin (at least one); 200 scores: at most 20 bins, each score counted once
    assert [count for _, count in reward_inspect.score_histogram([1.0, 2.0, 3.0])] == [3]
    many = reward_inspect.score_histogram([i / 7 for i in range(200)])
    assert len(many) == 20 and sum(count for _, count in many) == 200
    assert reward_inspect.score_histogram([]) == []
