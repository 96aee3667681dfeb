"""Prompts edited and retired from the browser or the command line (issue 49, item 1): a retired prompt keeps its
answers and labels but leaves the labelling queues, training, evaluation and Generate's work; restoring it puts it
back in the split it had. A prompt's text is edited only while it has no answers. The project each person works
in is theirs alone (projects.choose_project)."""
from __future__ import annotations

import pytest

from labeler.services.labels import export
from labeler.services.data import labeling, projects, prompts
from labeler.errors import InputError
from labeler.services.data.prompts import edit_prompt, restore_prompts, retire_prompts
from labeler.services.training.stages import training_prompts
from tests.services.labeling_helpers import add_prompt, add_ranked_pairs, make_users


def _prompt_id(db, text: str) -> int:
    return db.execute("SELECT id FROM prompts WHERE text = ?", [text]).fetchone()[0]


def _open_items(db, prompt_id: int) -> int:
    return db.execute("SELECT COUNT(*) FROM items WHERE prompt_id = ? AND is_open = 1", [prompt_id]).fetchone()[0]


def _training_prompt_texts(db) -> set[str]:
    rows = export.rows_with_prompt_ids(db, "default", "preferences", export.ExportOptions())
    return {prompts.prompt_text(db, prompt_id) for prompt_id, _ in rows}


def test_a_retired_prompt_keeps_its_labels_and_leaves_queues_and_training(db):
    make_users(db, "ann", "bob")
    add_ranked_pairs(db, 2, annotator="ann")  # "Review 0/1: this film was", each ranked by ann
    add_prompt(db, "Unlabelled prompt", 2)
    labeling.create_items(db, "default", ranking_size=2)
    ranked, unlabelled = _prompt_id(db, "Review 0: this film was"), _prompt_id(db, "Unlabelled prompt")
    rankings_before = db.execute("SELECT COUNT(*) FROM rankings").fetchone()[0]
    assert _training_prompt_texts(db) == {"Review 0: this film was", "Review 1: this film was"}
    assert _open_items(db, unlabelled) == 3  # two ratings and one ranking

    assert retire_prompts(db, "default", [ranked, unlabelled]) == 2

    assert db.execute("SELECT COUNT(*) FROM rankings").fetchone()[0] == rankings_before  # labels kept
    assert _training_prompt_texts(db) == {"Review 1: this film was"}
    assert _open_items(db, unlabelled) == 0  # out of the queues, and not queued again
    assert labeling.create_items(db, "default", ranking_size=2) == 0
    while (item := labeling.next_item(db, "default", "bob", "ranking")) is not None:
        assert item.prompt_id not in (ranked, unlabelled)
        labeling.skip_item(db, "default", "bob", item.item_id)
    assert "Unlabelled prompt" not in training_prompts(db, "default", None)
    assert prompts.retired_count(db) == 2
    assert retire_prompts(db, "default", [ranked]) == 0  # already retired


def test_restore_puts_a_prompt_back_in_the_split_it_had(db):
    add_prompt(db, "held out one", 1)
    add_prompt(db, "trained one", 1)
    held, trained = _prompt_id(db, "held out one"), _prompt_id(db, "trained one")
    prompts.hold_out(db, [held])
    retire_prompts(db, "default", [held, trained])
    assert restore_prompts(db, "default", [held, trained]) == 2
    assert {row[0]: row[1] for row in db.execute("SELECT text, split FROM prompts")} == {
        "held out one": "test", "trained one": "train"}
    assert _open_items(db, trained) == 1 and _open_items(db, held) == 0  # the trained one's answer queued again


def test_retire_refuses_a_prompt_of_another_project_and_changes_nothing(db):
    projects.create_project(db, "other")
    add_prompt(db, "mine", 1)
    add_prompt(db, "theirs", 1, project="other")
    with pytest.raises(InputError) as error:
        retire_prompts(db, "default", [_prompt_id(db, "mine"), _prompt_id(db, "theirs")])
    assert error.value.field == "prompt" and f"no prompt {_prompt_id(db, 'theirs')}" in str(error.value)
    assert prompts.retired_count(db) == 0


def test_edit_changes_the_text_only_while_the_prompt_has_no_answers(db):
    add_prompt(db, "Waht is RLHF?", 0)
    add_prompt(db, "answered", 1)
    fixed = edit_prompt(db, "default", _prompt_id(db, "Waht is RLHF?"), "  What is RLHF? ")
    assert fixed["text"] == "What is RLHF?"
    assert prompts.insert_prompt(db, 1, prompts.PromptRecord("What is RLHF?", None), "x")[1] is False  # hash follows
    with pytest.raises(InputError, match="has 1 answers") as error:
        edit_prompt(db, "default", _prompt_id(db, "answered"), "changed")
    assert error.value.field == "prompt"
    with pytest.raises(InputError, match="already has this text"):
        edit_prompt(db, "default", fixed["id"], "answered")
    with pytest.raises(InputError, match="needs text"):
        edit_prompt(db, "default", fixed["id"], "   ")


def test_each_person_works_in_the_project_they_chose(db):
    make_users(db, "ann", "bob")
    projects.create_project(db, "nimbus")
    assert projects.chosen_project(db, "ann", "default") == "default"
    projects.choose_project(db, "ann", "nimbus")
    assert projects.chosen_project(db, "ann", "default") == "nimbus"
    assert projects.chosen_project(db, "bob", "default") == "default"  # bob's is his own
    projects.choose_project(db, "ann", "default")
    assert projects.chosen_project(db, "ann", "x") == "default"
    with pytest.raises(InputError, match="unknown project 'nope'"):
        projects.choose_project(db, "ann", "nope")
