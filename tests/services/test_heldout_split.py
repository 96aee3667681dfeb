"""Held-out prompts for every project (issue 33): chosen at import by a hash of each prompt, a file's own split
honoured, bad shares refused with nothing written, re-split before the first label, and kept out of labelling."""
from __future__ import annotations

import json

import pytest

from labeler.services.data import accounts, labeling, prompts
from labeler.services.serving import generation
from labeler.errors import InputError
from labeler.services.data.projects import create_project, get_project
from labeler.services.data.prompts import (HELDOUT_FROM, MAX_HELDOUT, MIN_HELDOUT, VERDICT_HELDOUT,
                                           change_heldout_share, hash_fraction, heldout_rule, heldout_target,
                                           import_prompts, split_counts)


def _questions(n: int, start: int = 0) -> list[str]:
    return [f"How do I reset the password of account number {i}?" for i in range(start, start + n)]


def _write(path, lines) -> str:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def _splits(db, project_id: int = 1) -> dict[str, str]:
    return {row[0]: row[1] for row in db.execute("SELECT text, split FROM prompts WHERE project_id = ?", [project_id])}


def test_heldout_target_is_enough_for_a_verdict_then_the_share_within_the_cap():
    assert VERDICT_HELDOUT == 30 and MIN_HELDOUT == 5 and MAX_HELDOUT == 200
    # max(round(share * total), min(30, total // 2), 5), at most 200:
    assert heldout_target(10, 0.1) == 5  # max(1, min(30, 5), 5): half of 10
    assert heldout_target(70, 0.1) == 30  # max(7, min(30, 35), 5): the 70-prompt project held out 7
    assert heldout_target(200, 0.1) == 30  # max(20, min(30, 100), 5)
    assert heldout_target(1000, 0.1) == 100  # max(100, 30, 5): the share takes over above 300 prompts
    assert heldout_target(300, 0.1) == 30 and heldout_target(310, 0.1) == 31
    assert heldout_target(8, 0.1) == 5  # max(1, min(30, 4), 5): the minimum of 5
    assert heldout_target(10_000, 0.1) == MAX_HELDOUT  # 1000 capped at 200
    assert heldout_target(70, 0.5) == 35  # a share above the floor is the share
    assert heldout_target(100, 0.0) == 0 and heldout_target(0, 0.1) == 0


def test_heldout_rule_says_why_in_words():
    assert heldout_rule(70, 0.1) == ("the rule holds 30 of 70 prompts out (at least 30, or half the prompts, so that "
                                     "the verdict's interval can decide; 10% would be 7)")
    assert heldout_rule(1000, 0.1) == "the rule holds 100 of 1000 prompts out (10%)"
    assert heldout_rule(10_000, 0.1) == "the rule holds 200 of 10000 prompts out (10% capped at 200)"
    assert heldout_rule(100, 0.0) == "held-out share 0: none held out"


def test_hash_fraction_reads_the_hash_as_a_number_in_0_1():
    assert hash_fraction("0" * 64) == 0.0
    assert hash_fraction("8" + "0" * 63) == 0.5  # 0x8000000000000 / 16**13
    assert 0 <= hash_fraction("f" * 64) < 1


def test_import_holds_out_the_projects_share_by_hash_and_reimport_changes_nothing(db, tmp_path):
    texts = _questions(100)
    result = import_prompts(db, _write(tmp_path / "q.txt", texts))
    assert (result.added, result.heldout) == (100, 30)  # max(10% of 100, min(30, 50))
    splits = _splits(db)
    by_hash = sorted(texts, key=lambda t: hash_fraction(prompts.PromptRecord(t, None).text_hash))
    assert sorted(t for t, s in splits.items() if s == "test") == sorted(by_hash[:30])  # the lowest hashes
    # The same prompts in another order, into a fresh project: the same ones held out.
    create_project(db, "other")
    import_prompts(db, _write(tmp_path / "r.txt", list(reversed(texts))), project="other")
    other = _splits(db, get_project(db, "other").id)
    assert {t for t, s in other.items() if s == "test"} == {t for t, s in splits.items() if s == "test"}
    again = import_prompts(db, _write(tmp_path / "q2.txt", texts))
    assert (again.added, again.duplicates, again.heldout) == (0, 100, 0) and _splits(db) == splits


def test_a_growing_project_keeps_its_share(db, tmp_path):
    import_prompts(db, _write(tmp_path / "a.txt", _questions(10)))  # too few to hold any out yet
    assert split_counts(db)["test"] == 0
    result = import_prompts(db, _write(tmp_path / "b.txt", _questions(90, start=10)))
    assert result.heldout == 30 and split_counts(db) == {"train": 70, "test": 30, "chat": 0}
    # Stored prompts keep their split: only new ones are held out, until the project holds its target out.
    before = _splits(db)
    result = import_prompts(db, _write(tmp_path / "c.txt", _questions(300, start=100)))
    assert result.heldout == 10 and split_counts(db)["test"] == 40  # 10% of 400
    assert {t: s for t, s in _splits(db).items() if t in before} == before


