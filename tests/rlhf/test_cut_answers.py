"""Issue 45 item 3: a run counts the answers cut at the answer length (no EOS), as PPO's `tokens/cut_share`."""
from __future__ import annotations

import pytest
import torch
from test_ppo import EOS, SMALL_TOKENIZER, rollouts, small_vocab_model

from rlhf.configs import PPOConfig
from rlhf.core import unfinished_share
from rlhf.ppo import PPOTrainer


def test_unfinished_share_hand_worked():
    responses = [torch.tensor([5, 6, EOS]), torch.tensor([5, 6, 7]), torch.tensor([EOS]), torch.tensor([5, EOS, 9])]
    assert unfinished_share(responses, EOS) == 0.25  # only [5, 6, 7] never ended: 1 of 4
    assert unfinished_share(responses, [EOS, 7]) == 0.0  # a second stop id ends [5, 6, 7] too
    assert unfinished_share([torch.tensor([3, 2]), torch.tensor([3, 4])], [0, 2]) == 0.5
    assert unfinished_share(responses, None) == 0.0 and unfinished_share([], EOS) == 0.0


def test_a_ppo_step_reports_the_share_of_cut_answers():
    queries, responses, scores = rollouts(4)  # tokens 1..15: none of them ended
    responses[1] = torch.tensor([5, 6, EOS])
    config = PPOConfig(batch_size=4, mini_batch_size=2, learning_rate=1e-2, bf16=False)
    stats = PPOTrainer(config, small_vocab_model(), None, SMALL_TOKENIZER).step(queries, responses, scores)
    assert stats["tokens/cut_share"] == pytest.approx(0.75)  # 3 of 4 answers cut at the length
