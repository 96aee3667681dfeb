"""bench/reward_vs_judge.py's pairing: which answers the judge orders, and which way."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from reward_vs_judge import ordered_pairs  # noqa: E402


def test_pairs_are_within_a_prompt_better_first_and_skip_the_judges_ties():
    prompts = ["a", "a", "a", "b", "b", [{"role": "user", "content": "a"}]]
    scores = [0.5, 0.7, 0.52, 0.1, 0.1, 0.9]
    # prompt "a": 0.7 beats 0.5 and 0.52 (by more than 0.05); 0.5 and 0.52 are a tie. Prompt "b": a tie. The
    # message-list prompt is another prompt than the string "a", alone: no pair.
    assert sorted(ordered_pairs(prompts, scores, 0.05)) == [(1, 0), (1, 2)]
    # with no margin, 0.52 beats 0.5 too; equal scores stay unordered
    assert sorted(ordered_pairs(prompts, scores, 0.0)) == [(1, 0), (1, 2), (2, 0)]
