"""A project's answer length fitted to its base model's own answers."""
import hashlib

import pytest

from labeler.services import answer_length, projects
from labeler.services.answer_length import length_for_share
from labeler.services.errors import InputError


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

