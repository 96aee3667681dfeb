"""KTO: the loss and its KL reference point by hand, TRL's mismatched pairs, the config's TRL defaults, and the
trainer on a tiny model, run as TRL 1.16's docs write it with only the import changed."""
import math

import pytest
import torch

from rlhf.losses import kto_kl_estimate, kto_loss


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


def test_kto_loss_by_hand():
    policy = torch.tensor([-10.0, -13.0])
    ref = torch.tensor([-12.0, -12.0])  # log-ratios r = 2 (desirable), -1 (undesirable)
    labels = torch.tensor([True, False])
    losses, rewards = kto_loss(policy, ref, labels, kl=1.0, beta=0.5, desirable_weight=1.0, undesirable_weight=2.0)
    # desirable 1 - sigmoid(0.5 (2 - 1)) = 0.37754; undesirable 2 (1 - sigmoid(0.5 (1 - (-1)))) = 2 x 0.26894
    assert losses.tolist() == pytest.approx([1 - sigmoid(0.5), 2 * (1 - sigmoid(1.0))])
    assert rewards.tolist() == pytest.approx([1.0, -0.5])  # beta r
    losses, _ = kto_loss(policy, ref, labels, kl=1.0, beta=0.5, loss_type="apo_zero_unpaired")
    # APO-zero ignores the KL: 1 - sigmoid(0.5 x 2) and sigmoid(0.5 x -1)
    assert losses.tolist() == pytest.approx([1 - sigmoid(1.0), sigmoid(-0.5)])
    with pytest.raises(ValueError, match="loss_type='bco'"):
        kto_loss(policy, ref, labels, 0.0, 0.1, loss_type="bco")


def test_kl_reference_point_is_a_clamped_detached_mean():
    assert kto_kl_estimate(torch.tensor([-3.0, -3.0]), torch.tensor([-4.0, -5.0])).item() == pytest.approx(1.5)  # (1 + 2) / 2
    assert kto_kl_estimate(torch.tensor([-5.0]), torch.tensor([-4.0])).item() == 0.0  # -1 clamps to 0
    policy = torch.tensor([-3.0], requires_grad=True)
    assert not kto_kl_estimate(policy, torch.tensor([-4.0])).requires_grad


def test_mismatched_pairs_rotate_within_each_batch():
    from rlhf.kto import rotate_completions

    assert rotate_completions({"completion_ids": [[1], [2], [3]]}) == {"KL_completion_ids": [[3], [1], [2]]}


def test_config_defaults_and_errors():
    from rlhf.kto import KTOConfig

    config = KTOConfig(output_dir="unused", report_to="none")
    assert (config.beta, config.desirable_weight, config.undesirable_weight, config.loss_type, config.max_length,
            config.learning_rate, config.train_sampling_strategy) == (0.1, 1.0, 1.0, "kto", 1024, 1e-6, "sequential")
    with pytest.raises(ValueError, match="^activation_offloading=True: not supported here"):
        KTOConfig(output_dir="unused", activation_offloading=True)
    with pytest.raises(ValueError, match="^loss_type='sigmoid': must be one of kto, apo_zero_unpaired"):
        KTOConfig(output_dir="unused", loss_type="sigmoid")


def kto_rows():
    from datasets import Dataset

    return Dataset.from_dict({"prompt": ["A film:", "A play:", "A book:", "A song:"] * 2,
                              "completion": [" great", " bad", " fine fine", " awful"] * 2,
                              "label": [True, False, True, False] * 2})


@pytest.mark.parametrize("precompute", [False, True])
def test_trains_and_the_reference_does_not_move(tiny_model_dir, tmp_path, precompute):
    from rlhf import KTOConfig, KTOTrainer

    args = KTOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, max_steps=2, logging_steps=1,
                     learning_rate=1e-2, report_to="none", save_strategy="no", bf16=False,
                     precompute_ref_log_probs=precompute, undesirable_weight=1.5)
    trainer = KTOTrainer(str(tiny_model_dir), args=args, train_dataset=kto_rows())
    # the KL completions are the batch's completions rotated by one: rows 0-3 are one batch
    data = trainer.train_dataset
    assert data[0]["KL_completion_ids"] == data[3]["completion_ids"] and data[1]["KL_completion_ids"] == data[0]["completion_ids"]
    assert data[4]["KL_completion_ids"] == data[7]["completion_ids"]
    policy = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    reference = {n: p.detach().clone() for n, p in trainer.ref_model.named_parameters()} if trainer.ref_model else {}
    trainer.train()
    assert all(not torch.equal(policy[n], p) for n, p in trainer.model.named_parameters())
    assert (trainer.ref_model is None) == precompute
    if trainer.ref_model is not None:
        assert all(torch.equal(reference[n], p) for n, p in trainer.ref_model.named_parameters())
    logged = trainer.state.log_history[0]
    for name in ("loss", "kl", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected"):
        assert name in logged, name
    assert logged["kl"] >= 0


def test_paired_rows_are_unpaired_and_bad_rows_named():
    from datasets import Dataset

    from rlhf.data import DataError
    from rlhf.kto import unpaired_rows

    paired = Dataset.from_dict({"prompt": ["p"], "chosen": [" good"], "rejected": [" bad"]})
    assert unpaired_rows(paired).to_list() == [{"prompt": "p", "completion": " good", "label": True},
                                               {"prompt": "p", "completion": " bad", "label": False}]
    with pytest.raises(DataError, match="row 0, field 'label': must be true or false, got 'yes'"):
        unpaired_rows(Dataset.from_dict({"prompt": ["p"], "completion": ["a"], "label": ["yes"]}))
    with pytest.raises(DataError, match="KTO data needs columns prompt, completion, label"):
        unpaired_rows(Dataset.from_dict({"prompt": ["p"], "completion": ["a"]}))


def test_trl_quickstart_with_only_the_import_changed(tiny_model_dir, tmp_path, monkeypatch):
    """TRL 1.16's KTO quick start (docs: kto_trainer), `from trl` -> `from rlhf`; the hub model and kto-mix-14k are a
    local tiny model and conversational unpaired rows."""
    from datasets import Dataset

    monkeypatch.chdir(tmp_path)
    model_id = str(tiny_model_dir)
    train_dataset = Dataset.from_dict({
        "prompt": [[{"role": "user", "content": q}] for q in ["Name a film.", "Name a book.", "Name a song.", "Name a play."]],
        "completion": [[{"role": "assistant", "content": a}] for a in ["Alien", "no", "Yesterday", "I refuse"]],
        "label": [True, False, True, False],
    })
    # --- the script ---
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlhf import KTOConfig, KTOTrainer

    model = AutoModelForCausalLM.from_pretrained(model_id)
    tokenizer = AutoTokenizer.from_pretrained(model_id)
    training_args = KTOConfig(output_dir="Qwen2-0.5B-KTO", per_device_train_batch_size=2, max_steps=2, report_to="none")
    trainer = KTOTrainer(model=model, args=training_args, processing_class=tokenizer, train_dataset=train_dataset)
    trainer.train()
    # --- end ---
    assert trainer.state.global_step == 2