def test_a_project_split_by_the_old_rule_keeps_its_prompts_and_tops_up_from_new_ones(db, tmp_path):
    # 100 prompts split before this rule: 10 held out, and labels may hang on any of them.
    import_prompts(db, _write(tmp_path / "a.txt", _questions(100)), split="train")
    db.execute("UPDATE prompts SET split = 'test' WHERE id <= 10")
    before = _splits(db)
    result = import_prompts(db, _write(tmp_path / "b.txt", _questions(10, start=100)))
    assert result.heldout == 10  # 110 prompts ask 30 held out; only the 10 new ones can go
    assert {t: s for t, s in _splits(db).items() if t in before} == before


def test_a_small_project_holds_none_out_by_default_and_says_why(db, tmp_path):
    result = import_prompts(db, _write(tmp_path / "a.txt", _questions(HELDOUT_FROM - 1)))
    assert result.heldout == 0 and f"{HELDOUT_FROM} or more" in result.note


def test_an_explicit_share_that_leaves_too_few_writes_nothing(db, tmp_path):
    path = _write(tmp_path / "a.txt", _questions(8))
    with pytest.raises(InputError, match="to train on") as error:
        import_prompts(db, path, heldout_share=0.1)  # 5 held out leaves 3 to train on
    assert error.value.field == "heldout_share" and "a.txt" in str(error.value)
    assert db.execute("SELECT COUNT(*) FROM prompts").fetchone()[0] == 0
    result = import_prompts(db, _write(tmp_path / "b.txt", _questions(40)), heldout_share=0.25)
    assert result.heldout == 20  # max(25% of 40, min(30, 40 // 2))
    create_project(db, "big")
    result = import_prompts(db, _write(tmp_path / "c.txt", _questions(200)), project="big", heldout_share=0.25)
    assert result.heldout == 50  # 25% of 200, above the floor of 30


def test_a_file_of_one_split_and_a_split_column(db, tmp_path):
    assert import_prompts(db, _write(tmp_path / "eval.txt", _questions(6)), split="test").heldout == 6
    rows = [{"prompt": f"question {i}", "split": "validation" if i < 3 else "train"} for i in range(30)]
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    assert import_prompts(db, tmp_path / "p.jsonl").heldout == 3  # the file's own split, not the share
    assert sorted(t for t, s in _splits(db).items() if s == "test" and t.startswith("question")) == [
        "question 0", "question 1", "question 2"]
    (tmp_path / "bad.jsonl").write_text('{"prompt": "a", "split": "train"}\n{"prompt": "b", "split": "later"}\n',
                                        encoding="utf-8")
    with pytest.raises(InputError, match="unknown split 'later'") as error:
        import_prompts(db, tmp_path / "bad.jsonl")
    assert "line 2" in str(error.value) and error.value.field == "split"


def test_change_share_resplits_before_the_first_label_only(db, tmp_path, tiny_model_dir):
    import_prompts(db, _write(tmp_path / "a.txt", _questions(60)))
    assert split_counts(db)["test"] == 30  # min(30, 60 // 2) above 10% of 60
    assert change_heldout_share(db, "default", 0.6)["test"] == 36
    assert get_project(db, "default").heldout_share == 0.6
    # Answers to held-out prompts are not generated for labelling, and none of their items is queued.
    ids = generation.generate_responses(db, n_per_prompt=1, limit=60, loader=lambda path: _tiny(tiny_model_dir),
                                        settings=_settings())
    held = {row[0] for row in db.execute("SELECT id FROM prompts WHERE split = 'test'")}
    assert len(ids) == 24 and not held & {row[0] for row in db.execute("SELECT prompt_id FROM items")}
    # Re-split after answers exist but before labels: the queues follow.
    change_heldout_share(db, "default", 0.1)
    held = {row[0] for row in db.execute("SELECT id FROM prompts WHERE split = 'test'")}
    assert len(held) == 30 and not held & {row[0] for row in db.execute("SELECT prompt_id FROM items")}
    accounts.create_user(db, "ann", "a long enough password")
    item = labeling.next_item(db, "default", "ann", "rating")
    labeling.submit_rating(db, "default", "ann", item.item_id, 5)
    with pytest.raises(InputError, match="has labels"):
        change_heldout_share(db, "default", 0.3)
    assert split_counts(db)["test"] == 30


def _tiny(path):
    from rlhf.loading import load_causal_lm, load_tokenizer

    return load_causal_lm(str(path)), load_tokenizer(str(path), padding_side="left")


def _settings():
    from rlhf.configs import GenerationSettings

    return GenerationSettings(max_new_tokens=2, batch_size=16)
