import importlib.util
import json
import types

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from rlhf.configs import PPOConfig
from rlhf.ppo import TRAINER_STATE_FILE, PPOTrainer, Rollouts, policy_kl_too_far
from rlhf.value_head import AutoModelForCausalLMWithValueHead

from param_checks import changed, snapshot

TRL_KEYS = [
    "objective/kl", "objective/kl_coef", "objective/entropy", "ppo/mean_scores", "ppo/std_scores",
    "ppo/mean_non_score_reward", "ppo/loss/policy", "ppo/loss/value", "ppo/loss/total", "ppo/policy/approxkl",
    "ppo/policy/clipfrac", "ppo/policy/entropy", "ppo/returns/mean", "ppo/val/vpred", "ppo/val/error",
    "ppo/val/clipfrac", "ppo/learning_rate", "time/ppo/forward_pass", "time/ppo/optimize_step", "time/ppo/total",
]
EOS = 0


def small_vocab_model(seed: int = 0) -> AutoModelForCausalLMWithValueHead:
    """A 2-layer Llama over 16 tokens (EOS = pad = 0): a toy reward on one token then has signal at once."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=True, bos_token_id=1, eos_token_id=EOS, pad_token_id=EOS)
    return AutoModelForCausalLMWithValueHead(LlamaForCausalLM(config), seed=seed)


SMALL_TOKENIZER = types.SimpleNamespace(pad_token_id=EOS, eos_token_id=EOS, save_pretrained=lambda d: None)


def rollouts(n: int, seed: int = 0, vocab: int = 16):
    g = torch.Generator().manual_seed(seed)
    queries = [torch.randint(1, vocab, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g) for _ in range(n)]
    responses = [torch.randint(1, vocab, (int(torch.randint(2, 7, (1,), generator=g)),), generator=g) for _ in range(n)]
    scores = [torch.randn((), generator=g) for _ in range(n)]
    return queries, responses, scores


def test_first_step_kl_is_zero_and_only_the_policy_changes():
    model = small_vocab_model()
    # fp32: a bf16 run keeps its reference in bf16 (tests/rlhf/test_reference_dtype.py), equal up to its rounding
    config = PPOConfig(batch_size=4, mini_batch_size=2, learning_rate=1e-2, advantage_estimator="gae", bf16=False)
    trainer = PPOTrainer(config, model, None, SMALL_TOKENIZER)
    policy_before, ref_before = snapshot(trainer.model), snapshot(trainer.ref_model)
    stats = trainer.step(*rollouts(4))
    assert set(TRL_KEYS) <= set(stats)
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
    assert stats["objective/kl"] == pytest.approx(0.0, abs=1e-5)  # policy == reference at step one
    assert stats["ppo/mean_non_score_reward"] == pytest.approx(0.0, abs=1e-5)
    assert "v_head.summary.weight" in changed(policy_before, trainer.model)
    assert "pretrained_model.model.layers.0.self_attn.q_proj.weight" in changed(policy_before, trainer.model)
    assert changed(ref_before, trainer.ref_model) == []
    # after an update the policy has moved away from the reference
    assert trainer.step(*rollouts(4, seed=1))["objective/kl"] != pytest.approx(0.0, abs=1e-6)


def test_padding_and_tokens_after_eos_change_nothing():
    queries, responses, scores = rollouts(4)
    # A response that stopped at EOS, and the same response with what batched generation appends after it.
    responses[1] = torch.tensor([5, 6, EOS])
    with_tail = list(responses)
    with_tail[1] = torch.tensor([5, 6, EOS, 9, 9, 9, 9, 9, 9, 9])
    results = []
    for batch_responses in (responses, with_tail):
        model = small_vocab_model()
        config = PPOConfig(batch_size=4, mini_batch_size=2, learning_rate=1e-2, init_kl_coef=0.5, bf16=False)
        trainer = PPOTrainer(config, model, small_vocab_model(seed=1), SMALL_TOKENIZER)  # ref != policy: KL != 0
        results.append((trainer.step(queries, batch_responses, scores), snapshot(trainer.model)))
    (stats_a, params_a), (stats_b, params_b) = results
    assert stats_a["objective/kl"] != pytest.approx(0.0, abs=1e-3)
    for key in ["objective/kl", "objective/entropy", "ppo/loss/policy", "ppo/loss/value", "ppo/returns/mean"]:
        assert stats_b[key] == pytest.approx(stats_a[key], rel=1e-4, abs=1e-6), key
    # The padded shapes differ, so float sums run in another order, and Adam scales those 1e-8 gradient
    # differences of near-zero gradients up to parameter differences of ~1e-5 (measured on 2 threads: 1.1e-5).
    # A tail that leaked into the loss would move parameters by a share of the step size (lr = 1e-2).
    worst = max((params_a[n] - params_b[n]).abs().max().item() for n in params_a)
    assert worst < 1e-2 * config.learning_rate, worst


def test_rollout_forward_of_a_padded_batch_equals_items_alone():
    queries, responses, _ = rollouts(3)
    trainer = PPOTrainer(PPOConfig(batch_size=3, mini_batch_size=3), small_vocab_model(), small_vocab_model(1),
                         SMALL_TOKENIZER)
    batch = trainer._rollout_forward(trainer._layout(queries, responses, None))
    for i in range(3):
        alone = trainer._rollout_forward(trainer._layout([queries[i]], [responses[i]], None))
        n = len(responses[i])
        for together, single in zip(batch, alone):  # logprobs, values, ref logprobs, KL, entropy
            assert torch.allclose(together[i, :n], single[0, :n], atol=1e-5)
            assert together[i, n:].abs().sum() == 0


def test_ppo_raises_the_mean_score_on_a_toy_reward():
    # reward = fraction of response tokens equal to 5; a random 16-token policy starts near 1/16.
    config = PPOConfig(batch_size=8, mini_batch_size=4, learning_rate=3e-2, init_kl_coef=0.0, adap_kl_ctrl=False,
                       bf16=False)
    trainer = PPOTrainer(config, small_vocab_model(), None, SMALL_TOKENIZER)
    g = torch.Generator().manual_seed(0)
    means = []
    for _ in range(10):
        queries = [torch.randint(1, 16, (3,), generator=g) for _ in range(8)]
        responses = trainer.generate(queries, return_prompt=False, max_new_tokens=6)
        scores = [(r == 5).float().mean() for r in responses]
        with pytest.warns(UserWarning) if len({float(s) for s in scores}) == 1 else _no_warning():
            means.append(trainer.step(queries, responses, scores)["ppo/mean_scores"])
    first, last = sum(means[:2]) / 2, sum(means[-3:]) / 3
    assert last > 0.3 and last > 3 * first, means


class _no_warning:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_generate_is_batched_left_padded_and_warns_on_kl_unsafe_settings(tiny_model_dir):
    import warnings

    from rlhf.ppo import KLUnsafeWarning

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir)
    trainer = PPOTrainer(PPOConfig(batch_size=4, mini_batch_size=2), model, None, tokenizer)
    queries = [tokenizer(t, return_tensors="pt").input_ids[0] for t in ["Hi", "The movie was really", "A"]]
    # TRL's docs warn that these bias the KL estimate; TRL's generate runs them, so here too, with a warning
    with pytest.warns(KLUnsafeWarning, match="top_k=50.*KL"):
        top_k = trainer.generate(queries, top_k=50, max_new_tokens=4, return_prompt=False)
    assert len(top_k) == 3 and all(1 <= len(r) <= 4 for r in top_k)
    with pytest.warns(KLUnsafeWarning, match="do_sample=False"):
        trainer.generate(queries, do_sample=False, max_new_tokens=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer.generate(queries, top_k=50, max_new_tokens=2, allow_kl_unsafe=True)
    greedy = dict(do_sample=False, max_new_tokens=5, allow_kl_unsafe=True, return_prompt=False)
    batched = trainer.generate(queries, batch_size=3, **greedy)
    for query, response in zip(queries, batched):
        alone = trainer.generate(query, **greedy)
        assert alone.shape[0] == 1 and torch.equal(alone[0], response)
    full = trainer.generate(queries, max_new_tokens=5)
    assert all(torch.equal(f[: len(q)], q) and 1 <= len(f) - len(q) <= 5 for f, q in zip(full, queries))


def test_step_rejects_bad_input_and_warns_on_equal_scores():
    trainer = PPOTrainer(PPOConfig(batch_size=4, mini_batch_size=2), small_vocab_model(), None, SMALL_TOKENIZER)
    queries, responses, scores = rollouts(4)
    with pytest.raises(ValueError, match="queries has 3 items, config.batch_size is 4"):
        trainer.step(queries[:3], responses, scores)
    with pytest.raises(ValueError, match=r"scores\[2\] is nan"):
        trainer.step(queries, responses, scores[:2] + [torch.tensor(float("nan"))] + scores[3:])
    with pytest.raises(ValueError, match=r"responses\[0\] must be a non-empty"):
        trainer.step(queries, [torch.tensor([], dtype=torch.long)] + responses[1:], scores)
    with pytest.warns(UserWarning, match="All 4 scores in this batch are equal"):
        trainer.step(queries, responses, [torch.tensor(1.0)] * 4)


def test_accumulation_early_stopping_and_ratio_guard():
    queries, responses, scores = rollouts(8)
    config = PPOConfig(batch_size=8, mini_batch_size=2, gradient_accumulation_steps=2, ppo_epochs=2, learning_rate=1e-2)
    stats = PPOTrainer(config, small_vocab_model(), None, SMALL_TOKENIZER).step(queries, responses, scores)
    # 2 epochs * 8 rollouts / (2 * 2 per optimizer step) = 4 optimizer steps
    assert config.optimizer_steps_per_batch == 4 and stats["ppo/optimizer_steps"] == 4

    stopping = PPOConfig(batch_size=8, mini_batch_size=2, ppo_epochs=4, learning_rate=1e-2, early_stopping=True,
                         target_kl=1e-9)
    stats = PPOTrainer(stopping, small_vocab_model(), None, SMALL_TOKENIZER).step(queries, responses, scores)
    # TRL 0.11 checks at the end of an epoch: the first epoch (8 rollouts / 2 = 4 optimizer steps) runs whole.
    assert stats["ppo/early_stopped"] == 1.0 and stats["ppo/optimizer_steps"] == 4

    # Every mini-batch's mean ratio (about 1) is above 0.5: all are skipped and nothing is learnt.
    guard = PPOConfig(batch_size=8, mini_batch_size=4, ppo_epochs=4, ratio_threshold=0.5, learning_rate=1e-2)
    trainer = PPOTrainer(guard, small_vocab_model(), None, SMALL_TOKENIZER)
    before = snapshot(trainer.model)
    stats = trainer.step(queries, responses, scores)
    assert stats["ppo/skipped"] == 8 and changed(before, trainer.model) == []


@pytest.mark.parametrize("early_stopping", [True, False])
def test_early_stopping_checks_the_last_minibatchs_policykl_after_each_epoch_as_trl(early_stopping):
    """TRL 0.11 (PPOTrainer.step and _early_stop): after each epoch, the last mini-batch's policy/policykl
    (mean of old - new logprobs) > 1.5 * target_kl stops the remaining epochs; mini-batches in mid-epoch are
    never checked. Here the real mini-batch updates run and only their reported policykl is scripted."""
    config = PPOConfig(batch_size=8, mini_batch_size=2, ppo_epochs=4, learning_rate=1e-2, early_stopping=early_stopping,
                       target_kl=0.5)  # threshold 1.5 * 0.5 = 0.75, exact in float32
    # epoch 1: high KL mid-epoch but 0.75 at its end (not > 0.75): go on; epoch 2 ends at 0.875 > 0.75: stop
    # (every value exact in float32)
    scripted = [2.0, 2.0, 2.0, 0.75, -5.0, 0.0, 0.0, 0.875] + [0.0] * 8
    trainer = PPOTrainer(config, small_vocab_model(), None, SMALL_TOKENIZER)
    real_minibatch, reported = trainer._train_minibatch, []

    def minibatch_with_scripted_policykl(*args):
        stats = real_minibatch(*args)
        stats["policy/policykl"] = torch.tensor(scripted[len(reported)])
        reported.append(float(stats["policy/policykl"]))
        return stats

    trainer._train_minibatch = minibatch_with_scripted_policykl
    stats = trainer.step(*rollouts(8))
    if early_stopping:
        # two epochs of 4 mini-batches, one optimizer step each; the mean over the 8 mini-batches run:
        # (2 + 2 + 2 + 0.75 - 5 + 0 + 0 + 0.875) / 8 = 2.625 / 8 = 0.328125
        assert reported == scripted[:8]
        assert stats["ppo/early_stopped"] == 1.0 and stats["ppo/optimizer_steps"] == 8
        assert stats["ppo/policy/policykl"] == pytest.approx(0.328125)
    else:
        assert len(reported) == 16 and stats["ppo/early_stopped"] == 0.0 and stats["ppo/optimizer_steps"] == 16
        # (2.625 + 0 * 8) / 16
        assert stats["ppo/policy/policykl"] == pytest.approx(0.1640625)


def test_policy_kl_too_far_is_strictly_above_one_and_a_half_target_kl():
    assert not policy_kl_too_far(torch.tensor(0.75), target_kl=0.5)  # 1.5 * 0.5 = 0.75: not above
    assert policy_kl_too_far(torch.tensor(0.7501), target_kl=0.5)
    assert not policy_kl_too_far(-3.0, target_kl=0.5)  # the k1 estimate can be negative: never stops then
    assert policy_kl_too_far(0.16, target_kl=0.1)  # 1.5 * 0.1 = 0.15


def test_score_scaling_norm_and_clip():
    config = PPOConfig(batch_size=4, mini_batch_size=2, use_score_scaling=True, use_score_norm=True, score_clip=1.0)
    trainer = PPOTrainer(config, small_vocab_model(), None, SMALL_TOKENIZER)
    out = trainer._process_scores(torch.tensor([0.0, 2.0, 4.0, 10.0]))
    # running mean 4, population std sqrt((16 + 4 + 0 + 36) / 4) = sqrt(14) = 3.7417;
    # (x - 4) / 3.7417 = [-1.069, -0.535, 0, 1.604] -> clipped to [-1, -0.535, 0, 1]
    assert out.tolist() == pytest.approx([-1.0, -0.534522, 0.0, 1.0], abs=1e-5)


def test_checkpoint_round_trip_resumes_identically(tmp_path):
    config = PPOConfig(batch_size=4, mini_batch_size=2, learning_rate=1e-2, use_score_scaling=True)
    # The reference is not part of a checkpoint: a resumed run rebuilds it from the base model, as here.
    trainer = PPOTrainer(config, small_vocab_model(), small_vocab_model(), SMALL_TOKENIZER)
    trainer.step(*rollouts(4))
    trainer.kl_ctl.value = 0.123  # make sure beta is restored, not re-initialised
    trainer.save_checkpoint(tmp_path)
    state = torch.load(tmp_path / TRAINER_STATE_FILE, weights_only=True)
    assert state["step"] == 1 and state["kl_ctl"]["value"] == 0.123
    assert (tmp_path / "model.safetensors").exists()

    # Sampling uses torch's global RNG, restored from the checkpoint: the same continuation comes out.
    q = [torch.tensor([3, 4, 5])]
    expected = trainer.generate(q, max_new_tokens=6)[0]
    batch = rollouts(4, seed=2)
    stats_a = trainer.step(*batch)

    resumed = PPOTrainer(config, small_vocab_model(seed=5), small_vocab_model(), SMALL_TOKENIZER)
    resumed.load_checkpoint(tmp_path)
    assert resumed.current_step == 1 and resumed.kl_ctl.value == 0.123
    assert resumed.running.state_dict() == state["running"]
    assert torch.equal(resumed.generate(q, max_new_tokens=6)[0], expected)
    stats_b = resumed.step(*batch)  # same weights, optimizer moments and shuffling order
    for key in ["ppo/loss/total", "objective/kl", "ppo/policy/approxkl"]:
        assert stats_a[key] == pytest.approx(stats_b[key], rel=1e-5, abs=1e-7)


def test_lora_policy_uses_the_adapter_free_model_as_reference(tiny_model_dir, tmp_path):
    from peft import LoraConfig

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir, peft_config=lora)
    trainer = PPOTrainer(PPOConfig(batch_size=2, mini_batch_size=2, ppo_epochs=2, learning_rate=1e-2), model, None,
                         tokenizer)
    assert trainer.ref_model is None
    before = snapshot(trainer.model)
    queries, responses, scores = rollouts(2, vocab=1000)
    assert trainer.step(queries, responses, scores)["objective/kl"] == pytest.approx(0.0, abs=1e-5)
    moved = changed(before, trainer.model)
    assert any("lora_" in n for n in moved) and all("lora_" in n or n.startswith("v_head") for n in moved)
    assert trainer.step(queries, responses, scores)["objective/kl"] != pytest.approx(0.0, abs=1e-7)
    trainer.save_checkpoint(tmp_path)
    assert (tmp_path / "adapter_model.safetensors").exists()


def test_dataloader_bf16_and_log_stats(tiny_model_dir, tmp_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    dataset = [{"query": f"review {i}", "input_ids": tokenizer(f"review {i}", return_tensors="pt").input_ids[0]}
               for i in range(6)]
    seen = []
    config = PPOConfig(batch_size=2, mini_batch_size=2, ppo_epochs=1, bf16=True, log_dir=str(tmp_path / "logs"))
    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir)
    trainer = PPOTrainer(config, model, None, tokenizer, dataset=dataset,
                         callback=lambda step, stats, samples: seen.append((step, stats, samples)))
    assert trainer.accelerator.device.type == "cpu"
    batches = list(trainer.dataloader)
    assert len(batches) == 3 and all(len(b["input_ids"]) == 2 for b in batches)
    batch = batches[0]
    responses = trainer.generate(batch["input_ids"], return_prompt=False, max_new_tokens=4)
    batch["response"] = tokenizer.batch_decode(responses)
    rewards = [torch.tensor(1.0), torch.tensor(-1.0)]
    stats = trainer.step(batch["input_ids"], responses, rewards)
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
    trainer.log_stats(stats, batch, rewards)
    step, logged, samples = seen[0]
    assert step == 1 and logged["env/reward_mean"] == 0.0 and logged["env/reward_std"] == pytest.approx(2**0.5)
    assert [s["reward"] for s in samples] == [1.0, -1.0] and samples[0]["query"] == batch["query"][0]
    row = json.loads((tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["step"] == 1 and row["objective/kl"] == pytest.approx(stats["objective/kl"])
    assert (tmp_path / "logs" / "metrics.csv").exists() and list((tmp_path / "logs").glob("events.out.tfevents.*"))

    model.save_pretrained(tmp_path / "out")
    AutoModelForCausalLM.from_pretrained(tmp_path / "out")  # plain transformers loads the trained policy


def _single_minibatch_trainer(ppo_epochs: int = 1) -> PPOTrainer:
    # batch == mini-batch and one epoch: the stats are those of the first mini-batch, before any update.
    config = PPOConfig(batch_size=4, mini_batch_size=4, ppo_epochs=ppo_epochs, learning_rate=1e-2)
    return PPOTrainer(config, small_vocab_model(), None, SMALL_TOKENIZER)


def test_step_with_behaviour_logprobs_of_the_same_policy_equals_plain_step():
    queries, responses, scores = rollouts(4)
    responses[2] = torch.tensor([5, EOS, 9, 9])  # tokens after EOS must be masked in the given log-probs too
    config = PPOConfig(batch_size=4, mini_batch_size=2, ppo_epochs=2, learning_rate=1e-2)
    plain = PPOTrainer(config, small_vocab_model(), None, SMALL_TOKENIZER)
    given = PPOTrainer(config, small_vocab_model(), None, SMALL_TOKENIZER)
    behaviour = given.behaviour_logprobs(queries, responses)
    assert [len(lp) for lp in behaviour] == [len(r) for r in responses]
    assert behaviour[2][2:].abs().sum() == 0 and (behaviour[2][:2] < 0).all()  # after EOS: masked
    stats_plain = plain.step(queries, responses, scores)
    stats_given = given.step(queries, responses, scores, old_logprobs=behaviour)
    assert stats_given["ppo/policy/staleness_kl"] == pytest.approx(0.0, abs=1e-5)
    for key in stats_plain:
        if not key.startswith("time/"):
            assert stats_given[key] == pytest.approx(stats_plain[key], rel=1e-4, abs=1e-6), key
    assert all(torch.allclose(p, given.model.state_dict()[n], atol=1e-6)
               for n, p in plain.model.state_dict().items())


def test_step_ratio_uses_the_behaviour_policy_logprobs():
    queries, responses, scores = rollouts(4, seed=3)
    # Before any update, a single mini-batch has ratio exactly 1 against the current policy...
    baseline = _single_minibatch_trainer().step(queries, responses, scores)
    assert baseline["ppo/policy/approxkl"] == pytest.approx(0.0, abs=1e-7)
    assert baseline["ppo/policy/ratio"] == pytest.approx(1.0, abs=1e-6)
    # ...but not against a perturbed policy that sampled the batch (a stale batch).
    behaviour_trainer = _single_minibatch_trainer()
    with torch.no_grad():
        for p in behaviour_trainer.model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    stale = behaviour_trainer.behaviour_logprobs(queries, responses)
    trainer = _single_minibatch_trainer()
    current = trainer.behaviour_logprobs(queries, responses)
    stats = trainer.step(queries, responses, scores, old_logprobs=stale)
    # approxkl of the first (only) mini-batch = 0.5 * mean over real tokens of (log p_now - log p_behaviour)^2
    expected = 0.5 * torch.cat([(c - s).square() for c, s in zip(current, stale)]).mean()
    assert float(expected) > 1e-3
    assert stats["ppo/policy/approxkl"] == pytest.approx(float(expected), rel=1e-4)
    # policykl (TRL 0.11's early-stopping statistic) = mean over real tokens of log p_behaviour - log p_now
    expected_policykl = torch.cat([s - c for c, s in zip(current, stale)]).mean()
    assert stats["ppo/policy/policykl"] == pytest.approx(float(expected_policykl), rel=1e-4, abs=1e-6)
    assert stats["ppo/policy/ratio"] != pytest.approx(1.0, abs=1e-3)
    # staleness_kl: the mean over rollouts of the sequence sum of log p_now - log p_behaviour
    expected_staleness = sum(float((c - s).sum()) for c, s in zip(current, stale)) / 4
    assert stats["ppo/policy/staleness_kl"] == pytest.approx(expected_staleness, rel=1e-4)


def test_step_rejects_old_logprobs_of_the_wrong_shape():
    queries, responses, scores = rollouts(4)
    trainer = _single_minibatch_trainer()
    wrong = [torch.zeros(len(r) + 1) for r in responses]
    with pytest.raises(ValueError, match="old_logprobs\\[0\\]"):
        trainer.step(queries, responses, scores, old_logprobs=wrong)


def test_minibatch_drops_shared_left_padding_and_keeps_every_logprob():
    model = small_vocab_model()
    trainer = PPOTrainer(PPOConfig(batch_size=4, mini_batch_size=2), model, None, SMALL_TOKENIZER)
    queries = [torch.tensor([3, 4]), torch.tensor([5, 6, 7]), torch.tensor([1, 2, 3, 4, 5, 6, 7, 8]), torch.tensor([9])]
    responses = [torch.tensor([2, 3, 4]), torch.tensor([5, 6]), torch.tensor([7]), torch.tensor([8, 9, 10])]
    batch = trainer._layout(queries, responses, None)  # queries left padded to 8
    mb = batch.select(torch.tensor([0, 1]))  # the longest of these two queries has 3 tokens
    assert mb.input_ids.shape[1] == 3 + batch.response_length
    assert torch.equal(mb.input_ids[:, -batch.response_length:], batch.input_ids[:2, -batch.response_length:])
    with torch.no_grad():
        trimmed = trainer._forward(trainer.model, mb)[0] * mb.mask
        untrimmed_rows = Rollouts(batch.input_ids[:2], batch.attention_mask[:2], batch.position_ids[:2], batch.mask[:2],
                                  batch.response_length)
        full = trainer._forward(trainer.model, untrimmed_rows)[0] * mb.mask
    torch.testing.assert_close(trimmed, full, atol=1e-6, rtol=1e-5)


def test_rloo_learns_a_toy_reward_without_training_the_value_head():
    # The toy reward of the test above, with 4 answers per query and RLOO's leave-one-out baseline.
    config = PPOConfig(batch_size=8, mini_batch_size=4, learning_rate=3e-2, init_kl_coef=0.0, adap_kl_ctrl=False,
                       advantage_estimator="rloo")
    trainer = PPOTrainer(config, small_vocab_model(), None, SMALL_TOKENIZER)
    before = snapshot(trainer.model)
    g = torch.Generator().manual_seed(0)
    means = []
    for _ in range(10):
        prompts = [torch.randint(1, 16, (3,), generator=g) for _ in range(2)]
        queries = [q for q in prompts for _ in range(4)]  # 2 groups of 4 equal queries
        responses = trainer.generate(queries, return_prompt=False, max_new_tokens=6)
        scores = [(r == 5).float().mean() for r in responses]
        with pytest.warns(UserWarning) if len({float(s) for s in scores}) == 1 else _no_warning():
            means.append(trainer.step(queries, responses, scores)["ppo/mean_scores"])
    first, last = sum(means[:2]) / 2, sum(means[-3:]) / 3
    assert last > 0.3 and last > 3 * first, means
    moved = changed(before, trainer.model)
    assert "pretrained_model.model.layers.0.self_attn.q_proj.weight" in moved
    assert not any(name.startswith("v_head") for name in moved)  # no critic: its loss is left out


def test_rloo_advantages_in_step_come_from_the_other_answers_to_the_same_query(monkeypatch):
    # Two groups; within each, the answer with the higher score must get the positive advantage, whatever
    # the other group's scores are (a group-free baseline would make all of group B's advantages positive).
    import rlhf.ppo as ppo

    seen = {}
    real = ppo.rloo_advantages
    monkeypatch.setattr(ppo, "rloo_advantages", lambda r, g: seen.setdefault("adv", real(r, g)))
    config = PPOConfig(batch_size=4, mini_batch_size=4, learning_rate=1e-3, init_kl_coef=0.0, adap_kl_ctrl=False,
                       advantage_estimator="rloo", ppo_epochs=1)
    trainer = PPOTrainer(config, small_vocab_model(), None, SMALL_TOKENIZER)
    qa, qb = torch.tensor([3, 4]), torch.tensor([5, 6, 7])
    responses = [torch.tensor([2, 3]), torch.tensor([4, 5]), torch.tensor([6, 7]), torch.tensor([8, 9])]
    trainer.step([qa, qb, qa, qb], responses, [torch.tensor(s) for s in (0.0, 10.0, 1.0, 12.0)])
    # Group A: 0 vs 1 -> -1, +1; group B: 10 vs 12 -> -2, +2 (KL is 0 at step one).
    assert seen["adv"].tolist() == pytest.approx([-1.0, -2.0, 1.0, 2.0], abs=1e-4)


def test_rloo_without_repeated_queries_compares_with_the_rest_of_the_batch():
    # TRL-style loops pass one answer per query: RLOO then takes the batch's other answers as the baseline.
    config = PPOConfig(batch_size=4, mini_batch_size=2, learning_rate=1e-3, init_kl_coef=0.0, adap_kl_ctrl=False,
                       advantage_estimator="rloo", ppo_epochs=1, bf16=False)
    trainer = PPOTrainer(config, small_vocab_model(), None, SMALL_TOKENIZER)
    stats = trainer.step(*rollouts(4))
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
    with pytest.raises(ValueError, match="advantage_estimator"):
        PPOConfig(advantage_estimator="grpo")


@pytest.mark.parametrize("tracker, install", [("wandb", "wandb"), ("mlflow", "mlflow-skinny"), ("trackio", "trackio")])
def test_log_with_a_missing_tracker_fails_at_the_trainer_naming_the_package(tracker, install, monkeypatch):
    config = PPOConfig(batch_size=4, mini_batch_size=2, log_with=tracker)  # a config alone never fails
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == tracker else find_spec(name, *a))
    with pytest.raises(ImportError, match=f"log_with='{tracker}' needs the {tracker} package: pip install {install}"):
        PPOTrainer(config, small_vocab_model(), None, SMALL_TOKENIZER)
