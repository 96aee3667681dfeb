"""rlhf/base_trainer.py: every Trainer subclass here takes its plumbing (policy and tokenizer, pad token, reference
placement, the metric buffer) from BaseTrainer, and the buffer averages what compute_loss records, by hand."""
from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import Trainer, TrainingArguments

from rlhf.base_trainer import BaseTrainer, check_prompt_columns, for_each_dataset
from rlhf.dpo import DPOTrainer
from rlhf.grpo import GRPOTrainer
from rlhf.kto import KTOTrainer
from rlhf.reward import RewardTrainer
from rlhf.rloo import RLOOTrainer
from rlhf.sft import SFTTrainer

TRAINERS = [SFTTrainer, RewardTrainer, DPOTrainer, KTOTrainer, GRPOTrainer, RLOOTrainer]
RLHF = Path(__file__).resolve().parents[2] / "rlhf"
TRAINER_MODULES = ("sft", "reward", "dpo", "kto", "grpo", "rloo")
# The trainer modules that import another one, and why (everything else they share is in a module of its own).
SIBLING_IMPORTS = {
    ("rloo", "grpo"): "RLOOTrainer is GRPOTrainer with other advantages and loss",
    ("grpo", "reward"): "a reward model given by path is loaded as RewardTrainer saved it",
}


def test_every_trainer_takes_the_metric_buffer_from_the_one_base():
    assert all(issubclass(trainer, BaseTrainer) for trainer in TRAINERS)
    # Only the base says how metrics are averaged, logged and returned by evaluate.
    assert [t.__name__ for t in TRAINERS if "evaluate" in vars(t)] == []
    assert [t.__name__ for t in TRAINERS if "log" in vars(t)] == ["GRPOTrainer"]  # + printing completions only
    # RewardTrainer predicts its two scores per pair; SFT keeps Trainer's logits;
    # the others use the base's loss-only step.
    assert {t.__name__ for t in TRAINERS if "prediction_step" in vars(t)} == {"RewardTrainer", "SFTTrainer"}
    assert SFTTrainer.prediction_step is Trainer.prediction_step
    for name in TRAINER_MODULES:
        source = (RLHF / f"{name}.py").read_text()
        for copied in ("self._metrics =", "defaultdict(", "load_causal_lm(", "keep_freed_memory(", "prepare_reference("):
            assert copied not in source, f"rlhf/{name}.py: {copied} belongs in rlhf/base_trainer.py or trainer_setup.py"


def rlhf_imports(name: str) -> list[tuple[str, str]]:
    """(module, name) of every `from rlhf.x import y` in rlhf/<name>.py, function-level ones included."""
    tree = ast.parse((RLHF / f"{name}.py").read_text())
    return [(node.module, alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("rlhf.") for alias in node.names]


@pytest.mark.parametrize("name", TRAINER_MODULES)
def test_trainer_modules_share_through_public_names_not_through_each_other(name):
    imports = rlhf_imports(name)
    assert [f"{m}.{n}" for m, n in imports if n.startswith("_")] == []
    siblings = {m.split(".")[1] for m, _ in imports if m.split(".")[1] in TRAINER_MODULES}
    assert {(name, s) for s in siblings} <= set(SIBLING_IMPORTS)


def test_trl_only_and_completion_logps_keep_their_old_import_paths():
    from rlhf.dpo import completion_logps
    from rlhf.grpo import trl_only
    from rlhf.logps import completion_logps as shared_logps
    from rlhf.trainer_config import trl_only as shared_trl_only

    assert completion_logps is shared_logps and trl_only is shared_trl_only


class Averaging(BaseTrainer):
    """compute_loss records the mean of each batch's x; the loss is that mean (nothing to learn)."""

    _name = "Averaging"

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        x = inputs["x"].float()
        self._metrics[self._mode()]["x"].append(x.mean().item())
        return (model.weight * 0).sum() + x.mean()


def averaging_trainer(tmp_path, **kwargs) -> Averaging:
    torch.manual_seed(0)
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", per_device_train_batch_size=2,
                             per_device_eval_batch_size=2, logging_steps=2, max_steps=2, use_cpu=True,
                             remove_unused_columns=False, save_strategy="no", disable_tqdm=True)
    rows = [{"x": v} for v in (1.0, 2.0, 3.0, 6.0)]
    return Averaging(model=torch.nn.Linear(1, 1), args=args, train_dataset=rows, eval_dataset=rows,
                     data_collator=lambda batch: {"x": torch.tensor([r["x"] for r in batch])}, **kwargs)


def test_logged_metrics_are_the_means_of_the_recorded_steps(tmp_path):
    trainer = averaging_trainer(tmp_path)
    trainer.train()
    # Two batches of two rows out of {1, 2, 3, 6}: whatever the order, the batch means average to 12 / 4 = 3.
    logged = next(row for row in trainer.state.log_history if "loss" in row)
    assert logged["x"] == pytest.approx(3.0)
    assert trainer._metrics["train"] == {}  # the window was emptied by its log
    # Evaluation in order: batches (1, 2) and (3, 6) record 1.5 and 4.5; eval_x = (1.5 + 4.5) / 2 = 3.0.
    metrics = trainer.evaluate()
    assert metrics["eval_x"] == pytest.approx(3.0) and trainer.state.log_history[-1]["eval_x"] == pytest.approx(3.0)
    assert metrics["eval_loss"] == pytest.approx(3.0)  # the base's loss-only prediction step: mean of 1.5, 1.5, 4.5, 4.5


