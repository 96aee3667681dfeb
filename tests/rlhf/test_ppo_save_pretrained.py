"""PPOTrainer.save_pretrained (TRL 0.11): policy + value head + tokenizer + model card, and model cards themselves.

Uses the tiny TRL-made model in tests/fixtures/trl_0_11_4 (vocab 64, its own tokenizer): a step takes well under
a second.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from rlhf.cards import dataset_card, hub_base_model, model_card, size_category, table
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
    assert meta["pipeline_tag"] == "text-generation" and meta["model_name"] == "ppo-policy"
    assert "base_model" not in meta and f"starting from `{FIXTURE}`" in card  # a local folder is no Hub id
    assert "license" not in meta  # the fixture folder has no card: its license is unknown, so none is claimed
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
    # beside the adapter, only the head under TRL 0.11's names (TRL reads a PEFT folder's model.safetensors first)
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        assert set(f.keys()) == {"v_head.summary.weight", "v_head.summary.bias"}
    again = AutoModelForCausalLMWithValueHead.from_pretrained(out)
    torch.testing.assert_close(_outputs(again), _outputs(trainer.unwrapped_model))
    assert (out / "README.md").exists()


def test_cards_escape_cells_and_keep_front_matter_valid():
    text = model_card('m: "quoted"', "DPO", base_model="org/a", datasets=["me/prefs", 'local: "prefs"'],
                      settings={"beta": 0.1}, metrics={"loss": 0.123456789, "note": "a|b\nc"},
                      evaluation=[{"model": "m", "win_rate": 0.75}])
    meta = _front_matter(text)
    assert meta["base_model"] == "org/a" and meta["model_name"] == 'm: "quoted"'
    assert meta["datasets"] == ["me/prefs"]  # Hub ids only; the other name is in the text
    assert "Datasets: [`me/prefs`](https://huggingface.co/datasets/me/prefs), `local: \"prefs\"`" in text
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


def test_model_card_front_matter_as_the_hub_reads_it(tmp_path):
    """license, base_model, library_name, pipeline_tag, datasets, tags, model_name (TRL's and the Hub's keys)."""
    text = model_card("imdb-dpo", "DPO (DPOTrainer)", base_model="default", datasets=["me/imdb-prefs"],
                      tags=["policy", "dpo"], pipeline_tag="text-generation")
    assert _front_matter(text) == {
        "license": "apache-2.0",  # SmolLM2-135M-Instruct's, the embedded default policy
        "library_name": "transformers", "pipeline_tag": "text-generation",
        "base_model": "HuggingFaceTB/SmolLM2-135M-Instruct", "model_name": "imdb-dpo", "datasets": ["me/imdb-prefs"],
        "tags": ["rlhf-studio", "trl", "policy", "dpo"]}
    assert "[`HuggingFaceTB/SmolLM2-135M-Instruct`](https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct)" in text
    assert "[TRL](https://github.com/huggingface/trl)" in text and "License: `apache-2.0`, as its base model's." in text
    assert "from transformers import AutoModelForCausalLM\n" in text

    reward = _front_matter(model_card("rm", "reward modelling", base_model="default-encoder",
                                      pipeline_tag="text-classification", license="mit"))
    assert reward["license"] == "mit"  # given: wins over the base model's apache-2.0
    assert reward["base_model"] == "sentence-transformers/all-MiniLM-L6-v2" and reward["pipeline_tag"] == "text-classification"
    assert "AutoModelForSequenceClassification.from_pretrained" in model_card("rm", "RM", pipeline_tag="text-classification")
    adapter = model_card("lora", "SFT", base_model="default", library_name="peft")
    assert _front_matter(adapter)["library_name"] == "peft" and "from peft import AutoPeftModelForCausalLM" in adapter


def test_base_license_is_read_offline_or_left_out(tmp_path, monkeypatch):
    import huggingface_hub

    from rlhf.cards import base_license
    from rlhf.loading import default_encoder_path

    assert base_license("default") == {"license": "apache-2.0"}
    assert base_license(str(default_encoder_path())) == {"license": "apache-2.0"}  # its shipped README.md
    # a local folder's card: "other" comes with its name and link
    folder = tmp_path / "base"
    folder.mkdir()
    (folder / "README.md").write_text("---\nlicense: other\nlicense_name: acme-1\n"
                                      "license_link: https://acme.example/LICENSE\ntags: [x]\n---\n# Base\n")
    licensing = {"license": "other", "license_name": "acme-1", "license_link": "https://acme.example/LICENSE"}
    assert base_license(str(folder)) == licensing
    text = model_card("m", "SFT", base_model=str(folder))
    assert {k: _front_matter(text)[k] for k in licensing} == licensing
    assert "License: `acme-1` (https://acme.example/LICENSE), as its base model's." in text
    # a Hub id: its card from the local Hugging Face cache, never the network
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert base_license("org/cached") == {}
    snapshot = tmp_path / "hub" / "models--org--cached" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (tmp_path / "hub" / "models--org--cached" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--cached" / "refs" / "main").write_text("abc123")
    (snapshot / "README.md").write_text("---\nlicense: llama3.2\n---\n")
    assert base_license("org/cached") == {"license": "llama3.2"}
    # unknown or unreadable: nothing is claimed
    (folder / "README.md").write_text("---\nlicense: [unclosed\n---\n")
    assert base_license(str(folder)) == {} and base_license(None) == {} and base_license(str(tmp_path)) == {}


def test_dataset_card_front_matter(tmp_path):
    text = dataset_card('prefs: "imdb"', "Pairs.", {"prompt": "the prompt"}, {"train": 900, "test": 150},
                        tags=["preferences"], task_categories=["text-generation"], license="cc-by-4.0")
    assert _front_matter(text) == {"license": "cc-by-4.0", "pretty_name": 'prefs: "imdb"',
                                   "task_categories": ["text-generation"], "size_categories": ["1K<n<10K"],
                                   "tags": ["rlhf-studio", "trl", "preferences"]}  # 900 + 150 = 1050 rows
    assert "[TRL's dataset formats](https://huggingface.co/docs/trl/dataset_formats)" in text
    assert "license" not in _front_matter(dataset_card("p", "P.", {}, {"train": 1}))  # the owner's choice: not guessed
    assert [size_category(n) for n in (0, 999, 1000, 99_999, 100_000, 10**7)] == [
        "n<1K", "n<1K", "1K<n<10K", "10K<n<100K", "100K<n<1M", "10M<n<100M"]
