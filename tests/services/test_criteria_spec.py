import pytest

from labeler.services.settings.reward_spec import Constraint, parse_constraint, parse_weighted
from labeler.errors import InputError
from labeler.services.settings.reward_spec import RewardSpec


def test_weighted_sums():
    assert parse_weighted("rm:helpful*0.7+rm:safe*0.3") == [
        (RewardSpec("rm", model="helpful"), 0.7), (RewardSpec("rm", model="safe"), 0.3)]
    assert parse_weighted(" rm:helpful + vader * -1e-1 ") == [
        (RewardSpec("rm", model="helpful"), 1.0), (RewardSpec("function", function="vader"), -0.1)]
    for bad, words in (("rm:helpful", "two or more terms"), ("rm:a*0.5+", "two or more terms"),
                       ("rm:a*0+rm:b", "non-zero"), ("human*0.5+rm:b", "people are not a term"),
                       ("nonsense+rm:b", "unknown reward")):
        with pytest.raises(InputError, match=words) as refused:
            parse_weighted(bad)
        assert refused.value.field == "reward"


def test_constraints():
    assert parse_constraint("rm:safe>=0") == Constraint(RewardSpec("rm", model="safe"), 0.0)
    assert parse_constraint("rm:safe >= -0.5") == Constraint(RewardSpec("rm", model="safe"), -0.5)
    assert parse_constraint("rm:safe>=base") == Constraint(RewardSpec("rm", model="safe"), None)
    for bad in ("rm:safe", "rm:safe<=0", "mix>=0", "rm:safe>=basis", "rm:safe>=BASE"):
        with pytest.raises(InputError) as refused:
            parse_constraint(bad)
        assert refused.value.field == "constraint"


def test_a_constraint_at_the_base_s_level_is_stored_as_it_was_typed():
    from labeler.services.settings.reward_spec import parse

    stored = parse("rm:helpful,rm:safe>=base")
    assert stored.model == "rm:helpful*1,rm:safe>=base"
    assert parse(stored.model).combined.constraint.threshold is None
    assert parse("rm:helpful,rm:safe>=0.5").model == "rm:helpful*1,rm:safe>=0.5"
