import math

import pytest

from labeler.services.data import label_kinds as lk
from labeler.errors import InputError


@pytest.mark.parametrize("score, expected", [(1, 1), (7, 7), (4.0, 4)])
def test_validate_score_accepts_whole_numbers_on_the_scale(score, expected):
    assert lk.validate_score(score, 1, 7) == expected
    assert type(lk.validate_score(score, 1, 7)) is int


@pytest.mark.parametrize("score", [0, 8, 4.5, math.nan, math.inf, "5", None, True])
def test_validate_score_rejects(score):
    with pytest.raises(InputError) as error:
        lk.validate_score(score, 1, 7)
    assert error.value.field == "score"


def test_validate_score_respects_other_scales():
    assert lk.validate_score(-2, -2, 2) == -2
    with pytest.raises(InputError, match="between -2 and 2"):
        lk.validate_score(3, -2, 2)


def test_validate_order_canonicalises_groups():
    # Ties are groups; ids inside a group are sorted so equal rankings have equal JSON.
    assert lk.validate_order([[13], [15, 14], [12]], [12, 13, 14, 15]) == [[13], [14, 15], [12]]
    assert lk.validate_order(((2, 1),), [1, 2]) == [[1, 2]]  # all tied is a valid judgement


@pytest.mark.parametrize(
    "order, message",
    [
        ([], "non-empty"),
        ([[1], []], "group 2 is empty"),
        ([[1], [1, 2]], r"\[1\] appear more than once"),
        ([[1], [9]], r"\[9\] are not part"),
        ([[1], [2]], r"\[3\] are missing"),
        ([[1], ["2"], [3]], "not a response id"),
        ([[1], [True], [3]], "not a response id"),
        ([1, 2, 3], "group 1"),
        ("1,2,3", "non-empty list"),
    ],
)
def test_validate_order_rejects(order, message):
    with pytest.raises(InputError, match=message) as error:
        lk.validate_order(order, [1, 2, 3])
    assert error.value.field == "order"


def test_ranking_pairs_drop_ties():
    # [[1], [2, 3], [4]]: 1 beats 2, 3, 4; 2 and 3 (tied) each beat 4; no (2, 3) pair.
    assert lk.ranking_pairs([[1], [2, 3], [4]]) == [(1, 2), (1, 3), (1, 4), (2, 4), (3, 4)]
    # 4 responses without ties: 4*3/2 = 6 pairs (InstructGPT's K choose 2).
    assert len(lk.ranking_pairs([[4], [3], [2], [1]])) == 6
    assert lk.ranking_pairs([[1, 2]]) == []


def test_pair_relation():
    order = [[5], [6, 7], [8]]
    assert lk.pair_relation(order, 5, 8) == 1
    assert lk.pair_relation(order, 8, 5) == -1
    assert lk.pair_relation(order, 6, 7) == 0
    with pytest.raises(KeyError):
        lk.pair_relation(order, 5, 9)


def test_vote_to_order():
    assert lk.vote_to_order("a", 3, 9) == [[3], [9]]
    assert lk.vote_to_order("b", 3, 9) == [[9], [3]]
    assert lk.vote_to_order("tie", 9, 3) == [[3, 9]]
    assert lk.ranking_pairs(lk.vote_to_order("both_bad", 3, 9)) == []
    with pytest.raises(InputError):
        lk.vote_to_order("c", 3, 9)


def test_gold_validation_and_matching():
    assert lk.validate_gold("rating", {"score": 6.0}, [1], 1, 7) == {"score": 6}
    assert lk.validate_gold("ranking", {"order": [[2], [1]]}, [1, 2], 1, 7) == {"order": [[2], [1]]}
    with pytest.raises(InputError) as error:
        lk.validate_gold("rating", {"order": [[1]]}, [1], 1, 7)
    assert error.value.field == "gold"
    with pytest.raises(InputError) as error:
        lk.validate_gold("rating", {"score": 9}, [1], 1, 7)
    assert error.value.field == "gold.score"
    # Ratings within one point match: gold 5 accepts 4, 5, 6.
    assert [lk.rating_matches_gold(s, 5) for s in (3, 4, 5, 6, 7)] == [False, True, True, True, False]
    # Rankings match on the best group only.
    assert lk.ranking_matches_gold([[1], [3], [2]], [[1], [2], [3]])
    assert not lk.ranking_matches_gold([[1, 2], [3]], [[1], [2], [3]])
    assert not lk.ranking_matches_gold([[2], [1], [3]], [[1], [2], [3]])


