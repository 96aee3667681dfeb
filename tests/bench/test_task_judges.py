"""The example tasks' simulated judges (bench/tasks/*/judge.py): hand-computed scores, and the orderings a team
means by "better" (a complete short answer beats a truncated one; a formal answer beats a slangy one)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: bench.tasks

from bench.tasks import TASKS  # noqa: E402
from bench.tasks.concise import judge as concise  # noqa: E402
from bench.tasks.formal import judge as formal  # noqa: E402
from bench.tasks.text import prompt_text  # noqa: E402

QUESTION = "How do I reset my account password?"


def test_concise_key_terms_drop_question_words_and_stem():
    assert concise.key_terms(QUESTION) == {"reset", "account", "password"}
    assert concise.key_terms("Why is my printer printing blank pages?") == {"printer", "print", "blank", "page"}


def test_concise_complete_short_answer_scores_full_marks():
    answer = "Open Settings, choose Account, then click Reset password and follow the link we email you."
    # 15 words >= MIN_WORDS; coverage 3/3; ends with '.'; within 60 words; 14 bigrams, none repeated
    # -> 0.4 * 1 + 0.2 * 1 + 0.2 * 1 + 0.2 * (1 - 0) = 1.0
    assert concise.judge([QUESTION], [answer]) == [pytest.approx(1.0)]


def test_concise_truncated_answer_loses_the_finished_sentence_and_repeats():
    answer = "To reset the password go to the account page and then go to the"
    # 14 words; coverage 3/3 (reset, password, account); no final punctuation: finished 0; within budget;
    # bigrams 13: "go to" and "to the" each appear twice -> 2 repeats, repeated = 2/13
    # -> 0.4 + 0 + 0.2 + 0.2 * (1 - 2/13) = 0.6 + 0.2 * 11/13 = 0.769230...
    assert concise.judge([QUESTION], [answer])[0] == pytest.approx(0.6 + 0.2 * 11 / 13)


def test_concise_short_and_long_answers_are_scaled_down():
    # "Yes." : 1 word of MIN_WORDS 8; coverage 0, finished 1, budget 1, no bigrams (repeated 0)
    # -> 1/8 * (0 + 0.2 + 0.2 + 0.2) = 0.075
    assert concise.judge([QUESTION], ["Yes."]) == [pytest.approx(0.075)]
    # 90 distinct words ending in '.', no key term: budget 1 - (90 - 60) / 60 = 0.5
    # -> 0 + 0.2 + 0.2 * 0.5 + 0.2 = 0.5
    long = " ".join(f"w{i}" for i in range(90)) + "."
    assert concise.judge([QUESTION], [long]) == [pytest.approx(0.5)]
    assert concise.judge([QUESTION], [""]) == [0.0]


def test_concise_prefers_the_complete_short_answer_to_the_truncated_one():
    complete = "Go to Settings, open Account and choose Reset password; we email you a link."
    truncated = ("To reset your account password you will first need to open the settings page of the app and "
                 "then you will need to find the section that is called account and then you")
    short, cut = concise.judge([QUESTION, QUESTION], [complete, truncated])
    assert short > cut


def test_formal_scores_count_markers_once_and_informal_marks_each_time():
    polite = "Dear Mr Smith, I would be grateful if you could repair the heating. Kind regards."
    # formal markers: dear, would, grateful, could, regards = 5, capped at 4 -> 0.5 + 0.4 = 0.9; informal none
    assert formal.judge(["x"], [polite]) == [pytest.approx(0.9)]
    slangy = "Hey! The heating's broken lol, can ya fix it ASAP? Thx"
    # informal: hey, lol, ya, asap, thx (slang) + '!' + ASAP again (capitals) = 7, capped at 5 -> 0.5 - 0.5 = 0
    # ("heating's" is a possessive-looking 's, not counted)
    assert formal.informal_count(slangy) == 7
    assert formal.judge(["x"], [slangy]) == [0.0]
    # "please" three times is one marker: 0.5 + 0.1; "don't" is one contraction: - 0.1 -> 0.5
    assert formal.judge(["x"], ["Please, please, please don't forget the meeting."]) == [pytest.approx(0.5)]


def test_formal_contractions_and_short_answers():
    assert formal.informal_count("It's late and we can't come; you're welcome, that's fine.") == 4
    assert formal.informal_count("The customer's parcel is in the manager's office.") == 0
    # "Certainly." : 1 word of MIN_WORDS 5; one marker -> 1/5 * 0.6 = 0.12
    assert formal.judge(["x"], ["Certainly."]) == [pytest.approx(0.12)]


def test_formal_prefers_the_formal_answer_to_the_slangy_one():
    request = "Ask the landlord to fix the heating."
    formal_answer = "Dear Ms Taylor, could you kindly arrange a repair of the heating this week? Thank you."
    slangy_answer = "Hey, the heating's dead again!! Can you get someone over asap? Thanks a lot :)"
    good, bad = formal.judge([request, request], [formal_answer, slangy_answer])
    assert good > bad


@pytest.mark.parametrize("name", sorted(TASKS))
def test_every_task_has_a_hundred_questions_and_a_deterministic_judge_with_the_reward_signature(name):
    task = TASKS[name]
    lines = [line for line in task.prompts.read_text().splitlines() if line.strip()]
    assert len(lines) == 100 and len(set(lines)) == 100
    judge = task.judge()
    answers = ["Certainly, please restart the router and wait one minute.", "idk lol"]
    first = judge(lines[:2], answers)
    assert first == judge(lines[:2], answers) and all(0.0 <= s <= 1.0 for s in first)
    with pytest.raises(ValueError, match="one prompt per answer"):
        judge(lines[:1], answers)


def test_the_app_imports_a_judge_by_its_module_function_spec(db):
    from labeler.services.evals import measures
    from labeler.services.settings import reward_spec
    from labeler.errors import InputError
    from rlhf.rewards import FunctionReward

    spec = TASKS["concise"].judge_spec
    assert reward_spec.parse(spec) == reward_spec.RewardSpec("function", function=spec)
    reward = FunctionReward.from_spec(spec)
    scores = reward([QUESTION], ["Yes."])
    assert [float(s) for s in scores] == [pytest.approx(0.075)]
    # as a project's measure (projects set --measure): accepted, and a misspelt function refused by name
    assert measures.check_measure(db, spec) == spec
    with pytest.raises(InputError, match="has no attribute 'judgee'"):
        measures.check_measure(db, spec + "e")


def test_the_question_is_found_in_a_conversation_or_a_templated_query():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": QUESTION}]
    assert prompt_text(messages) == QUESTION
    templated = f"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
    assert prompt_text(templated) == QUESTION
    assert prompt_text(QUESTION) == QUESTION
