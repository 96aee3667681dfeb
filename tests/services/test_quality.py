import itertools
import random

import pytest
from labeling_helpers import add_prompt, make_users, set_overlap

from labeler.services import labeling, quality
from labeler.services.labeling import create_items, next_item, submit_ranking, submit_rating
from labeler.services.quality import krippendorff_alpha_interval, pairwise_agreement

P = "default"


def test_alpha_hand_computed():
    # Units [1, 2], [3, 3], [4, 5, 5]: n = 7 pairable values.
    # D_o: unit 1: ordered pairs (1,2),(2,1) -> 1 + 1 = 2, / (m-1 = 1) = 2
    #      unit 2: 0
    #      unit 3: (4,5) twice and (5,5) once unordered -> 1 + 1 + 0 = 2, ordered 4, / (m-1 = 2) = 2
    #      D_o = (2 + 0 + 2) / 7 = 4/7
    # D_e: all 21 unordered pairs of 1,2,3,3,4,5,5: squared differences sum to 94 (from 1: 1+4+4+9+16+16 = 50;
    #      from 2: 1+1+4+9+9 = 24; from 3: 0+1+4+4 = 9, 1+4+4 = 9; from 4: 1+1 = 2; 5,5: 0 -> 94),
    #      ordered 188, / (n(n-1) = 42) -> 188/42
    # alpha = 1 - (4/7) / (188/42) = 1 - 24/188 = 41/47 = 0.87234
    assert krippendorff_alpha_interval([[1, 2], [3, 3], [4, 5, 5]]) == pytest.approx(41 / 47)


def test_alpha_published_example():
    # Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", the 4 coders x 12 units example with
    # missing values; the paper gives alpha_interval = 0.849. Unit 12 has one value and is not pairable.
    units = [[1, 1, 1], [2, 2, 3, 2], [3, 3, 3, 3], [3, 3, 3, 3], [2, 2, 2, 2], [1, 2, 3, 4],
             [4, 4, 4, 4], [1, 1, 2, 1], [2, 2, 2, 2], [5, 5, 5], [1, 1], [3]]
    assert round(krippendorff_alpha_interval(units), 3) == 0.849


def test_alpha_perfect_and_undefined():
    assert krippendorff_alpha_interval([[1, 1], [3, 3, 3], [7, 7]]) == 1.0
    assert krippendorff_alpha_interval([[3], [4]]) is None  # nothing pairable
    assert krippendorff_alpha_interval([[2, 2], [2, 2, 2]]) is None  # no variation at all
    # A single unit with disagreement: observed equals expected, alpha = 0.
    assert krippendorff_alpha_interval([[6, 4]]) == pytest.approx(0.0)


def test_alpha_closed_form_equals_pair_loop():
    rng = random.Random(0)
    units = [[rng.randint(1, 7) for _ in range(rng.randint(1, 5))] for _ in range(40)]
    pairable = [u for u in units if len(u) >= 2]
    n = sum(len(u) for u in pairable)
    d_o = sum(sum((a - b) ** 2 for a, b in itertools.permutations(u, 2)) / (len(u) - 1) for u in pairable) / n
    values = [v for u in pairable for v in u]
    d_e = sum((a - b) ** 2 for a, b in itertools.permutations(values, 2)) / (n * (n - 1))
    assert krippendorff_alpha_interval(units) == pytest.approx(1 - d_o / d_e, abs=1e-12)


def test_pairwise_agreement_hand_computed():
    # Responses 1, 2, 3 ranked by three annotators:
    #   A [[1], [2], [3]]   B [[1], [2, 3]]   C [[2], [1], [3]]
    # pair (1,2): A>, B>, C<  -> annotator pairs AB agree, AC no, BC no -> 1 of 3
    # pair (1,3): all >       -> 3 of 3
    # pair (2,3): A>, B tie, C> -> AC agree only -> 1 of 3
    # total 5 / 9
    orders = [[[1], [2], [3]], [[1], [2, 3]], [[2], [1], [3]]]
    assert pairwise_agreement([([1, 2, 3], orders)]) == (pytest.approx(5 / 9), 9)
    assert pairwise_agreement([]) == (None, 0)


