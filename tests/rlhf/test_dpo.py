"""DPOTrainer on a tiny random Llama: masking, caching the reference, learning, LoRA, saving, resume."""
from __future__ import annotations

import random

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from rlhf.data import PreferenceCollator, tokenize_preference_causal
from rlhf.dpo import DPOConfig, DPOTrainer, completion_logps
from rlhf.peft_utils import merge_and_save

from param_checks import assert_trained, snapshot

SUBJECTS = ["The film", "This movie", "The plot", "The actor", "The script", "The ending", "The score", "The cast"]
VERBS = ["was", "felt", "seemed", "looked"]


def toy_pairs(n: int, seed: int) -> Dataset:
    """Separable preferences: the chosen answer always ends in ' great', the rejected one in ' awful'."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        prompt = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)}"
        body = rng.choice(["truly", "quite", "simply", "rather"])
        rows.append({"prompt": prompt, "chosen": f" {body} great", "rejected": f" {body} awful"})
    return Dataset.from_list(rows)


def config(tmp_path, **overrides) -> DPOConfig:
    defaults = dict(
        output_dir=str(tmp_path / "out"), learning_rate=5e-3, per_device_train_batch_size=8, per_device_eval_batch_size=8,
        num_train_epochs=2, logging_steps=1, save_strategy="no", disable_tqdm=True, seed=0, beta=0.1,
    )
    return DPOConfig(**{**defaults, **overrides})


def test_tokenize_and_collate_mask_prompt_and_padding(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    row = tokenize_preference_causal({"prompt": "The film was", "chosen": " great", "rejected": " truly awful"}, tokenizer, 64, 32)
    eos = tokenizer.eos_token_id
    assert row["chosen_input_ids"][-1] == eos and row["rejected_input_ids"][-1] == eos
    assert tokenizer.decode(row["chosen_input_ids"][:-1]) == " great"
    batch = PreferenceCollator(tokenizer.pad_token_id)([row, row])
    n_prompt, n_chosen, n_rejected = len(row["prompt_input_ids"]), len(row["chosen_input_ids"]), len(row["rejected_input_ids"])
    assert batch["input_ids"].shape == (4, n_prompt + n_rejected)  # [chosen, chosen; rejected, rejected]
    # chosen rows: prompt masked, completion counted, padding masked
    assert batch["completion_mask"][0].tolist() == [0] * n_prompt + [1] * n_chosen + [0] * (n_rejected - n_chosen)
    assert batch["attention_mask"][0].sum().item() == n_prompt + n_chosen
    assert batch["completion_mask"][2].tolist() == [0] * n_prompt + [1] * n_rejected


def test_conversational_rows_use_the_chat_template(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    row = {
        "prompt": [{"role": "user", "content": "Rate the film."}],
        "chosen": [{"role": "assistant", "content": "Great."}],
        "rejected": [{"role": "assistant", "content": "Awful."}],
    }
    out = tokenize_preference_causal(row, tokenizer, 128, 64)
    assert tokenizer.decode(out["prompt_input_ids"]).endswith("<|im_start|>user\nRate the film.<|im_end|>\n<|im_start|>assistant\n")
    # the template closes the turn itself, so no extra EOS is appended
    assert tokenizer.decode(out["chosen_input_ids"]) == "Great.<|im_end|>\n"


def test_completion_logps_sum_completion_tokens_only_and_ignore_padding(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    rows = [
        tokenize_preference_causal({"prompt": "Hi", "chosen": " a", "rejected": " b c d e f"}, tokenizer, 64, 32),
        tokenize_preference_causal({"prompt": "A much longer prompt here", "chosen": " yes", "rejected": " no"}, tokenizer, 64, 32),
    ]
    collate = PreferenceCollator(tokenizer.pad_token_id)
    with torch.no_grad():
        batched = completion_logps(model, collate(rows))  # (4,): [c0, c1, r0, r1], padded
        alone = torch.cat([completion_logps(model, collate([r])) for r in rows])  # [c0, r0, c1, r1], no padding
        # by hand for the first chosen: sum over completion positions of log softmax(logits[t-1])[token t]
        ids = torch.tensor([rows[0]["prompt_input_ids"] + rows[0]["chosen_input_ids"]])
        logp = torch.log_softmax(model(ids).logits[0].float(), -1)
        n_prompt = len(rows[0]["prompt_input_ids"])
        by_hand = sum(logp[t - 1, ids[0, t]] for t in range(n_prompt, ids.shape[1]))
    assert torch.allclose(batched, alone[[0, 2, 1, 3]], atol=1e-5)
    assert batched[0].item() == pytest.approx(by_hand.item(), abs=1e-4)


@pytest.mark.parametrize("attention", ["lean_eager", "eager", "sdpa"])
def test_shared_prompt_forward_gives_the_padded_rows_numbers_and_gradients(tiny_model_dir, attention):
    # One sequence per pair (prompt + chosen + rejected, rejected blind to chosen) against one row per
    # completion: same log-probs and same gradients, with uneven prompts and completions in the batch.
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation=attention)
    rows = [
        tokenize_preference_causal({"prompt": "Hi", "chosen": " a", "rejected": " b c d e f"}, tokenizer, 64, 32),
        tokenize_preference_causal({"prompt": "A much longer prompt here", "chosen": " yes it is", "rejected": " no"}, tokenizer, 64, 32),
    ]
    batch = PreferenceCollator(tokenizer.pad_token_id)(rows)
    grads = []
    for share in (False, True):
        logps = completion_logps(model, batch, share_prompt=share)
        (logps * torch.tensor([1.0, 2.0, -1.0, 0.5])).sum().backward()
        grads.append((logps.detach(), [p.grad.clone() for p in model.parameters()]))
        model.zero_grad()
    (padded, padded_grads), (shared, shared_grads) = grads
    assert torch.allclose(shared, padded, atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(padded_grads, shared_grads))


def test_shared_prompt_forward_under_gradient_checkpointing_gives_the_same_gradients(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, attn_implementation="eager").train()
    rows = [tokenize_preference_causal({"prompt": "The film was", "chosen": " great", "rejected": " not good"}, tokenizer, 64, 32)]
    batch = PreferenceCollator(tokenizer.pad_token_id)(rows)
    grads = []
    for checkpointing in (False, True):
        if checkpointing:
            model.gradient_checkpointing_enable()
        completion_logps(model, batch).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        model.zero_grad()
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*grads))


def test_shared_prompt_forward_falls_back_when_a_pair_does_not_share_its_prompt(tiny_model_dir):
    from rlhf.logps import shared_prompt_layout

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    row = tokenize_preference_causal({"prompt": "Hi there", "chosen": " a", "rejected": " b"}, tokenizer, 64, 32)
    batch = PreferenceCollator(tokenizer.pad_token_id)([row])
    assert shared_prompt_layout(batch) is not None
    batch["input_ids"][1, 0] += 1  # the rejected row's prompt differs
    assert shared_prompt_layout(batch) is None


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "hinge"])
def test_dpo_learns_separable_pairs_and_reference_stays_fixed(tiny_model_dir, tmp_path, loss_type):
    trainer = DPOTrainer(
        str(tiny_model_dir), args=config(tmp_path, loss_type=loss_type, num_train_epochs=1, learning_rate=1e-2),
        train_dataset=toy_pairs(32, seed=0), eval_dataset=toy_pairs(16, seed=1),
    )
    assert trainer.ref_model is None  # precomputed: the untrained policy ran over both datasets, no copy kept
    cached = [list(ds["ref_chosen_logps"]) for ds in (trainer.train_dataset, trainer.eval_dataset)]
    before = snapshot(trainer.model)
    start = trainer.evaluate()
    trainer.train()
    end = trainer.evaluate()
    # at the start policy == reference: every implicit reward is 0, so no pair is "won" and no margin
    assert start["eval_rewards/accuracies"] == 0.0 and start["eval_rewards/margins"] == pytest.approx(0.0, abs=1e-6)
    assert end["eval_rewards/accuracies"] >= 0.9
    assert end["eval_rewards/margins"] > 0.05
    assert end["eval_loss"] < start["eval_loss"]
    assert_trained(before, trainer.model)
    assert [list(ds["ref_chosen_logps"]) for ds in (trainer.train_dataset, trainer.eval_dataset)] == cached


def test_a_trl_1x_list_of_losses_with_weights_trains(tiny_model_dir, tmp_path):
    # TRL 1.x: loss_type is a list combined with loss_weights (here the MPO-style DPO + NLL mix); label_smoothing
    # goes to the robust loss.
    args = config(tmp_path, loss_type=["robust", "sft"], loss_weights=[1.0, 0.1], label_smoothing=0.1,
                  num_train_epochs=1, learning_rate=1e-2)
    trainer = DPOTrainer(str(tiny_model_dir), args=args, train_dataset=toy_pairs(32, seed=0), eval_dataset=toy_pairs(16, seed=1))
    before = snapshot(trainer.model)
    start = trainer.evaluate()
    trainer.train()
    end = trainer.evaluate()
    assert end["eval_rewards/accuracies"] >= 0.9 and end["eval_loss"] < start["eval_loss"]
    assert_trained(before, trainer.model)
    assert config(tmp_path, loss_type=["sigmoid"]).loss_type == ["sigmoid"]


def test_ld_alpha_weights_the_longer_completions_tail(tiny_model_dir, tmp_path):
    from rlhf.dpo_losses import ld_token_weights

    rows = [{"prompt": "The film was", "chosen": " great", "rejected": " truly awful, a waste of an evening"},
            {"prompt": "The plot felt", "chosen": " clever and tight from start to end", "rejected": " thin"}] * 4
    trainer = DPOTrainer(str(tiny_model_dir), args=config(tmp_path, max_steps=1, ld_alpha=0.5),
                         train_dataset=Dataset.from_list(rows))
    batch = next(iter(trainer.get_train_dataloader()))
    model = trainer.model.eval()
    with torch.no_grad():
        plain = completion_logps(model, batch, share_prompt=False)
        # LD-DPO: shared length counted fully, the tail at 0.5 (per-token log-probs summed by hand)
        full = completion_logps(model, batch, share_prompt=False, token_weights=batch["completion_mask"].float())
        weighted = completion_logps(model, batch, token_weights=ld_token_weights(batch["completion_mask"], 0.5))
        tail_only = completion_logps(model, batch, share_prompt=False,
                                     token_weights=batch["completion_mask"] - ld_token_weights(batch["completion_mask"], 0.0))
    torch.testing.assert_close(full, plain)
    torch.testing.assert_close(weighted, plain - 0.5 * tail_only)
    tail_chosen, tail_rejected = tail_only.chunk(2)
    assert ((tail_chosen != 0) ^ (tail_rejected != 0)).all()  # in each pair the longer completion alone has a tail
    # the trainer's cached reference log-probs use the same weights (policy == reference before training)
    chosen, _ = weighted.chunk(2)  # the batch is the whole (shuffled) dataset
    assert sorted(trainer.train_dataset["ref_chosen_logps"]) == pytest.approx(sorted(chosen.tolist()), abs=1e-4)
    trainer.train()


def test_live_reference_is_a_frozen_copy(tiny_model_dir, tmp_path):
    trainer = DPOTrainer(str(tiny_model_dir), args=config(tmp_path, num_train_epochs=1, learning_rate=1e-2, precompute_ref_log_probs=False),
                         train_dataset=toy_pairs(16, seed=0))
    before, ref_before = snapshot(trainer.model), snapshot(trainer.ref_model)
    trainer.train()
    assert_trained(before, trainer.model)
    assert all(torch.equal(ref_before[k], v) for k, v in snapshot(trainer.ref_model).items())


def test_without_a_kept_reference_a_new_eval_dataset_is_refused(tiny_model_dir, tmp_path):
    trainer = DPOTrainer(str(tiny_model_dir), args=config(tmp_path, max_steps=1), train_dataset=toy_pairs(8, seed=0))
    with pytest.raises(ValueError, match="no reference model is kept"):
        trainer.evaluate(trainer.train_dataset.remove_columns(["ref_chosen_logps", "ref_rejected_logps"]))


def test_precomputed_reference_matches_live_reference(tiny_model_dir, tmp_path):
    data = toy_pairs(16, seed=0)
    cached = DPOTrainer(str(tiny_model_dir), args=config(tmp_path, num_train_epochs=1), train_dataset=data)
    live = DPOTrainer(str(tiny_model_dir), args=config(tmp_path, num_train_epochs=1, precompute_ref_log_probs=False), train_dataset=data)
    columns = cached.add_reference_logps(cached.train_dataset)
    batch = {k: v for k, v in cached.data_collator([columns[i] for i in range(4)]).items()}
    ref_chosen, ref_rejected = live.reference_logps(batch)
    assert torch.allclose(batch["ref_chosen_logps"], ref_chosen, atol=1e-5)
    assert torch.allclose(batch["ref_rejected_logps"], ref_rejected, atol=1e-5)
    cached.train()
    live.train()
    # same data order (seed 0) and same reference numbers: the same trained weights
    for (name, a), (_, b) in zip(cached.model.named_parameters(), live.model.named_parameters()):
        assert torch.allclose(a, b, atol=1e-5), name


def test_lora_uses_adapter_disabled_reference_and_merges(tiny_model_dir, tmp_path):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = DPOTrainer(
        str(tiny_model_dir), args=config(tmp_path, learning_rate=2e-2), train_dataset=toy_pairs(32, seed=0),
        eval_dataset=toy_pairs(16, seed=1), peft_config=lora,
    )
    assert trainer.ref_model is None  # no second copy: the reference is the model without its adapter
    before = snapshot(trainer.model)
    trainer.train()
    after = snapshot(trainer.model)
    assert {k for k in before if not torch.equal(before[k], after[k])} <= {k for k in before if "lora_" in k}
    assert_trained(before, trainer.model)  # every adapter weight moved; the base weights (the reference) did not
    assert trainer.evaluate()["eval_rewards/margins"] > 0

    trainer.save_model(str(tmp_path / "adapter"))
    assert (tmp_path / "adapter" / "adapter_model.safetensors").exists()
    ids = torch.tensor([[1, 2, 3, 4]])
    trainer.model.eval()
    with torch.no_grad():
        expected = trainer.model(ids).logits
    merge_and_save(tmp_path / "adapter", tmp_path / "merged")
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    assert not (tmp_path / "merged" / "adapter_config.json").exists()
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, expected, atol=1e-4)


def test_full_model_save_load_round_trip(tiny_model_dir, tmp_path):
    trainer = DPOTrainer(str(tiny_model_dir), args=config(tmp_path, max_steps=2), train_dataset=toy_pairs(16, seed=0))
    trainer.train()
    trainer.save_model(str(tmp_path / "saved"))
    assert (tmp_path / "saved" / "model.safetensors").exists()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved").eval()
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, trainer.model.eval()(ids).logits, atol=1e-5)
    assert AutoTokenizer.from_pretrained(tmp_path / "saved").eos_token == "<|im_end|>"


class Recorder(TrainerCallback):
    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs or {}))


def test_callbacks_see_metrics_and_resume_matches_uninterrupted_run(tiny_model_dir, tmp_path):
    data = toy_pairs(32, seed=0)
    recorder = Recorder()
    args = dict(max_steps=4, per_device_train_batch_size=4, save_strategy="steps", save_steps=2)
    full = DPOTrainer(str(tiny_model_dir), args=config(tmp_path / "a", **args), train_dataset=data, callbacks=[recorder])
    full.train()
    step_logs = [log for log in recorder.logs if "loss" in log]
    assert len(step_logs) == 4 and all("rewards/accuracies" in log and "logps/chosen" in log for log in step_logs)

    # A run stopped after checkpoint-2 and resumed from it ends where the uninterrupted run did.
    resumed = DPOTrainer(str(tiny_model_dir), args=config(tmp_path / "b", **args), train_dataset=data)
    resumed.train(resume_from_checkpoint=str(tmp_path / "a" / "out" / "checkpoint-2"))
    assert resumed.state.global_step == 4
    for (name, a), (_, b) in zip(full.model.named_parameters(), resumed.model.named_parameters()):
        assert torch.allclose(a, b, atol=1e-5), name


def test_bf16_autocast_on_cpu(tiny_model_dir, tmp_path):
    trainer = DPOTrainer(str(tiny_model_dir), args=config(tmp_path, max_steps=1, bf16=True), train_dataset=toy_pairs(8, seed=0))
    dtypes = []
    trainer.model.lm_head.register_forward_hook(lambda module, inputs, output: dtypes.append(output.dtype))
    trainer.train()
    assert dtypes and set(dtypes) == {torch.bfloat16}
    assert next(trainer.model.parameters()).dtype == torch.float32  # weights stay fp32: autocast, not a cast


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="loss_type='kto'"):
        DPOConfig(output_dir="x", loss_type="kto")
    with pytest.raises(ValueError, match="beta=0"):
        DPOConfig(output_dir="x", beta=0)
    with pytest.raises(ValueError, match="loss_type='kto'"):
        DPOConfig(output_dir="x", loss_type=["sigmoid", "kto"])
    with pytest.raises(ValueError, match=r"loss_weights=\[1.0\]: needs one weight per loss_type entry \(2\)"):
        DPOConfig(output_dir="x", loss_type=["sigmoid", "sft"], loss_weights=[1.0])
    with pytest.raises(ValueError, match="label_smoothing=0.0: loss_type 'exo_pair' needs it > 0"):
        DPOConfig(output_dir="x", loss_type="exo_pair")
    with pytest.raises(ValueError, match="label_smoothing=0.1: only the sigmoid, exo_pair, robust, aot, aot_unpaired losses use it"):
        DPOConfig(output_dir="x", loss_type="hinge", label_smoothing=0.1)
    with pytest.raises(ValueError, match="use_weighting=True: TRL's WPO pair weighting is not implemented"):
        DPOConfig(output_dir="x", use_weighting=True)
    with pytest.raises(ValueError, match=r"ld_alpha=1.5: must be in \[0, 1\]"):
        DPOConfig(output_dir="x", ld_alpha=1.5)
    with pytest.raises(ValueError, match="f_divergence_type='js_divergence': only the sigmoid, sigmoid_norm"):
        DPOConfig(output_dir="x", loss_type="apo_zero", f_divergence_type="js_divergence")


def test_training_from_an_adapter_folder_starts_from_the_merged_model(tiny_model_dir, tmp_path):
    # e.g. DPO after a LoRA SFT run: the job runner passes the SFT adapter folder as the model.
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    sft = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir), LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    ).eval()
    sft.save_pretrained(tmp_path / "sft-adapter")
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(tmp_path / "sft-adapter")
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        sft_logits = sft(ids).logits

    trainer = DPOTrainer(str(tmp_path / "sft-adapter"), args=config(tmp_path, max_steps=2, precompute_ref_log_probs=False),
                         train_dataset=toy_pairs(16, seed=0))
    with torch.no_grad():
        # the reference is the SFT model (adapter merged), not the bare base
        assert torch.allclose(trainer.ref_model(ids).logits, sft_logits, atol=1e-4)
    before = snapshot(trainer.model)
    trainer.train()
    assert_trained(before, trainer.model)
