import pytest
from labeling_helpers import add_prompt, make_users, set_overlap

from labeler.services.data import labeling
from labeler.services.labels import quality
from labeler.services.data.labeling import create_items, next_item, submit_ranking, submit_rating
from labeler.services.labels.quality import krippendorff_alpha, pairwise_agreement

P = "default"


def test_ordinal_alpha_hand_computed():
    # Units [1, 2], [3, 3], [4, 5, 5]; value counts n_1..n_5 = 1, 1, 2, 1, 2 (n = 7 pairable values).
    # Coincidences (each ordered pair within a unit weighs 1/(m_u - 1)): o(1,2) = o(2,1) = 1, o(3,3) = 2,
    #   o(4,5) = o(5,4) = 2 * 1/2 = 1, o(5,5) = 2 * 1/2 = 1.
    # Ordinal distance delta(c, k) = (n_c + ... + n_k - (n_c + n_k) / 2)^2:
    #   delta(1,2) = (2 - 1)^2 = 1, delta(4,5) = (3 - 1.5)^2 = 2.25
    #   observed: sum o * delta = 1 + 1 + 2.25 + 2.25 = 6.5
    # Expected: sum over c != k of n_c n_k delta(c, k) / (n - 1). Unordered pairs, n_c n_k * delta:
    #   (1,2) 1*1 = 1     (1,3) 2*6.25 = 12.5   (1,4) 1*16 = 16     (1,5) 2*30.25 = 60.5  (2,3) 2*2.25 = 4.5
    #   (2,4) 1*9 = 9     (2,5) 2*20.25 = 40.5  (3,4) 2*2.25 = 4.5  (3,5) 4*9 = 36      (4,5) 2*2.25 = 4.5
    #   sum 189, ordered 378, / (n - 1 = 6) = 63
    # alpha = 1 - 6.5 / 63 = 113/126 = 0.89683 (the interval metric gives 41/47 = 0.87234 on the same units)
    units = [[1, 2], [3, 3], [4, 5, 5]]
    assert krippendorff_alpha(units) == pytest.approx(113 / 126)
    assert krippendorff_alpha(units, "interval") == pytest.approx(41 / 47)


def test_alpha_published_example():
    # Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", the 4 coders x 12 units example with
    # missing values; the paper gives alpha_ordinal = 0.815 and alpha_interval = 0.849. Unit 12 has one value
    # and is not pairable.
    units = [[1, 1, 1], [2, 2, 3, 2], [3, 3, 3, 3], [3, 3, 3, 3], [2, 2, 2, 2], [1, 2, 3, 4],
             [4, 4, 4, 4], [1, 1, 2, 1], [2, 2, 2, 2], [5, 5, 5], [1, 1], [3]]
    assert round(krippendorff_alpha(units), 3) == 0.815
    assert round(krippendorff_alpha(units, "interval"), 3) == 0.849


def test_ordinal_alpha_reads_only_the_order_of_the_scale_points():
    # Relabelling 1..5 as 1, 2, 3, 10, 20 keeps their order: the ordinal alpha stays, the interval one moves.
    units = [[1, 2], [3, 3], [4, 5, 5], [2, 4], [5, 5, 4]]
    relabelled = [[{1: 1, 2: 2, 3: 3, 4: 10, 5: 20}[v] for v in unit] for unit in units]
    assert krippendorff_alpha(relabelled) == pytest.approx(krippendorff_alpha(units), abs=1e-12)
    assert krippendorff_alpha(relabelled, "interval") != pytest.approx(krippendorff_alpha(units, "interval"))


def test_alpha_perfect_and_undefined():
    assert krippendorff_alpha([[1, 1], [3, 3, 3], [7, 7]]) == 1.0
    assert krippendorff_alpha([[3], [4]]) is None  # nothing pairable
    assert krippendorff_alpha([[2, 2], [2, 2, 2]]) is None  # no variation at all
    # A single unit with disagreement: observed equals expected, alpha = 0.
    assert krippendorff_alpha([[6, 4]]) == pytest.approx(0.0)


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
    # Ratings, ordinal alpha: units i1 [6, 4] and i2 [3, 3] (i3 has one rating). n_3 = 2, n_4 = 1, n_6 = 1, n = 4.
    #   observed: o(6,4) = o(4,6) = 1, delta(4,6) = (n_4 + n_6 - (n_4 + n_6)/2)^2 = 1 -> 2
    #   expected: n_c n_k delta over unordered pairs: (3,4) 2 * (3 - 1.5)^2 = 4.5, (3,6) 2 * (4 - 1.5)^2 = 12.5,
    #             (4,6) 1 * 1 = 1 -> 18, ordered 36, / (n - 1 = 3) = 12
    #   alpha = 1 - 2/12 = 5/6
    # Rankings: A [[a], [b], [c]] vs B [[a, b], [c]]: (a,b) differ, (a,c) and (b,c) agree -> 2/3.
    assert quality.agreement(db, P) == {
        "ratings_alpha": pytest.approx(5 / 6),
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
