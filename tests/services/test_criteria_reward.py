"""Policy runs on several criteria (issue 47): `reward=` as a weighted sum or under a constraint, stored on the
run, built into one reward source, and used by the PPO runner."""
import pytest

from labeler.services.training import criteria_reward
from labeler.services.settings import reward_spec
from labeler.errors import InputError
from labeler.services.settings.reward_spec import RewardSpec

WORDS, CHARS = "eval_rewards:words", "eval_rewards:chars"  # tests/services/eval_rewards.py


def test_a_combination_is_stored_as_reward_rm_with_its_text():
    assert reward_spec.job_settings({"reward": "rm:helpful*0.7+rm:safe*0.3"}) == {
        "reward": "rm", "reward_model": "rm:helpful*0.7+rm:safe*0.3"}
    assert reward_spec.job_settings({"reward": " rm:helpful , rm:safe >= -0.5 "}) == {
        "reward": "rm", "reward_model": "rm:helpful*1,rm:safe>=-0.5"}
    spec = reward_spec.parse("rm:helpful*0.7+rm:tone*0.3,rm:safe>=0")
    assert spec.combined.terms == ((RewardSpec("rm", model="helpful"), 0.7), (RewardSpec("rm", model="tone"), 0.3))
    assert spec.combined.constraint == reward_spec.Constraint(RewardSpec("rm", model="safe"), 0.0)
    assert reward_spec.reward_models(spec.model) == ["helpful", "tone", "safe"]
    # A registry name may hold '+': one model, as before; a module:function term is code the web form may not send.
    assert reward_spec.parse("rm:v1+v2") == RewardSpec("rm", model="v1+v2")
    assert reward_spec.reward_models("v1+v2") == ["v1+v2"]
    assert reward_spec.names_code({"reward": f"rm:helpful*0.5+{WORDS}*0.5"}) == ["reward"]
    for bad, words in (("rm:a,rm:b>=0,rm:c>=1", "one constraint"), ("rm:a,rm:b", "SPEC>=NUMBER"),
                       ("human,rm:safe>=0", "people are not a term"), ("rm:a*x+rm:b", "a weight reads")):
        with pytest.raises(InputError, match=words) as refused:
            reward_spec.parse(bad)
        assert refused.value.field == "reward"


class Words:
    last_stats = {}

    def __init__(self, scale):
        self.scale = scale

    def __call__(self, queries, responses):
        return [len(r.split()) * self.scale for r in responses]


def test_build_sums_the_terms_and_constrains_the_last():
    combined = reward_spec.parse("rm:helpful*0.5+rm:short*-1,rm:safe>=1").combined
    sources = {"helpful": Words(1.0), "short": Words(0.25), "safe": Words(0.0)}
    reward = criteria_reward.build(combined, lambda spec: sources[spec.model])
    # Answers of 2 and 4 words: 0.5 * 2 - 0.25 * 2 = 0.5 and 0.5 * 4 - 0.25 * 4 = 1.0; safe scores 0 < 1, so the
    # multiplier steps to 1.0 * (1 - 0) = 1 (the app's step): (0.5 + 1 * (0 - 1)) / 2 = -0.25, (1.0 - 1) / 2 = 0.
    assert reward(["q", "q"], ["a b", "a b c d"]) == pytest.approx([-0.25, 0.0])
    assert reward.last_stats["reward/lagrange_multiplier"] == pytest.approx(1.0)


def test_one_source_is_not_combined(db):
    class Job:
        reward, reward_model = "rm", "rm-run3"
    assert criteria_reward.combined_reward(db, Job()) is None


@pytest.mark.slow
def test_the_ppo_runner_trains_on_the_constrained_sum(db, tmp_path, tiny_model_dir):
    """A one-step PPO run whose reward is a sum of two functions under a constraint the answers break: the
    runner scores with the combination (its multiplier is logged as it moved) and stores it as reward=rm."""
    from labeler.services.training import jobs
    from labeler.services.data import prompts
    from labeler.services.execution import run_metrics, runs
    from labeler.worker import run_worker

    prompts.add_prompts(db, ["The first scene", "The ending"])
    run = jobs.create_run(db, "ppo", {"model": str(tiny_model_dir), "steps": 1, "batch_size": 2,
                                      "reward": f"{WORDS}*0.5+{CHARS}*0.1,{WORDS}>=1000",
                                      "answers_per_prompt": 1, "mini_batch_size": 2, "ppo_epochs": 1,
                                      "max_new_tokens": 3, "checkpoint_every": 0, "eval_samples": 0},
                          runs_dir=tmp_path / "runs", start=False)
    job = runs.get_run(db, run.id).config["job"]
    assert (job["reward"], job["reward_model"]) == ("rm", f"{WORDS}*0.5+{CHARS}*0.1,{WORDS}>=1000")
    db.execute("UPDATE runs SET status = 'running' WHERE id = ?", [run.id])
    assert run_worker(runs.db_file(db), run.id) == "succeeded", run_metrics.log_tail(runs.get_run(db, run.id))
    logged = {row[0]: row[1] for row in db.execute(
        "SELECT name, value FROM metrics WHERE run_id = ?", [run.id]).fetchall()}
    # Three tokens are at most a few words, far below 1000: the multiplier rose from 0 by 1.0 * (1000 - mean).
    multiplier = logged["reward/lagrange_multiplier"]
    words_mean = logged["reward/eval_rewards_words_mean"]
    assert multiplier == pytest.approx(1.0 * (1000 - words_mean)) and multiplier > 900


def test_other_policy_trainers_refuse_a_combination(db, tmp_path, tiny_model_dir):
    from labeler.services.training import jobs
    from labeler.services.data import prompts

    prompts.add_prompts(db, ["The first scene", "The ending"])
    with pytest.raises(InputError, match="trains with ppo") as refused:
        jobs.create_run(db, "grpo", {"model": str(tiny_model_dir), "reward": f"{WORDS}*0.5+{CHARS}*0.5"},
                        runs_dir=tmp_path / "runs", start=False)
    assert refused.value.field == "reward"
    assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0