def test_stats_and_agreement_from_the_database(db):
    make_users(db, "alice", "bob", "carol")
    set_overlap(db, 2)
    rated = add_prompt(db, "rate", 3)
    a, b, c = add_prompt(db, "rank", 3)
    create_items(db, P, response_ids=rated, kinds=("rating",))
    create_items(db, P, response_ids=[a, b, c], kinds=("ranking",))
    i1, i2, i3 = [row[0] for row in db.execute("SELECT id FROM items WHERE kind = 'rating' ORDER BY id")]
    (k,) = db.execute("SELECT id FROM items WHERE kind = 'ranking'").fetchone()
    labeling.set_gold(db, i1, {"score": 6})
    labeling.set_gold(db, k, {"order": [[a], [b, c]]})

    def label(user, script):
        for kind, action, *value in script:
            item = next_item(db, P, user, kind)
            if action == "skip":
                labeling.skip_item(db, P, user, item.item_id)
            elif kind == "rating":
                submit_rating(db, P, user, item.item_id, value[0], seconds=value[1])
            else:
                submit_ranking(db, P, user, item.item_id, value[0], seconds=value[1])

    # alice: gold rating 6 (exact), 3, 5; ranking with a on top (matches the gold's best group).
    label("alice", [("rating", "rate", 6, 10), ("rating", "rate", 3, None), ("rating", "rate", 5, 20),
                    ("ranking", "rank", [[a], [b], [c]], 30)])
    # bob: gold rating 4 (two points off: wrong), 3, skips the third; ranking ties a and b on top (wrong).
    label("bob", [("rating", "rate", 4, None), ("rating", "rate", 3, None), ("rating", "skip"),
                  ("ranking", "rank", [[a, b], [c]], None)])
    next_item(db, P, "carol")  # carol holds work, has labelled nothing yet

    assert quality.annotator_stats(db, P) == [
        {"username": "alice", "ratings": 3, "rankings": 1, "skipped": 0, "gold_items": 2,
         "gold_accuracy": 1.0, "mean_seconds": 20.0},  # (10 + 20 + 30) / 3
        {"username": "bob", "ratings": 2, "rankings": 1, "skipped": 1, "gold_items": 2,
         "gold_accuracy": 0.0, "mean_seconds": None},
        {"username": "carol", "ratings": 0, "rankings": 0, "skipped": 0, "gold_items": 0,
         "gold_accuracy": None, "mean_seconds": None},
    ]
    # Ratings: units i1 [6, 4] and i2 [3, 3] (i3 has one rating). n = 4.
    #   D_o = ((6-4)^2 * 2 / 1 + 0) / 4 = 2
    #   D_e: values 6, 4, 3, 3: unordered squared differences 4 + 9 + 9 + 1 + 1 + 0 = 24, ordered 48, / 12 = 4
    #   alpha = 1 - 2/4 = 0.5
    # Rankings: A [[a], [b], [c]] vs B [[a, b], [c]]: (a,b) differ, (a,c) and (b,c) agree -> 2/3.
    assert quality.agreement(db, P) == {
        "ratings_alpha": pytest.approx(0.5),
        "ratings_items": 2,
        "rankings_pairwise": pytest.approx(2 / 3),
        "rankings_items": 1,
        "rankings_comparisons": 3,
    }
    # The queue served the items in order; the labels landed where the arithmetic above assumes.
    assert [tuple(r) for r in db.execute("SELECT item_id, score FROM ratings ORDER BY id")] == [
        (i1, 6.0), (i2, 3.0), (i3, 5.0), (i1, 4.0), (i2, 3.0)
    ]


def test_empty_project(db):
    assert quality.annotator_stats(db, P) == []
    assert quality.agreement(db, P) == {
        "ratings_alpha": None, "ratings_items": 0, "rankings_pairwise": None, "rankings_items": 0,
        "rankings_comparisons": 0,
    }
