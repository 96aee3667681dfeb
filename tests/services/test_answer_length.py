"""A project's answer length fitted to its base model's own answers."""
import hashlib

import pytest

from labeler.services.serving import answer_length
from labeler.services.data import projects
from labeler.services.serving.answer_length import length_for_share
from labeler.errors import InputError


def test_length_for_share_hand_worked():
    # 10 answers, 9 needed (90%): ended at 5..45 (9 answers) and one cut at the cap.
    lengths = [5, 10, 12, 20, 22, 30, 33, 40, 45, 512]
    finished = [True] * 9 + [False]
    assert length_for_share(lengths, finished) == 48  # the 9th shortest ended at 45 -> rounded up to 48
    assert length_for_share(lengths, finished, share=0.5) == 32  # the 5th ended at 22 -> 32
    # Only 8 of 10 end: 90% never fit, so the cap.
    assert length_for_share(lengths, [True] * 8 + [False] * 2) == 512
    assert length_for_share([3], [True]) == 16  # never below one step
    assert length_for_share([700], [True], cap=1024, round_to=16) == 704
    with pytest.raises(ValueError):
        length_for_share([1, 2], [True])


class _Answers:
    """A stand-in causal LM whose answers are fixed token runs: `lengths[i]` tokens, ending in EOS when
    `finished[i]`; enough to test the plumbing without a model that happens to stop."""

    def __init__(self, lengths, finished, eos_id, filler_id):
        import torch

        self.torch = torch
        self.parameter = torch.nn.Parameter(torch.zeros(1))
        self.lengths, self.finished, self.eos_id, self.filler_id = lengths, finished, eos_id, filler_id
        self.generation_config = type("Config", (), {"eos_token_id": eos_id})()
        self.training = False
        self.calls = 0

    def parameters(self):
        return iter([self.parameter])

    def eval(self):
        return self

    def train(self, mode=True):
        return self

    def generate(self, input_ids, attention_mask, max_new_tokens, **kwargs):
        rows = []
        for _ in range(input_ids.shape[0]):
            length, done = self.lengths[self.calls], self.finished[self.calls]
            self.calls += 1
            tokens = [self.filler_id] * (length - 1) + [self.eos_id if done else self.filler_id]
            tokens += [self.eos_id] * (max_new_tokens - len(tokens))  # padding after the answer
            rows.append(tokens[:max_new_tokens])
        return self.torch.cat([input_ids, self.torch.tensor(rows)], dim=1)


def _add_prompts(db, n, project="default"):
    project_id = projects.get_project(db, project).id
    for i in range(n):
        text = f"question {i}?"
        db.execute("INSERT INTO prompts (project_id, text, text_hash) VALUES (?, ?, ?)",
                   [project_id, text, hashlib.sha256(text.encode()).hexdigest()])


def test_fit_answer_tokens_sets_the_project_length(db, tiny_model_dir):
    from rlhf.loading import load_tokenizer

    tokenizer = load_tokenizer(tiny_model_dir)
    with pytest.raises(InputError, match="import prompts first"):
        answer_length.fit_answer_tokens(db, "default", lambda: None)
    _add_prompts(db, 10)
    lengths = [5, 10, 12, 20, 22, 30, 33, 40, 45, 64]
    fake = _Answers(lengths, [True] * 9 + [False], tokenizer.eos_token_id, filler_id=42)
    fitted = answer_length.fit_answer_tokens(db, "default", lambda: (fake, tokenizer), sample=10, cap=64)
    assert fitted == answer_length.FittedLength(tokens=48, finished_share=0.9, answers=10, cap=64)
    assert projects.get_project(db).answer_tokens == 48



# --- a new chat project's length, fitted at its first import (issue 45 item 3) ----------------------------------


def _refuse():
    raise AssertionError("the model must not load: nothing to fit")


def _fake_loader(tokenizer, lengths, finished):
    return lambda: (_Answers(lengths, finished, tokenizer.eos_token_id, filler_id=42), tokenizer)


