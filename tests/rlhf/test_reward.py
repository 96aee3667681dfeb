"""RewardTrainer and RewardScorer on tiny random models: an encoder without EOS and a decoder."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForSequenceClassification, AutoTokenizer, TrainerCallback

from rlhf.data import DataError, RewardCollator, tokenize_preference_reward
from rlhf.losses import pairwise_reward_loss
from rlhf.reward import RewardConfig, RewardScorer, RewardTrainer, read_score_stats

from param_checks import assert_trained, snapshot

NOUNS = ["film", "plot", "actor", "script", "movie", "scene", "ending", "cast"]


def toy_pairs(n: int, seed: int, margin: bool = False) -> Dataset:
    """Separable: the chosen answer contains 'good', the rejected one 'bad', otherwise the same words."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        noun, other = rng.choice(NOUNS), rng.choice(NOUNS)
        row = {"prompt": f"Tell me about the {noun}.", "chosen": f"The {other} is good.", "rejected": f"The {other} is bad."}
        if margin:
            row["margin"] = float(rng.choice([0.0, 1.0]))
        rows.append(row)
    return Dataset.from_list(rows)


def config(tmp_path, **overrides) -> RewardConfig:
    defaults = dict(
        output_dir=str(tmp_path / "out"), learning_rate=3e-3, per_device_train_batch_size=8, per_device_eval_batch_size=16,
        num_train_epochs=3, logging_steps=1, save_strategy="no", disable_tqdm=True, seed=0,
    )
    return RewardConfig(**{**defaults, **overrides})


def test_encoder_without_eos_reads_prompt_and_response_as_a_text_pair(tiny_encoder_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_encoder_dir)
    assert tokenizer.eos_token is None
    row = tokenize_preference_reward({"prompt": "Tell me.", "chosen": "Good.", "rejected": "Bad."}, tokenizer, 64)
    assert tokenizer.decode(row["input_ids_chosen"]) == "[CLS] tell me. [SEP] good. [SEP]"
    # [CLS] tell me . [SEP] is segment 0 (5 tokens), good . [SEP] segment 1 (3 tokens): BERT sees where the prompt ends
    assert row["token_type_ids_chosen"] == [0, 0, 0, 0, 0, 1, 1, 1]
    batch = RewardCollator(tokenizer.pad_token_id)([row, row])
    assert batch["input_ids"].shape[0] == 4 and set(batch) == {"input_ids", "attention_mask", "token_type_ids"}


@pytest.mark.parametrize("preferred", ["good", "bad"])
def test_reward_model_learns_separable_pairs_on_encoder(tiny_encoder_dir, tmp_path, preferred):
    # Both directions: a random init already ranks one of them right by a hair (margin ~1e-6),
    # so only learning can get both above 90%.
    def data(n, seed):
        rows = toy_pairs(n, seed)
        return rows if preferred == "good" else rows.rename_columns({"chosen": "rejected", "rejected": "chosen"})

    trainer = RewardTrainer(str(tiny_encoder_dir), args=config(tmp_path), train_dataset=data(64, 0), eval_dataset=data(32, 1))
    before = snapshot(trainer.model)
    start = trainer.evaluate()
    trainer.train()
    metrics = trainer.evaluate()
    assert metrics["eval_accuracy"] > 0.9
    assert metrics["eval_margin"] > 0.05 > abs(start["eval_margin"])
    assert metrics["eval_loss"] < start["eval_loss"]
    if preferred == "bad":
        return
    # -log sigmoid(r_chosen - r_rejected) is the same for any shift of both rewards: the head's bias gets no gradient.
    assert_trained(before, trainer.model, no_gradient=("classifier.bias",))

    # Saved with plain transformers; the scorer gives the trained model's scores for any (prompt, response).
    trainer.save_model(str(tmp_path / "rm"))
    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "rm").eval()
    scores = RewardScorer(tmp_path / "rm").score(["Tell me about the plot."] * 2, ["The cast is good.", "The cast is bad."])
    assert scores[0] > scores[1]
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "rm")
    with torch.no_grad():
        direct = loaded(**tokenizer("Tell me about the plot.", "The cast is good.", return_tensors="pt")).logits[0, 0]
    assert scores[0] == pytest.approx(direct.item(), abs=1e-5)

    # Beside the weights: the mean and std of the final model's scores over every training answer (chosen and
    # rejected), which PPO uses to standardise the scores.
    stats = read_score_stats(tmp_path / "rm")
    train = data(64, 0)
    all_scores = RewardScorer(tmp_path / "rm").score(list(train["prompt"]) * 2, list(train["chosen"]) + list(train["rejected"]))
    assert stats["count"] == 128
    assert stats["mean"] == pytest.approx(float(np.mean(all_scores)), abs=1e-4)
    assert stats["std"] == pytest.approx(float(np.std(all_scores)), abs=1e-4)
    # Checkpoints (the Trainer's internal saves) do not score the training set.
    trainer.save_model(str(tmp_path / "checkpoint"), _internal_call=True)
    assert read_score_stats(tmp_path / "checkpoint") is None


def test_compute_loss_uses_margin_and_one_forward_pass(tiny_encoder_dir, tmp_path):
    trainer = RewardTrainer(
        str(tiny_encoder_dir), args=config(tmp_path, center_rewards_coefficient=0.5), train_dataset=toy_pairs(4, seed=0, margin=True)
    )
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    assert batch["margin"].shape == (4,)
    calls = []
    hook = trainer.model.register_forward_hook(lambda module, inputs, output: calls.append(output.logits.shape))
    trainer.model.eval()
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, batch)
        hook.remove()
        rewards = trainer.model(**{k: v for k, v in batch.items() if k != "margin"}).logits.squeeze(-1)
    assert calls == [(8, 1)]  # [chosen; rejected] together
    expected = pairwise_reward_loss(rewards[:4], rewards[4:], batch["margin"], center_coef=0.5)
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)


