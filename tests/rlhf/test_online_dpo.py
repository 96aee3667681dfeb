"""OnlineDPOTrainer on a tiny random model: it samples pairs, a judge picks, the policy moves and the reference does
not; TRL's config fields and errors; a judge that breaks its contract stops the run naming it and the step."""
import dataclasses

import pytest
import torch
from datasets import Dataset

from param_checks import changed, snapshot


def prefers_short(prompts, completions, **kwargs):
    return [-len(c) for c in completions]


def small_args(tmp_path, **changes):
    from rlhf import OnlineDPOConfig

    settings = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, max_new_tokens=6, max_steps=2,
                    logging_steps=1, learning_rate=1e-2, report_to="none", save_strategy="no", bf16=False,
                    temperature=1.0)
    return OnlineDPOConfig(**{**settings, **changes})


PROMPTS = Dataset.from_dict({"prompt": [f"Review {i}:" for i in range(8)]})


def test_config_defaults_help_and_errors():
    from rlhf import OnlineDPOConfig

    config = OnlineDPOConfig(output_dir="unused", report_to="none")
    assert (config.beta, config.loss_type, config.max_new_tokens, config.learning_rate, config.disable_dropout,
            config.missing_eos_penalty) == (0.1, "sigmoid", 64, 5e-7, True, None)
    assert [f.name for f in dataclasses.fields(OnlineDPOConfig) if not f.metadata.get("help")] == []
    assert OnlineDPOConfig(output_dir="unused", beta=[0.2]).beta == 0.2  # a one-item list is its number (TRL)
    assert OnlineDPOConfig(output_dir="unused", beta=[0.2, 0.1]).beta == [0.2, 0.1]
    with pytest.raises(ValueError, match=r"beta=\[0.2, -1\]: every value must be positive"):
        OnlineDPOConfig(output_dir="unused", beta=[0.2, -1])
    with pytest.raises(ValueError, match="loss_type='hinge'"):
        OnlineDPOConfig(output_dir="unused", loss_type="hinge")
    with pytest.raises(ValueError, match=r"^use_vllm=True: not supported here"):
        OnlineDPOConfig(output_dir="unused", use_vllm=True)
    with pytest.raises(ValueError, match="max_length=8: must exceed max_new_tokens=8"):
        OnlineDPOConfig(output_dir="unused", max_new_tokens=8, max_length=8)


def test_trains_with_a_function_judge_against_a_frozen_reference(tiny_model_dir, tmp_path):
    from rlhf import OnlineDPOTrainer

    seen = []

    def judged(prompts, completions, **kwargs):
        seen.append((list(prompts), list(completions)))
        return prefers_short(prompts, completions)

    trainer = OnlineDPOTrainer(str(tiny_model_dir), judge=judged, args=small_args(tmp_path), train_dataset=PROMPTS)
    policy, reference = snapshot(trainer.model), snapshot(trainer.ref_model)
    trainer.train()
    assert len(changed(policy, trainer.model)) == len(policy)
    assert changed(reference, trainer.ref_model) == []
    # each step: 4 prompts, each twice (its two answers), scored alone
    assert len(seen) == 2 and all(len(p) == 8 and p[:4] == p[4:] for p, _ in seen)
    logged = trainer.state.log_history[0]
    for name in ("loss", "objective/kl", "objective/entropy", "objective/non_score_reward", "objective/scores",
                 "objective/scores_margin", "objective/rlhf_reward", "rewards/chosen", "rewards/rejected",
                 "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected", "val/contain_eos_token",
                 "beta", "judge/ties"):
        assert name in logged, name
    # the chosen answer is the shorter one: its judge score (-length) is higher, so the margin is >= 0
    assert logged["objective/scores_margin"] >= 0 and logged["beta"] == pytest.approx(0.1)