def test_a_new_chat_projects_length_is_fitted_once_and_says_where_it_came_from(db, tiny_model_dir):
    from rlhf.loading import load_tokenizer

    tokenizer = load_tokenizer(tiny_model_dir)
    project = projects.get_project(db)
    assert (project.answer_tokens, project.answer_tokens_origin) == (128, "")
    assert project.answer_length_origin == "the default for chat projects" and answer_length.needs_fit(project)
    assert answer_length.fit_new_project(db, "default", _refuse) == answer_length.FitOutcome("")  # no prompts yet
    _add_prompts(db, 10)
    lengths = [5, 10, 12, 20, 22, 30, 33, 40, 45, 64]
    outcome = answer_length.fit_new_project(db, "default", _fake_loader(tokenizer, lengths, [True] * 9 + [False]),
                                            sample=10, cap=64)
    origin = "fitted from 10 of the base model's answers: 90% end within 48 tokens"
    assert outcome.message == f"answer length 48 tokens, {origin}" and outcome.fitted.tokens == 48
    project = projects.get_project(db)
    assert (project.answer_tokens, project.answer_tokens_origin) == (48, origin)
    assert not answer_length.needs_fit(project)
    assert answer_length.fit_new_project(db, "default", _refuse).message == ""  # the next import keeps it
    # Refit: whatever the length was, from the model's answers again.
    again = answer_length.fit_new_project(db, "default", _fake_loader(tokenizer, [70] * 4, [True] * 4), refit=True,
                                          sample=4, cap=128)
    assert again.message == "answer length 80 tokens, fitted from 4 of the base model's answers: 100% end within 80 tokens"
    # A person's length is theirs: saved unchanged it keeps its origin, changed it is "set by hand".
    assert projects.update_project(db, "default", answer_tokens=80).answer_tokens_origin.startswith("fitted from 4")
    assert projects.update_project(db, "default", answer_tokens=96).answer_tokens_origin == projects.SET_BY_HAND


def test_answers_that_fill_the_cap_say_so():
    fitted = answer_length.FittedLength(tokens=512, finished_share=0.5, answers=16, cap=512)
    assert fitted.origin == ("fitted from 16 of the base model's answers: 50% end within 512 tokens, the cap (the "
                             "longer ones are cut)")


def test_no_fit_for_a_length_set_by_hand_a_continuation_or_held_out_prompts_alone(db):
    set_by_hand = projects.create_project(db, "support", prompt_format="chat", answer_tokens=128)
    assert set_by_hand.answer_tokens_origin == projects.SET_BY_HAND and not answer_length.needs_fit(set_by_hand)
    _add_prompts(db, 3, "support")
    assert answer_length.fit_new_project(db, "support", _refuse).message == ""
    movie = projects.create_project(db, "movie", prompt_format="continue")
    assert movie.answer_tokens == 16 and not answer_length.needs_fit(movie)
    assert movie.answer_length_origin == "the default for continue projects"
    heldout = projects.create_project(db, "eval-only")
    _add_prompts(db, 3, "eval-only")
    db.execute("UPDATE prompts SET split = 'test' WHERE project_id = ?", [heldout.id])
    assert answer_length.fit_new_project(db, "eval-only", _refuse).message == ""
    assert answer_length.fit_new_project(db, "eval-only", _refuse, refit=True).message.startswith(
        "the project has no training prompts yet")


def test_a_model_that_does_not_load_keeps_the_default_and_says_so(db):
    _add_prompts(db, 3)

    def broken():
        raise OSError("/models/nope: no such folder\nmore detail")

    outcome = answer_length.fit_new_project(db, "default", broken)
    assert outcome.fitted is None and outcome.message == (
        "answer length: kept 128 tokens (the default for chat projects): the base model's answers could not be sampled "
        "(/models/nope: no such folder); fit it later with `rlhf-studio projects fit-length default` or the Data "
        "tab's Refit button")
    project = projects.get_project(db)
    assert (project.answer_tokens, project.answer_tokens_origin) == (128, "")  # the next import tries again


def test_the_shipped_task_says_its_length_is_the_movie_tasks(db):
    from labeler.services.data.prompts import import_shipped_prompts

    import_shipped_prompts(db)
    project = projects.get_project(db)
    assert (project.answer_tokens, project.answer_tokens_origin) == (16, "the movie-review task's length")