def test_decoder_reward_model_pools_last_real_token(tiny_model_dir, tmp_path):
    trainer = RewardTrainer(str(tiny_model_dir), args=config(tmp_path, max_steps=2), train_dataset=toy_pairs(16, seed=0))
    assert trainer.model.config.pad_token_id == trainer.processing_class.pad_token_id
    trainer.train()
    trainer.save_model(str(tmp_path / "rm"))
    scorer = RewardScorer(tmp_path / "rm")
    short, long = ("Hi.", "Good."), ("Tell me about the plot in detail.", "The plot is good and the cast is good too.")
    alone = scorer.score([short[0]], [short[1]])[0]
    padded = scorer.score([short[0], long[0]], [short[1], long[1]])[0]  # right padded to the long one
    assert padded == pytest.approx(alone, abs=1e-5)


def test_lora_reward_model_saves_adapter_and_scores(tiny_encoder_dir, tmp_path):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"], task_type="SEQ_CLS")
    trainer = RewardTrainer(str(tiny_encoder_dir), args=config(tmp_path, max_steps=4), train_dataset=toy_pairs(32, seed=0), peft_config=lora)
    before = snapshot(trainer.model)
    trainer.train()
    after = snapshot(trainer.model)
    # the adapter and the new score head (modules_to_save) train; the backbone does not
    assert {k for k in before if not torch.equal(before[k], after[k])} <= {
        k for k in before if "lora_" in k or "classifier" in k}
    assert_trained(before, trainer.model, no_gradient=("classifier.modules_to_save.default.bias",))  # as above
    trainer.save_model(str(tmp_path / "adapter"))
    assert (tmp_path / "adapter" / "adapter_config.json").exists()
    prompts, responses = ["Tell me about the plot."] * 2, ["It is good.", "It is bad."]
    trainer.model.eval()
    tokenizer = trainer.processing_class
    with torch.no_grad():
        expected = [trainer.model(**tokenizer(p, r, return_tensors="pt")).logits[0, 0].item() for p, r in zip(prompts, responses)]
    assert RewardScorer(tmp_path / "adapter").score(prompts, responses) == pytest.approx(expected, abs=1e-5)


def test_conversational_rows_and_callbacks(tiny_encoder_dir, tmp_path):
    rows = Dataset.from_list(
        [
            {
                "prompt": [{"role": "user", "content": "Rate it."}],
                "chosen": [{"role": "assistant", "content": "It is good."}],
                "rejected": [{"role": "assistant", "content": "It is bad."}],
            }
        ]
        * 8
    )

    class Recorder(TrainerCallback):
        def __init__(self):
            self.logs = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.logs.append(dict(logs or {}))

    recorder = Recorder()
    trainer = RewardTrainer(str(tiny_encoder_dir), args=config(tmp_path, max_steps=2, per_device_train_batch_size=4), train_dataset=rows, callbacks=[recorder])
    assert trainer.processing_class.decode(trainer.train_dataset[0]["input_ids_chosen"]) == "[CLS] user : rate it. [SEP] it is good. [SEP]"
    trainer.train()
    assert any("accuracy" in log and "rewards/chosen" in log for log in recorder.logs)


@pytest.mark.parametrize(
    "rows, row, field",
    [
        ([{"prompt": "p", "chosen": "a", "rejected": "b"}, {"prompt": "p", "chosen": "", "rejected": "b"}], 1, "chosen"),
        ([{"prompt": "p", "chosen": "a", "rejected": "b", "margin": "big"}], 0, "margin"),
        ([{"prompt": "p", "chosen": "a", "rejected": [{"role": "assistant", "content": "b"}]}], 0, "chosen"),
        ([{"prompt": None, "chosen": "a", "rejected": "b"}], 0, "prompt"),
    ],
)
def test_bad_rows_name_row_and_field(tiny_encoder_dir, tmp_path, rows, row, field):
    with pytest.raises(DataError) as error:
        RewardTrainer(str(tiny_encoder_dir), args=config(tmp_path), train_dataset=Dataset.from_list(rows))
    assert (error.value.row, error.value.field) == (row, field)


def test_scorer_rejects_mismatched_lengths(tiny_encoder_dir):
    with pytest.raises(ValueError, match="2 prompts but 1 responses"):
        RewardScorer(tiny_encoder_dir).score(["a", "b"], ["c"])


def test_default_encoder_trains_a_step(tmp_path):
    # The bundled MiniLM (22M parameters) is a sentence-transformers folder: it must load as a one-output
    # classifier with a fresh head, and train.
    trainer = RewardTrainer("default-encoder", args=config(tmp_path, max_steps=1, per_device_train_batch_size=2), train_dataset=toy_pairs(2, seed=0))
    assert trainer.model.config.num_labels == 1 and trainer.processing_class.eos_token is None
    assert trainer.train().training_loss > 0


@pytest.mark.parametrize("disable", [True, False])
def test_dropout_is_off_by_default_as_in_trl(tiny_encoder_dir, tmp_path, disable):
    trainer = RewardTrainer(str(tiny_encoder_dir), args=config(tmp_path, disable_dropout=disable), train_dataset=toy_pairs(4, seed=0))
    rates = {m.p for m in trainer.model.modules() if isinstance(m, torch.nn.Dropout)}
    assert rates and (rates == {0.0}) == disable
