"""`rlhf-studio models merge NAME`: a registered LoRA adapter becomes a full model folder that plain transformers
loads, registered as a policy with the adapter's lineage; bad requests write nothing."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from labeler.cli import main
from labeler.services.serving import models
from labeler.errors import InputError


def make_adapter(tiny_model_dir, folder) -> torch.Tensor:
    """A LoRA adapter on the tiny model with non-zero weights, saved to `folder`; returns its logits on a probe."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(0))
    model.save_pretrained(folder)
    with torch.no_grad():
        return model(torch.tensor([[1, 2, 3, 4]])).logits


def test_merge_writes_a_plain_model_and_registers_it_with_the_adapters_lineage(db, db_path, tiny_model_dir, tmp_path, capsys):
    adapter_logits = make_adapter(tiny_model_dir, tmp_path / "run7" / "final")
    models.register_model(db, "tiny", str(tiny_model_dir), "base")
    models.register_model(db, "sft-lora", str(tmp_path / "run7" / "final"), "adapter", base_model="tiny",
                          config={"lr": 1e-3}, metrics={"loss": 0.5}, data_snapshot="sha256:abc")
    assert main(["models", "merge", "sft-lora", "--db", db_path]) == 0
    out = tmp_path / "run7" / "final-merged"
    assert capsys.readouterr().out.strip() == f"merged sft-lora into sft-lora-merged (policy): {out}"
    assert not (out / "adapter_config.json").exists() and (out / "tokenizer.json").exists()
    plain = AutoModelForCausalLM.from_pretrained(out)  # transformers alone: no adapter in the folder
    assert not hasattr(plain, "peft_config")
    with torch.no_grad():
        torch.testing.assert_close(plain(torch.tensor([[1, 2, 3, 4]])).logits, adapter_logits, atol=1e-5, rtol=1e-5)
    row = models.get_model(db, "sft-lora-merged")
    assert (row["kind"], row["base_model"], row["path"], row["metrics"], row["data_snapshot"]) == \
        ("policy", "tiny", str(out), {"loss": 0.5}, "sha256:abc")
    assert row["config"]["merged_from"] == "sft-lora" and row["config"]["lr"] == 1e-3
    assert 'model_name: "sft-lora-merged"' in (out / "README.md").read_text()  # the merge writes the card
    # a second merge of the same adapter: the name is taken
    with pytest.raises(InputError, match="'sft-lora-merged' is already registered"):
        models.merge_adapter_model(db, "sft-lora")


def test_merge_refuses_what_it_cannot_merge_and_writes_nothing(db, db_path, tiny_model_dir, tmp_path, capsys):
    models.register_model(db, "tiny-policy", str(tiny_model_dir), "policy")
    before = db["models"].count
    with pytest.raises(InputError, match="'tiny-policy' is a policy model, not a LoRA adapter: nothing to merge"):
        models.merge_adapter_model(db, "tiny-policy")
    make_adapter(tiny_model_dir, tmp_path / "a")
    models.register_model(db, "a", str(tmp_path / "a"), "adapter")
    (tmp_path / "taken").mkdir()
    with pytest.raises(InputError, match="taken: already exists; choose another folder with --out"):
        models.merge_adapter_model(db, "a", out_dir=str(tmp_path / "taken"))
    assert db["models"].count == before + 1 and not (tmp_path / "a-merged").exists()
    capsys.readouterr()  # the merges' loading bars
    assert main(["models", "merge", "nope", "--db", db_path]) == 2  # one line on stderr, no traceback
    assert capsys.readouterr().err.strip() == "rlhf-studio models: error: field 'model': no model named 'nope'; see `rlhf-studio models list`"