def test_pairwise_judge_ipo_and_a_beta_per_epoch(tiny_model_dir, tmp_path):
    from rlhf import BasePairwiseJudge, OnlineDPOTrainer

    class PrefersShorterJudge(BasePairwiseJudge):
        def __init__(self):
            self.calls = 0

        def judge(self, prompts, completions, shuffle_order=True):
            self.calls += 1
            self.last_stats = {"judge/calls": self.calls}  # a judge's own statistics are logged too
            return [0 if len(a) <= len(b) else 1 for a, b in completions]

    judge = PrefersShorterJudge()
    rows = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Say something about film {i}."}] for i in range(4)]})
    args = small_args(tmp_path, loss_type="ipo", beta=[0.3, 0.05], max_steps=-1, num_train_epochs=2)
    trainer = OnlineDPOTrainer(str(tiny_model_dir), judge=judge, args=args, train_dataset=rows)
    policy = snapshot(trainer.model)
    trainer.train()
    assert judge.calls == 2 and changed(policy, trainer.model)
    betas = [log["beta"] for log in trainer.state.log_history if "beta" in log]
    assert betas == pytest.approx([0.3, 0.05])  # epoch 0's beta, then epoch 1's
    assert "objective/scores" not in trainer.state.log_history[0]  # a verdict-only judge gives no scores
    assert [log["judge/calls"] for log in trainer.state.log_history if "judge/calls" in log] == [1, 2]