def test_all_pairs():
    assert lk.all_pairs([3, 1, 2]) == [(1, 2), (1, 3), (2, 3)]


def test_majority_pairs_votes_ties_and_agreement():
    from labeler.services.data.label_kinds import PairMajority, majority_pairs

    # Three annotators rank responses 1, 2, 3 of one item:
    #   A: 1 > 2 > 3    B: 2 > 1 > 3    C: 1 = 2 > 3
    # (1, 2): 1 vote for 1 (A), 1 for 2 (B), C tied -> no strict majority, dropped.
    # (1, 3): A, B, C all put 1 above 3 -> chosen 1, 3 votes of 3.
    # (2, 3): likewise -> chosen 2, 3 of 3.
    orders = [[[1], [2], [3]], [[2], [1], [3]], [[1, 2], [3]]]
    assert majority_pairs(orders) == [PairMajority(1, 3, 3, 3), PairMajority(2, 3, 3, 3)]
    # A fourth annotator puts 3 above 2 and ties 1 with 3:
    #   (1, 3): 3 votes for 1, D tied -> agreement 3/4; (2, 3): 3 for 2, 1 for 3 -> 3/4;
    #   (1, 2): D puts 1 above 2 -> 2 votes vs 1 -> chosen 1, agreement 2/4.
    pairs = majority_pairs([*orders, [[1, 3], [2]]])
    assert pairs == [PairMajority(1, 2, 2, 4), PairMajority(1, 3, 3, 4), PairMajority(2, 3, 3, 4)]
    assert [p.agreement for p in pairs] == [0.5, 0.75, 0.75]
    # The chosen response may have the higher id; a single all-tied ranking gives nothing.
    assert majority_pairs([[[7], [4]]]) == [PairMajority(7, 4, 1, 1)]
    assert majority_pairs([[[4, 7]]]) == []
    assert majority_pairs([]) == []


def test_centred_rank_rewards_by_hand():
    # K = 4, no ties: ranks 1..4 -> 1 - 2 (r - 1) / 3 = 1, 1/3, -1/3, -1
    assert lk.centred_rank_rewards([[7], [5], [9], [6]]) == pytest.approx({7: 1.0, 5: 1 / 3, 9: -1 / 3, 6: -1.0})
    # Ties share the mean position: [[a], [b, c], [d]] -> ranks 1, 2.5, 2.5, 4 -> 1, 0, 0, -1
    assert lk.centred_rank_rewards([[1], [2, 3], [4]]) == pytest.approx({1: 1.0, 2: 0.0, 3: 0.0, 4: -1.0})
    # K = 3 with the two best tied: ranks 1.5, 1.5, 3 -> 1 - 2 * 0.5 / 2 = 0.5, 0.5, -1
    assert lk.centred_rank_rewards([[1, 2], [3]]) == pytest.approx({1: 0.5, 2: 0.5, 3: -1.0})
    # A pair: +1 / -1; all tied: 0 for everyone
    assert lk.centred_rank_rewards([[2], [1]]) == {2: 1.0, 1: -1.0}
    assert lk.centred_rank_rewards([[1, 2, 3, 4]]) == {1: 0.0, 2: 0.0, 3: 0.0, 4: 0.0}


def test_centred_rank_rewards_sum_to_zero_and_follow_the_order():
    order = [[3], [1, 4], [8], [2, 5, 6], [7]]
    rewards = lk.centred_rank_rewards(order)
    assert sum(rewards.values()) == pytest.approx(0.0)
    flat = [rewards[group[0]] for group in order]
    assert flat == sorted(flat, reverse=True) and len(set(flat)) == len(flat)
    with pytest.raises(ValueError, match="at least 2"):
        lk.centred_rank_rewards([[1]])
