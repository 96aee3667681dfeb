"""The seeds' example end to end on the real default model: TRL's sentiment PPO, shrunk.

Movie-review openings (labeler/data/movie_prompts.txt) are continued by SmolLM2-135M; the reward is
VADER's compound sentiment of opening + continuation, so PPO pushes towards positive reviews.
"""
import math
from pathlib import Path

import pytest
import torch

PROMPTS = Path(__file__).resolve().parents[2] / "labeler" / "data" / "movie_prompts.txt"


@pytest.mark.slow
def test_sentiment_ppo_on_the_default_model(default_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    from rlhf import AutoModelForCausalLMWithValueHead, LengthSampler, PPOConfig, PPOTrainer
    from rlhf.loading import load_tokenizer

    tokenizer = load_tokenizer(default_model_dir)
    model = AutoModelForCausalLMWithValueHead.from_pretrained(default_model_dir)
    config = PPOConfig(batch_size=4, mini_batch_size=2, ppo_epochs=2, learning_rate=1.41e-5, bf16=True,
                       log_dir=str(tmp_path / "logs"))
    dataset = [{"query": line, "input_ids": tokenizer(line, return_tensors="pt").input_ids[0]}
               for line in PROMPTS.read_text().splitlines()[:8]]
    trainer = PPOTrainer(config, model, None, tokenizer, dataset=dataset)
    vader = SentimentIntensityAnalyzer()
    lengths = LengthSampler(4, 9, torch.Generator().manual_seed(0))
    reference_before = {n: p.clone() for n, p in trainer.ref_model.named_parameters()}

    for step, batch in enumerate(trainer.dataloader):
        responses = trainer.generate(batch["input_ids"], return_prompt=False, length_sampler=lengths)
        batch["response"] = tokenizer.batch_decode(responses, skip_special_tokens=True)
        rewards = [torch.tensor(vader.polarity_scores(q + r)["compound"]) for q, r in zip(batch["query"], batch["response"])]
        stats = trainer.step(batch["input_ids"], responses, rewards)
        trainer.log_stats(stats, batch, rewards)
        assert all(math.isfinite(v) for v in stats.values()), stats
        if step == 0:
            assert stats["objective/kl"] == pytest.approx(0.0, abs=1e-4)
    assert trainer.current_step == 2
    assert all(torch.equal(p, reference_before[n]) for n, p in trainer.ref_model.named_parameters())
    assert len((tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()) == 2

    trainer.unwrapped_model.save_pretrained(tmp_path / "policy")
    tokenizer.save_pretrained(tmp_path / "policy")
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "policy")
    ids = tokenizer("I loved it", return_tensors="pt").input_ids
    with torch.no_grad():
        expected = trainer.unwrapped_model(input_ids=ids)[0]
        assert torch.allclose(plain(input_ids=ids).logits, expected, atol=1e-4)
    again = AutoModelForCausalLMWithValueHead.from_pretrained(tmp_path / "policy")
    assert torch.equal(again.v_head.summary.weight, trainer.unwrapped_model.v_head.summary.weight)
