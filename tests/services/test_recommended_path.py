"""Which path the app recommends, DPO or a reward model then PPO (issue 45 item 4): the rule's cases, the facts read
from a project, and `rlhf-studio projects recommend`."""
from __future__ import annotations

import pytest
from export_fixtures import build_labelled_db

from labeler.cli import main
from labeler.services.training import recommended_path
from labeler.services.training.recommended_path import MANY_RANKINGS, PathFacts, recommend


def facts(**changes) -> PathFacts:
    values = dict(rankings=63, pairs=378, training_prompts=63, device="cpu")
    return PathFacts(**{**values, **changes})


def test_on_a_cpu_dpo_whatever_the_labels():
    for rankings in (63, MANY_RANKINGS, 10 * MANY_RANKINGS):
        chosen = recommend(facts(rankings=rankings, pairs=6 * rankings))
        assert chosen.path == "dpo" and chosen.label == "DPO"
        assert chosen.reason.startswith("On a CPU, DPO is the faster path") and "14 min and 88%" in chosen.reason


def test_on_a_gpu_dpo_under_many_rankings_then_a_reward_model_and_ppo():
    few = recommend(facts(device="gpu", rankings=MANY_RANKINGS - 1))
    assert few.path == "dpo" and f"{MANY_RANKINGS - 1} rankings (under {MANY_RANKINGS})" in few.reason
    many = recommend(facts(device="gpu", rankings=MANY_RANKINGS))
    assert (many.path, many.label) == ("rm_ppo", "reward model, then PPO")
    assert many.line().startswith("Recommended path: **reward model, then PPO**. With 500 rankings and a GPU")


def test_a_reward_model_to_keep_is_reward_model_then_ppo_and_on_a_cpu_says_the_wait():
    gpu = recommend(facts(device="gpu", reusable_reward_model=True))
    assert gpu.path == "rm_ppo" and "On a CPU" not in gpu.reason
    cpu = recommend(facts(reusable_reward_model=True))
    assert cpu.path == "rm_ppo" and "On a CPU expect several times DPO's wait" in cpu.reason


def test_no_pairs_yet_says_to_rank_first():
    chosen = recommend(facts(rankings=0, pairs=0, device="gpu"))
    assert chosen.path == "dpo" and chosen.reason.startswith("There are no ranked pairs yet: rank answers first")


def test_estimates_when_known_and_a_cpu_run_over_the_half_hour():
    fits = recommend(facts(dpo_minutes=14.2, rm_ppo_minutes=65.0))
    assert fits.minutes == "Estimated here: DPO about 14 min 12 s, reward model, then PPO about 1 h 5 min."
    assert fits.line().endswith(fits.minutes)
    over = recommend(facts(dpo_minutes=41.0))
    assert over.minutes == ("Estimated here: DPO about 41 min 0 s. That is over the half hour a CPU run should take: "
                            "fewer steps or shorter answers would fit it.")
    assert "over the half hour" not in recommend(facts(device="gpu", dpo_minutes=41.0)).minutes  # no CPU target
    assert recommend(facts()).minutes == ""


def test_bad_facts_name_the_field():
    with pytest.raises(ValueError, match="device='tpu'"):
        facts(device="tpu")
    with pytest.raises(ValueError, match="rankings=-1"):
        facts(rankings=-1)


@pytest.fixture
def labelled(db):
    build_labelled_db(db)
    return db


def test_a_project_s_facts_and_line(labelled):
    # 'default': its rankings and the 4 preference pairs DPO would train on (test_run_preview's count), 2 prompts
    got = recommended_path.project_facts(labelled, "default", "gpu")
    rankings = labelled.execute("SELECT COUNT(*) FROM rankings WHERE prompt_id IN (1, 2)").fetchone()[0]
    assert (got.rankings, got.pairs, got.training_prompts, got.device) == (rankings, 4, 2, "gpu")
    line = recommended_path.project_line(labelled, "other", "cpu")
    assert line.startswith("Recommended path: **DPO**. On a CPU") and line.endswith(
        "(1 rankings, 1 pairs, 1 training prompts, a CPU.)")


def test_the_cli_prints_the_recommendation(labelled, db_path, capsys):
    assert main(["projects", "recommend", "other", "--db", db_path, "--device", "gpu"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "other: 1 rankings, 1 pairs, 1 training prompts, a GPU"
    assert out[1].startswith("Recommended path: DPO. With 1 rankings (under 500)")
    assert main(["projects", "recommend", "--project", "other", "--db", db_path, "--device", "cpu",
                 "--reusable-reward-model"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("Recommended path: reward model, then PPO. You want")
    assert main(["projects", "recommend", "nope", "--db", db_path]) == 2
    assert "unknown project 'nope'" in capsys.readouterr().err


def test_the_cli_times_dpo_when_asked(labelled, db_path, capsys, monkeypatch):
    from labeler.services.training import run_estimate

    # a batch of 4 pairs: 20 s to start, 5 of them reading the weights, steps of 3 s, passes of 1 s, answers 0.25 s
    micro = run_estimate.LabelMicroStep(rows=4, train_seconds=3.0, forward_seconds=1.0, setup_seconds=20.0,
                                        generate_seconds=1.0, generate_rows=4, load_seconds=5.0)
    monkeypatch.setattr(run_estimate, "measure_label_step", lambda settings: micro)
    assert main(["projects", "recommend", "--db", db_path, "--device", "cpu", "--estimate"]) == 0
    out = capsys.readouterr().out.splitlines()
    # 'default': 4 pairs, no held-out prompts: 20 s + 1 reference batch (1 s) + 1 step (3 s) = 24 s
    assert out[1].endswith("Estimated here: DPO about 24 s.")
