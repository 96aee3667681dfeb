"""One reward grammar for training and evaluation (labeler/services/settings/reward_spec.py), hand-written cases."""
from __future__ import annotations

import pytest

from labeler.services.settings import reward_spec
from labeler.errors import InputError
from labeler.services.settings.reward_spec import RewardSpec


@pytest.mark.parametrize("text, spec", [
    ("rm", RewardSpec("rm")),
    ("rm:rm-run3", RewardSpec("rm", model="rm-run3")),
    (" rm : runs/rm-7 ", RewardSpec("rm", model="runs/rm-7")),  # a folder; spaces around the parts dropped
    ("human", RewardSpec("human")),
    ("mix", RewardSpec("mix")),
    ("mix:rm-run2", RewardSpec("mix", model="rm-run2")),
    ("vader", RewardSpec("function", function="vader")),
    ("vader-with-prompt", RewardSpec("function", function="vader-with-prompt")),
    ("my_rewards:words", RewardSpec("function", function="my_rewards:words")),
    ("pkg.sub.mod:score_fn", RewardSpec("function", function="pkg.sub.mod:score_fn")),
    ("function", RewardSpec("function")),  # the older training spelling's source word
])
def test_each_spelling_parses(text, spec):
    assert reward_spec.parse(text) == spec


@pytest.mark.parametrize("text, words", [
    ("", "no reward given"),
    ("crowd", "unknown reward 'crowd'"),
    ("rm:", "needs a reward model name"),
    ("mix: ", "needs a reward model name"),
    ("human:alice", "human takes no name"),
    ("my rewards:score", "expected module:function"),
    ("mod:", "expected module:function"),
    (":fn", "expected module:function"),
    ("mod:a.b", "expected module:function"),
])
def test_a_bad_spec_is_one_line_naming_the_value_and_the_grammar(text, words):
    with pytest.raises(InputError) as error:
        reward_spec.parse(text, field="reward")
    message = str(error.value)
    assert words in message and "\n" not in message and error.value.field == "reward"
    assert repr(text.strip()) in message and reward_spec.GRAMMAR in message


def test_the_built_in_names_are_the_librarys():
    from rlhf.rewards import BUILTIN_FUNCTIONS

    assert set(reward_spec.BUILTIN_FUNCTIONS) == set(BUILTIN_FUNCTIONS)


def test_a_spec_becomes_the_fields_a_run_stores_and_the_old_spelling_is_unchanged():
    expand = reward_spec.job_settings
    assert expand({"reward": "rm:rm-run3", "steps": "5"}) == {"reward": "rm", "reward_model": "rm-run3", "steps": "5"}
    assert expand({"reward": "vader"}) == {"reward": "function", "reward_function": "vader"}
    assert expand({"reward": "mix:rm-run2"}) == {"reward": "mix", "reward_model": "rm-run2"}
    # The older spelling: three fields, as stored runs and documented commands have them.
    old = {"reward": "function", "reward_function": "my_rewards:words"}
    assert expand(old) == old
    assert expand({"reward": "rm", "reward_model": "rm-run3"}) == {"reward": "rm", "reward_model": "rm-run3"}
    assert expand({"steps": "5"}) == {"steps": "5"}  # no reward given: nothing added
    # Saying the same thing twice is fine; saying two things is refused, naming the field.
    assert expand({"reward": "rm:a", "reward_model": "a"}) == {"reward": "rm", "reward_model": "a"}
    with pytest.raises(InputError, match="reward='rm:a' names 'a' but reward_model='b'") as error:
        expand({"reward": "rm:a", "reward_model": "b"})
    assert error.value.field == "reward_model"
    with pytest.raises(InputError, match="reward function 'nocolon'") as error:
        expand({"reward": "function", "reward_function": "nocolon"})
    assert error.value.field == "reward_function"


def test_which_settings_name_code_to_import():
    assert reward_spec.names_code({"reward": "os:system"}) == ["reward"]
    assert reward_spec.names_code({"reward": "function", "reward_function": "os:system"}) == ["reward_function"]
    assert reward_spec.names_code({"reward": "vader", "reward_function": "vader-with-prompt"}) == []
    assert reward_spec.names_code({"reward": "rm:rm-run3"}) == [] and reward_spec.names_code({"reward": "function"}) == []


def test_evaluation_takes_the_same_spec_and_refuses_what_only_a_run_has(db):
    from labeler.services.evals import evaluation
    from rlhf.rewards import vader_answer, vader_compound

    assert evaluation.reward_function(db, "vader") is vader_answer
    assert evaluation.reward_function(db, "vader-with-prompt") is vader_compound
    assert evaluation.reward_function(db, "labeler.services.settings.reward_spec:parse") is reward_spec.parse
    for spec, words in (("human", "people's labels reach only a training run"), ("mix:rm-1", "only a training run"),
                        ("rm", "name the reward model, e.g. rm:rm-run3"), ("crowd", "unknown reward 'crowd'")):
        with pytest.raises(InputError, match=words) as error:
            evaluation.reward_function(db, spec)
        assert error.value.field == "reward"


def test_the_choices_a_form_offers_are_specs_that_parse_and_name_no_code():
    assert reward_spec.choices([]) == [("Sentiment (VADER)", "vader"),
                                       ("Sentiment of prompt + answer (VADER)", "vader-with-prompt"),
                                       ("People rate the answers", "human"), ("Newest reward model", "rm"),
                                       ("People + newest reward model", "mix")]
    offered = reward_spec.choices(["rm-run1", "rm-run3"])  # oldest first, as the registry lists them
    assert [value for _, value in offered] == ["vader", "vader-with-prompt", "human", "rm", "rm:rm-run3", "rm:rm-run1",
                                               "mix", "mix:rm-run3", "mix:rm-run1"]
    assert dict((value, label) for label, value in offered)["mix:rm-run1"] == "People + reward model rm-run1"
    parsed = [reward_spec.parse(value) for _, value in offered]
    assert [spec.model for spec in parsed] == ["", "", "", "", "rm-run3", "rm-run1", "", "rm-run3", "rm-run1"]
    assert not any(spec.imports_code for spec in parsed)
