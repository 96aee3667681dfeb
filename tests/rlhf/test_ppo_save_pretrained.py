"""PPOTrainer.save_pretrained (TRL 0.11): policy + value head + tokenizer + model card, and model cards themselves.

Uses the tiny TRL-made model in tests/fixtures/trl_0_11_4 (vocab 64, its own tokenizer): a step takes well under
a second.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from rlhf.cards import dataset_card, hub_base_model, model_card, table
from rlhf.configs import PPOConfig
from rlhf.model import AutoModelForCausalLMWithValueHead
from rlhf.ppo import PPOTrainer

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "trl_0_11_4" / "policy"
IDS = torch.tensor([[1, 5, 9, 13, 17, 21]])


def _front_matter(text: str) -> dict:
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def _trainer(peft_config=None) -> PPOTrainer:
    from transformers import AutoTokenizer

    model = AutoModelForCausalLMWithValueHead.from_pretrained(FIXTURE, peft_config=peft_config)
    config = PPOConfig(batch_size=2, mini_batch_size=2, ppo_epochs=1, learning_rate=1e-2, advantage_estimator="gae",
                       bf16=False, keep_freed_memory=False)
    trainer = PPOTrainer(config, model, tokenizer=AutoTokenizer.from_pretrained(FIXTURE))
    trainer.step([torch.tensor([1, 10, 11]), torch.tensor([1, 20])], [torch.tensor([7, 8, 2]), torch.tensor([9, 2])],
                 [torch.tensor(1.0), torch.tensor(-1.0)])
    return trainer


def _outputs(model) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        logits, _, values = model.eval()(input_ids=IDS)
    return logits, values


def test_save_pretrained_writes_policy_value_head_tokenizer_and_card(tmp_path):
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer

    trainer = _trainer()
    out = tmp_path / "ppo-policy"
    assert trainer.save_pretrained(out) is None  # as TRL's (a URL only when it pushes)
    logits, values = _outputs(trainer.unwrapped_model)
    before_logits, before_values = _outputs(AutoModelForCausalLMWithValueHead.from_pretrained(FIXTURE))
    assert not torch.allclose(values, before_values)  # the step trained the head: a reload must bring it back

    again = AutoModelForCausalLMWithValueHead.from_pretrained(out)
    torch.testing.assert_close(_outputs(again), (logits, values))
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:  # TRL 0.11's layout too
        assert {"v_head.summary.weight", "v_head.summary.bias"} <= set(f.keys())
    with torch.no_grad():
        torch.testing.assert_close(AutoModelForCausalLM.from_pretrained(out)(input_ids=IDS).logits, logits)
    assert AutoTokenizer.from_pretrained(out)("t5 t9").input_ids == [5, 9]

    card = (out / "README.md").read_text()
    meta = _front_matter(card)
    assert meta["library_name"] == "transformers" and {"rlhf-studio", "trl", "ppo"} <= set(meta["tags"])
    assert "base_model" not in meta and f"starting from `{FIXTURE}`" in card  # a local folder is no Hub id
    assert "PPO with GAE advantages" in card
    assert "| steps | 1 |" in card and "| batch_size | 2 |" in card and "| learning_rate | 0.01 |" in card
    assert f"| ppo/loss/value | {trainer.last_stats['ppo/loss/value']:.6g} |" in card
    assert "time/ppo" not in card  # timings say nothing about the model


def test_save_pretrained_with_lora_writes_the_adapter_and_head(tmp_path):
    from peft import LoraConfig

    trainer = _trainer(LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    out = tmp_path / "lora"
    trainer.save_pretrained(out)
    assert (out / "adapter_model.safetensors").exists() and (out / "value_head.safetensors").exists()
    assert not (out / "model.safetensors").exists()
    again = AutoModelForCausalLMWithValueHead.from_pretrained(out)
    torch.testing.assert_close(_outputs(again), _outputs(trainer.unwrapped_model))
    assert (out / "README.md").exists()


def test_cards_escape_cells_and_keep_front_matter_valid():
    text = model_card("m", "DPO", base_model="org/a", datasets=['me/prefs: "quoted"'], settings={"beta": 0.1},
                      metrics={"loss": 0.123456789, "note": "a|b\nc"}, evaluation=[{"model": "m", "win_rate": 0.75}])
    meta = _front_matter(text)
    assert meta["base_model"] == "org/a" and meta["datasets"] == ['me/prefs: "quoted"']
    assert "| loss | 0.123457 |" in text and "| note | a\\|b c |" in text
    assert "| model | win_rate |\n|---|---|\n| m | 0.75 |" in text
    assert table([]) == "_none_\n"
    assert hub_base_model("default") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert hub_base_model("/tmp") is None and hub_base_model(str(FIXTURE)) is None
    assert hub_base_model(None) is None and hub_base_model("not an id") is None
    card = dataset_card("prefs", "Pairs.", {"prompt": "the prompt"}, {"train": 3, "test": 1},
                        sections={"Filters": {"min_annotators": 2}, "Notes": "free text", "Per annotator": [{"a": 1}]})
    assert "| train | 3 |" in card and "| min_annotators | 2 |" in card and "free text" in card
    assert "## Per annotator\n\n| a |" in card


# TRL 0.11.4's PPOTrainer (huggingface_hub's ModelHubMixin), read from the installed trl 0.11.4.
TRL_SIGNATURES = {
    "save_pretrained": ["self", "save_directory", "config", "repo_id", "push_to_hub", "model_card_kwargs",
                        "push_to_hub_kwargs"],
    "push_to_hub": ["self", "repo_id", "config", "commit_message", "private", "token", "branch", "create_pr",
                    "allow_patterns", "ignore_patterns", "delete_patterns", "model_card_kwargs"],
}


@pytest.mark.parametrize("name", sorted(TRL_SIGNATURES))
def test_trl_signature(name):
    import inspect

    assert list(inspect.signature(getattr(PPOTrainer, name)).parameters) == TRL_SIGNATURES[name]


def test_save_pretrained_push_to_hub_uploads_the_saved_folder(tmp_path, monkeypatch):
    """save_pretrained(..., push_to_hub=True) as in TRL: the folder is saved, the repository created, and the
    saved files go up in one upload_folder commit. A fake HfApi (no network): the real upload is not tested;
    every call is bound to the installed huggingface_hub's signatures."""
    import inspect
    from types import SimpleNamespace

    import huggingface_hub

    real, calls = huggingface_hub.HfApi, []

    class FakeApi:
        def __init__(self, token=None):
            calls.append(("init", token))

        def create_repo(self, **kwargs):
            inspect.signature(real.create_repo).bind(None, **kwargs)
            calls.append(("create_repo", kwargs))
            return SimpleNamespace(repo_id="me/" + kwargs["repo_id"].split("/")[-1])

        def upload_folder(self, **kwargs):
            inspect.signature(real.upload_folder).bind(None, **kwargs)
            folder = Path(kwargs["folder_path"])
            calls.append(("upload_folder", sorted(p.name for p in folder.iterdir()), kwargs))
            return "https://huggingface.co/me/ppo-policy/commit/abc"

    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    trainer = _trainer()
    url = trainer.save_pretrained(tmp_path / "ppo-policy", push_to_hub=True, private=True, token="tok",
                                  commit_message="step 1")
    assert url == "https://huggingface.co/me/ppo-policy/commit/abc"
    assert (tmp_path / "ppo-policy" / "model.safetensors").exists()  # saved locally too
    assert calls[0] == ("init", "tok")
    assert calls[1] == ("create_repo", {"repo_id": "ppo-policy", "private": True, "exist_ok": True})
    name, files, kwargs = calls[2]
    assert name == "upload_folder" and kwargs["repo_id"] == "me/ppo-policy" and kwargs["commit_message"] == "step 1"
    assert {"README.md", "model.safetensors", "value_head.safetensors", "tokenizer.json", "config.json"} <= set(files)