def test_a_trainer_can_keep_evaluate_to_trainers_own_dict(tmp_path, monkeypatch):
    monkeypatch.setattr(Averaging, "evaluate_returns_logged_metrics", False)  # KTO's and GRPO's setting
    trainer = averaging_trainer(tmp_path)
    metrics = trainer.evaluate()
    assert "eval_x" not in metrics and trainer.state.log_history[-1]["eval_x"] == pytest.approx(3.0)


def test_log_windows_and_averages_the_trainers_change():
    trainer = SimpleNamespace()
    # RewardTrainer folds its buffer only into the periodic train logs, not into the end-of-training summary.
    assert RewardTrainer._logs_take_metrics(trainer, {"loss": 0.5}) is True
    assert RewardTrainer._logs_take_metrics(trainer, {"train_runtime": 1.0}) is False
    assert BaseTrainer._logs_take_metrics(trainer, {"train_runtime": 1.0}) is True
    # GRPO leaves out NaN (a reward function that returned only None): (1 + 3) / 2 = 2; nothing left: None.
    nan = float("nan")
    assert GRPOTrainer._average([1.0, nan, 3.0]) == 2.0 and GRPOTrainer._average([nan]) is None
    assert BaseTrainer._average([1.0, 2.0]) == 1.5


@pytest.mark.parametrize("trainer, eos, expected", [
    (SFTTrainer, "</s>", "</s>"),
    (SFTTrainer, None, None),  # a causal LM without EOS gets no pad token here
    (RewardTrainer, None, "[SEP]"),  # encoders such as MiniLM: SEP when there is no EOS
    (RewardTrainer, "</s>", "</s>"),
])
def test_pad_token_from_the_tokenizers_own_tokens(trainer, eos, expected):
    tokenizer = SimpleNamespace(pad_token=None, eos_token=eos, sep_token="[SEP]")
    model = torch.nn.Linear(1, 1)
    args = SimpleNamespace(keep_freed_memory=False)
    assert trainer._policy_and_tokenizer(model, args, tokenizer, None) == (model, tokenizer)
    assert tokenizer.pad_token == expected


@pytest.mark.parametrize("trainer", TRAINERS)
def test_a_model_object_without_its_tokenizer_is_refused_by_name(trainer):
    name = trainer.__name__
    with pytest.raises(ValueError, match=f"^{name} needs processing_class \\(the tokenizer\\) when given a model object"):
        trainer._policy_and_tokenizer(torch.nn.Linear(1, 1), SimpleNamespace(keep_freed_memory=False), None, None)


# ---- the set-up steps the trainers share -------------------------------------------------------------------------
def test_one_preparation_for_a_dataset_or_each_of_a_dict():
    assert for_each_dataset(str.upper, "a") == "A"
    assert for_each_dataset(str.upper, {"x": "a", "y": "b"}) == {"x": "A", "y": "B"}


def test_the_reference_is_the_one_given_else_a_frozen_copy_else_none():
    args = SimpleNamespace(attn_implementation="model", device="cpu")  # "model": keep the model's own kernel
    torch.manual_seed(0)
    policy = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5)).train()
    assert BaseTrainer._reference_model(None, args) is None  # LoRA: the policy with its adapter off serves
    copy = BaseTrainer._reference_model(None, args, copy_of=policy)
    assert copy is not policy and torch.equal(copy[0].weight, policy[0].weight)
    assert not copy.training and not any(p.requires_grad for p in copy.parameters())
    assert policy.training and all(p.requires_grad for p in policy.parameters())  # the policy itself untouched
    given = torch.nn.Linear(2, 2)
    assert BaseTrainer._reference_model(given, args, copy_of=policy) is given and not given.weight.requires_grad


def test_a_dataset_without_prompts_is_refused_naming_its_split():
    from datasets import Dataset

    check_prompt_columns(train_dataset=Dataset.from_dict({"prompt": ["a"]}), eval_dataset=None)
    with pytest.raises(ValueError, match=r"^eval_dataset: needs a 'prompt' column \(columns: \['text'\]\)$"):
        check_prompt_columns(train_dataset=None, eval_dataset=Dataset.from_dict({"text": ["a"]}))


def test_generated_rows_are_cut_after_their_first_end_of_answer():
    trainer = BaseTrainer.__new__(BaseTrainer)  # only eos_ids is read
    trainer.eos_ids = [2, 9]
    rows = torch.tensor([[5, 2, 7, 2], [5, 6, 7, 8], [9, 0, 0, 0]])
    assert [r.tolist() for r in trainer._cut_after_eos(rows)] == [[5, 2], [5, 6, 7, 8], [9]]