def test_num_iterations_learns_from_each_judged_batch_several_times(tiny_model_dir, tmp_path):
    """num_iterations=3 with 2 accumulation micro-steps: each optimizer step's prompts are generated and judged
    once, then trained on 3 times; max_steps counts the passes, so 6 optimizer steps judge 2 batches."""
    from rlhf import OnlineDPOTrainer

    seen = []

    def judged(prompts, completions, **kwargs):
        seen.append(list(prompts[: len(prompts) // 2]))
        return prefers_short(prompts, completions)

    args = small_args(tmp_path, per_device_train_batch_size=2, gradient_accumulation_steps=2, num_iterations=3,
                      max_steps=6)
    trainer = OnlineDPOTrainer(str(tiny_model_dir), judge=judged, args=args, train_dataset=PROMPTS)
    policy = snapshot(trainer.model)
    trainer.train()
    assert trainer.state.global_step == 6 and changed(policy, trainer.model)
    # two judged batches of 4 prompts (2 micro-batches of 2), 4 different prompts each, none judged twice
    assert [len(batch) for batch in seen] == [4, 4]
    assert len({p for batch in seen for p in batch}) == 8
    with pytest.raises(ValueError, match="num_iterations=0: must be a whole number, at least 1"):
        small_args(tmp_path, num_iterations=0)


def test_kl_budget_ends_the_run_at_the_step_it_is_spent(tiny_model_dir, tmp_path):
    """kl_budget: each optimizer step's KL is the logged objective/kl; the run ends at the first step where the mean
    of the last KL_BUDGET_WINDOW steps reaches the budget, and says so in the log. A budget never reached changes
    nothing."""
    from rlhf import OnlineDPOTrainer
    from rlhf.kl_control import kl_budget_spent
    from rlhf.online_dpo import KL_BUDGET_WINDOW

    args = small_args(tmp_path, max_steps=8, kl_budget=1e-3)
    trainer = OnlineDPOTrainer(str(tiny_model_dir), judge=prefers_short, args=args, train_dataset=PROMPTS)
    trainer.train()
    steps = trainer.state.global_step
    assert 1 < steps < 8 and trainer.kl_budget_spent_at == steps
    logged = [log["objective/kl"] for log in trainer.state.log_history if "objective/kl" in log]
    assert trainer.step_kls == pytest.approx(logged)  # logging every step: the step's KL is the one logged
    assert trainer.step_kls[0] == pytest.approx(0.0, abs=1e-5)  # the first batch is the reference's own answers
    assert [kl_budget_spent(trainer.step_kls[:n], 1e-3, KL_BUDGET_WINDOW) for n in range(1, steps + 1)] == \
        [False] * (steps - 1) + [True]
    assert trainer.state.log_history[-2]["kl_budget/spent_at_step"] == steps  # [-1]: the Trainer's train summary

    unspent = OnlineDPOTrainer(str(tiny_model_dir), judge=prefers_short, train_dataset=PROMPTS,
                               args=small_args(tmp_path, max_steps=3, kl_budget=1e6))
    unspent.train()
    assert unspent.state.global_step == 3 and unspent.kl_budget_spent_at is None and len(unspent.step_kls) == 3
    with pytest.raises(ValueError, match="kl_budget=0: must be a positive number of nats"):
        small_args(tmp_path, kl_budget=0)


def test_four_answers_a_prompt_train_on_the_best_and_the_worst(tiny_model_dir, tmp_path):
    """num_generations=4: a scoring judge scores all 4 answers of each prompt and the pair is its best and worst; a
    rank judge ranks the 4 (an empty ranking is no preference: a tie); a judge of pairs only is refused."""
    from rlhf import BasePairwiseJudge, BaseRankJudge, OnlineDPOTrainer

    scored = []

    def longer(prompts, completions, **kwargs):
        scored.append(list(completions))
        return [float(len(c)) for c in completions]

    trainer = OnlineDPOTrainer(str(tiny_model_dir), judge=longer, args=small_args(tmp_path, num_generations=4, max_steps=1),
                               train_dataset=PROMPTS)
    batch = trainer._generate_and_judge([{"prompt": p} for p in PROMPTS["prompt"][:4]])
    assert len(scored) == 1 and len(scored[0]) == 16  # 4 prompts x 4 answers, scored once
    lengths = [len(c) for c in scored[0]]
    for i in range(4):
        group = lengths[i::4]  # answer k of prompt i at k * 4 + i
        first, second = batch["scores"][i].item(), batch["scores"][4 + i].item()
        if max(group) == min(group):
            assert batch["verdicts"][i].item() == -1
        else:
            assert (first, second, batch["verdicts"][i].item()) == (max(group), min(group), 0)
    assert batch["completion_ids"].shape[0] == 8  # the pairs alone go on to the loss

    class RanksByLength(BaseRankJudge):
        def judge(self, prompts, completions, shuffle_order=True):
            return [[] if i == 0 else sorted(range(4), key=lambda k: len(group[k])) for i, group in enumerate(completions)]

    trainer = OnlineDPOTrainer(str(tiny_model_dir), judge=RanksByLength(),
                               args=small_args(tmp_path, num_generations=4, max_steps=1), train_dataset=PROMPTS)
    batch = trainer._generate_and_judge([{"prompt": p} for p in PROMPTS["prompt"][:4]])
    assert batch["verdicts"].tolist() == [-1, 0, 0, 0]  # prompt 0: no preference
    texts = trainer.processing_class.batch_decode(batch["completion_ids"], skip_special_tokens=True)
    assert all(len(texts[i]) <= len(texts[4 + i]) for i in range(1, 4))  # the shortest (ranked best) first
    trainer.train()

    class Pairs(BasePairwiseJudge):
        def judge(self, prompts, completions, shuffle_order=True):
            return [0] * len(prompts)

    with pytest.raises(ValueError, match="num_generations=4: Pairs judges pairs only"):
        OnlineDPOTrainer(str(tiny_model_dir), judge=Pairs(), args=small_args(tmp_path, num_generations=4),
                         train_dataset=PROMPTS)
    with pytest.raises(ValueError, match="num_generations=1: must be a whole number, at least 2"):
        small_args(tmp_path, num_generations=1)


def test_soft_judgements_train_each_pair_towards_its_judge_s_confidence(tiny_model_dir, tmp_path):
    """A rank judge that says how sure it is (`last_confidence`): with soft_judgements the batch carries it and the loss
    is the per-pair smoothed one; without, the judge is taken as sure; a wrong confidence stops the run, named."""
    from rlhf import BaseRankJudge, OnlineDPOTrainer
    from rlhf.judges import JudgeError
    from rlhf.online_losses import chosen_rejected_rows, online_dpo_losses

    class UnsureRanks(BaseRankJudge):
        confidence = [0.5, 0.6, 0.9, 1.0]

        def judge(self, prompts, completions, shuffle_order=True):
            self.last_confidence = self.confidence[:len(prompts)]
            return [[0, 1, 2, 3] for _ in prompts]

    judge = UnsureRanks()
    rows = [{"prompt": p} for p in PROMPTS["prompt"][:4]]
    trainer = OnlineDPOTrainer(str(tiny_model_dir), judge=judge, train_dataset=PROMPTS,
                               args=small_args(tmp_path, num_generations=4, max_steps=1, soft_judgements=True))
    batch = trainer._generate_and_judge(rows)
    assert batch["confidence"].tolist() == pytest.approx([0.5, 0.6, 0.9, 1.0])
    trainer.model.train()
    # the policy is its reference now (every h = 0, where both losses are log 2): a made-up reference moves h off 0
    batch = {**batch, "ref_token_logps": torch.zeros_like(batch["ref_token_logps"])}
    loss = trainer.compute_loss(trainer.model, batch)
    # the same loss by hand from the batch's log-probs: the per-pair smoothed one at each pair's confidence
    with torch.no_grad():
        logps = trainer._token_logps(trainer.model, batch).sum(-1)
    ref = batch["ref_token_logps"].sum(-1)
    chosen, rejected, _ = chosen_rejected_rows(batch["verdicts"], 4)
    expected = online_dpo_losses(logps[chosen], logps[rejected], ref[chosen], ref[rejected], trainer.beta,
                                 confidence=torch.tensor([0.5, 0.6, 0.9, 1.0])).mean()
    hard = online_dpo_losses(logps[chosen], logps[rejected], ref[chosen], ref[rejected], trainer.beta).mean()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-4) and loss.item() != pytest.approx(hard.item())
    trainer.train()
    assert trainer.state.log_history[0]["judge/confidence"] == pytest.approx(0.75)

    sure = OnlineDPOTrainer(str(tiny_model_dir), judge=judge, train_dataset=PROMPTS,
                            args=small_args(tmp_path, num_generations=4, max_steps=1))
    assert "confidence" not in sure._generate_and_judge(rows)  # soft_judgements off: TRL's loss
    judge.confidence = [0.5, 1.5, 0.9, 1.0]
    with pytest.raises(JudgeError, match=r"judge 'UnsureRanks' gave last_confidence=\[0.5, 1.5, 0.9, 1.0\] at step 2: "
                                         r"expected 4 probabilities in \[0, 1\]"):
        trainer._generate_and_judge(rows)  # after its one step: step 2


def test_split_pair_batch_keeps_each_pairs_two_answers_together():
    from rlhf.online_dpo import split_pair_batch

    # 4 pairs: answers 0-3 are the first of pairs 0-3, answers 4-7 the second
    batch = {"verdicts": torch.tensor([0, 1, -1, 0]), "completion_ids": torch.arange(8).unsqueeze(1),
             "ref_token_logps": torch.arange(8.0).unsqueeze(1)}
    first, second = split_pair_batch(batch, 2)
    assert first["verdicts"].tolist() == [0, 1] and second["verdicts"].tolist() == [-1, 0]
    assert first["completion_ids"].squeeze(1).tolist() == [0, 1, 4, 5]
    assert second["ref_token_logps"].squeeze(1).tolist() == [2.0, 3.0, 6.0, 7.0]
    assert split_pair_batch(batch, 1) == [batch]
    with pytest.raises(ValueError, match="4 pairs do not split into 3 micro-batches"):
        split_pair_batch(batch, 3)


def test_reward_model_judges_and_missing_eos_penalty(tiny_model_dir, tiny_encoder_dir, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from rlhf import OnlineDPOTrainer, RewardModelJudge

    reward_model = AutoModelForSequenceClassification.from_pretrained(tiny_encoder_dir, num_labels=1)
    reward_tokenizer = AutoTokenizer.from_pretrained(tiny_encoder_dir)
    # max_new_tokens 2: no answer of a random model ends in time, so every score carries the penalty
    trainer = OnlineDPOTrainer(str(tiny_model_dir), reward_model=reward_model, args=small_args(
        tmp_path, max_steps=1, max_new_tokens=2, missing_eos_penalty=100.0), train_dataset=PROMPTS,
        reward_processing_class=reward_tokenizer)
    assert isinstance(trainer.judge, RewardModelJudge)
    trainer.train()
    logged = trainer.state.log_history[0]
    assert logged["val/contain_eos_token"] == 0 and logged["objective/scores"] < -50
    with pytest.raises(ValueError, match="missing_eos_penalty=1.0: needs a reward model or a scoring judge"):
        OnlineDPOTrainer(str(tiny_model_dir), judge=RankOnly(), args=small_args(tmp_path, missing_eos_penalty=1.0),
                         train_dataset=PROMPTS)
    with pytest.raises(ValueError, match="needs a judge"):
        OnlineDPOTrainer(str(tiny_model_dir), args=small_args(tmp_path), train_dataset=PROMPTS)


def RankOnly():
    from rlhf import BasePairwiseJudge

    class Verdicts(BasePairwiseJudge):
        def judge(self, prompts, completions, shuffle_order=True):
            return [0] * len(prompts)

    return Verdicts()


def test_judge_by_name_in_the_config(tiny_model_dir, tmp_path):
    from rlhf import OnlineDPOTrainer
    from rlhf.judges import FunctionJudge

    trainer = OnlineDPOTrainer(str(tiny_model_dir), args=small_args(tmp_path, judge=f"{__name__}:prefers_short"),
                               train_dataset=PROMPTS)
    assert isinstance(trainer.judge, FunctionJudge) and trainer.judge.name == "prefers_short"


@pytest.mark.parametrize("function, message", [
    ("wrong_length", r"judge 'wrong_length' returned 3 scores for 8 completions \(at step 1\)"),
    ("raises", r"judge 'raises' failed: KeyError: 'sentiment' \(at step 1\)"),
])
def test_a_judge_that_breaks_stops_the_run_naming_it_and_the_step(tiny_model_dir, tmp_path, function, message):
    from rlhf import OnlineDPOTrainer
    from rlhf.judges import JudgeError

    def wrong_length(prompts, completions, **kwargs):
        return [0.0, 1.0, 2.0]

    def raises(prompts, completions, **kwargs):
        raise KeyError("sentiment")

    judge = {"wrong_length": wrong_length, "raises": raises}[function]
    trainer = OnlineDPOTrainer(str(tiny_model_dir), judge=judge, args=small_args(tmp_path), train_dataset=PROMPTS)
    with pytest.raises(JudgeError, match=message):
        trainer.train()


def test_lora_uses_the_adapter_free_policy_as_reference(tiny_model_dir, tmp_path):
    from peft import LoraConfig

    from rlhf import OnlineDPOTrainer

    trainer = OnlineDPOTrainer(str(tiny_model_dir), judge=prefers_short, args=small_args(tmp_path, max_steps=1),
                               train_dataset=PROMPTS,
                               peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    assert trainer.ref_model is None
    trainable = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    frozen = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if not p.requires_grad}
    assert any("lora_B" in n for n in trainable)
    trainer.train()
    now = dict(trainer.model.named_parameters())
    assert all(not torch.equal(trainable[n], now[n].detach()) for n in trainable if "lora_B" in n)
    assert all(torch.equal(frozen[n], now[n].detach()) for n in frozen)
