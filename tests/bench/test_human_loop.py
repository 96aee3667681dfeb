"""bench/human_loop.py's pure parts for issue 46 item 3: the settings of each method's human run, the methods'
means and the verdict (online DPO with judge=mix against PPO with reward=mix), and the comparison table."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))  # bench scripts import their siblings by plain name

import human_loop  # noqa: E402
from human_loop import Criteria, human_settings, item3_verdict, method_summary, print_comparison  # noqa: E402


def _run(method: str, seed: int, positive: float, kl: float, distinct: float, labels: int, answers: int) -> dict:
    return {"method": method, "seed": seed, "margin": 0.1, "wall_s": 600.0, "labels_by_team": labels,
            "judged_by_team": answers,
            "after": {"eval/positive_share": positive, "eval/kl": kl, "eval/distinct_2": distinct}}


def _summary(positive: float, labels: float, worst_kl: float = 8.0, worst_distinct: float = 0.8) -> dict:
    return {"runs": 3, "positive": positive, "kl": worst_kl, "distinct_2": worst_distinct, "labels": labels,
            "answers": 2 * labels, "worst_kl": worst_kl, "worst_distinct_2": worst_distinct}


def test_each_method_puts_people_in_its_loop_with_the_seed_and_the_settings_after():
    assert human_settings("ppo", 1, ["steps=10"]) == ["reward=mix", "seed=1", "steps=10"]
    # online DPO's own settings come after the shared ones, so they win as `train --set` reads them
    assert human_settings("online-dpo", 2, ["steps=10"], ["steps=20", "beta=0.2"]) == [
        "judge=mix", "seed=2", "steps=10", "steps=20", "beta=0.2"]
    with pytest.raises(SystemExit, match="'dpo' is not one of ppo, online-dpo"):
        human_settings("dpo", 0, [])


def test_method_summary_by_hand():
    runs = [_run("online-dpo", 0, 0.80, 6.0, 0.80, 80, 160), _run("online-dpo", 1, 0.90, 9.0, 0.70, 82, 164),
            _run("online-dpo", 2, 0.85, 12.0, 0.90, 78, 156)]
    summary = method_summary(runs)
    # positive (0.80 + 0.90 + 0.85) / 3 = 0.85; KL 27 / 3 = 9; distinct (0.8 + 0.7 + 0.9) / 3 = 0.8;
    # labels 240 / 3 = 80, answers 480 / 3 = 160; worst KL 12, worst distinct-2 0.7
    assert summary == pytest.approx({"runs": 3, "positive": 0.85, "kl": 9.0, "distinct_2": 0.8, "labels": 80.0,
                                     "answers": 160.0, "worst_kl": 12.0, "worst_distinct_2": 0.7})


def test_item3_verdict_same_result_with_half_the_labels_or_better_with_as_many():
    ppo = _summary(0.88, 160)
    # the same (0.86 >= 0.88 - 0.03) with 80 / 160 = 0.5x the labels
    assert item3_verdict(_summary(0.86, 80), ppo) == (
        True, "the same result with at most half the labels: positive 86% vs 88% with 0.50x people's labels")
    # the same with 0.51x the labels: not half
    assert item3_verdict(_summary(0.88, 81), ppo)[0] is False
    # better (0.92 > 0.88 + 0.03) with as many labels
    assert item3_verdict(_summary(0.92, 160), ppo) == (
        True, "a better result with at most as many labels: positive 92% vs 88% with 1.00x people's labels")
    # better by no more than the margin, with as many: neither
    assert item3_verdict(_summary(0.90, 160), ppo) == (False, "positive 90% vs 88% with 1.00x people's labels")
    # behind by more than the margin, even with few labels
    assert item3_verdict(_summary(0.84, 40), ppo)[0] is False
    # a wider margin says "the same" for it
    assert item3_verdict(_summary(0.84, 40), ppo, Criteria(same_within=0.05))[0] is True


def test_item3_verdict_needs_every_online_dpo_run_within_the_kl_and_diversity_bars():
    ppo = _summary(0.88, 160)
    assert item3_verdict(_summary(0.95, 80, worst_kl=10.5), ppo) == (
        False, "an online DPO run ended at KL 10.50 > 10")
    assert item3_verdict(_summary(0.95, 80, worst_distinct=0.44), ppo) == (
        False, "an online DPO run ended at distinct-2 0.440 < 0.45")
    assert item3_verdict(_summary(0.95, 80, worst_kl=math.nan), ppo)[0] is False  # a run with no evaluation
    assert item3_verdict(_summary(0.95, 80, worst_kl=10.0, worst_distinct=0.45), ppo)[0] is True  # at the bars


def test_the_comparison_table_needs_both_methods_and_ends_with_the_verdict(capsys):
    ppo = [_run("ppo", seed, 0.88, 9.0, 0.85, 160, 640) for seed in range(3)]
    dpo = [_run("online-dpo", seed, 0.87, 7.0, 0.80, 80, 160) for seed in range(3)]
    assert print_comparison(ppo) is None and capsys.readouterr().out == ""
    met, why = print_comparison(ppo + dpo)
    out = capsys.readouterr().out.splitlines()
    assert met and why.startswith("the same result with at most half the labels")
    assert sum(line.lstrip().startswith("ppo |") for line in out) == 4  # 3 runs and the mean
    assert sum(line.lstrip().startswith("online-dpo |") for line in out) == 4
    assert out[-1] == f"issue 46 item 3: met ({why})"
    assert human_loop.METHODS == {"ppo": "reward=mix", "online-dpo": "judge=mix"}
