"""The evaluation's cut share (eval/truncated_share, issue 45 item 3) counts an answer as cut only when it never
produced EOS within the answer length: one whose last allowed token is EOS finished (rlhf.core.unfinished, the
definition PPO's tokens/cut_share uses)."""
from __future__ import annotations

from types import SimpleNamespace

import torch

from labeler.services.evals.evaluation import truncated_share
from rlhf import evaluation
from rlhf.core import unfinished, unfinished_share

EOS = 2


def test_unfinished_per_answer_hand_worked():
    at_limit = torch.tensor([5, 6, EOS])  # 3 tokens at a limit of 3, the last one EOS: finished
    cut = torch.tensor([5, 6, 7])  # 3 tokens, no EOS: cut
    short = torch.tensor([EOS])
    assert unfinished([at_limit, cut, short], EOS) == [False, True, False]
    assert unfinished([at_limit, cut], [EOS, 7]) == [False, False]  # a second stop id ends the second too
    assert unfinished([cut], None) == [False] and unfinished([], EOS) == []
    assert unfinished_share([at_limit, cut, short], EOS) == 1 / 3  # the share is the mean of the flags


def test_the_evaluations_cut_share_counts_an_answer_ending_with_eos_at_the_limit_as_finished(monkeypatch):
    # Hand-built answers at max_new_tokens=3: the generator is replaced, so the numbers are exact.
    answers = [torch.tensor([5, 6, EOS]), torch.tensor([5, 6, 7]), torch.tensor([EOS]), torch.tensor([7, 7, 7])]
    monkeypatch.setattr(evaluation, "generate_batch", lambda model, tokenizer, query_ids, settings: answers)
    tokenizer = SimpleNamespace(eos_token_id=EOS, pad_token_id=0,
                                decode=lambda tokens, skip_special_tokens=True: " ".join(map(str, tokens.tolist())))
    model = SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=None))
    result = evaluation.evaluate_policy(model, tokenizer, ["a", "b"], None, samples=2, max_new_tokens=3,
                                        build_query=lambda text: torch.tensor([1]))
    assert [row["cut"] for row in result.rows] == [False, True, False, True]
    assert [row["length"] for row in result.rows] == [3, 3, 1, 3]  # three at the limit, two of them cut
    assert truncated_share(result.rows) == 2 / 4  # by length alone it was 3 / 4
    assert truncated_share([]) == 0.0
