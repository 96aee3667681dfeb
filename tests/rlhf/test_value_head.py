import pytest
import torch
from transformers import AutoModelForCausalLM

from rlhf.value_head import VALUE_HEAD_FILE, AutoModelForCausalLMWithValueHead, create_reference_model

IDS = torch.tensor([[1, 200, 300, 400, 500], [1, 600, 700, 800, 900]])


def test_forward_shapes_and_fp32_values(tiny_model_dir):
    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    logits, _, values = model(input_ids=IDS)
    assert logits.shape == (2, 5, model.config.vocab_size)
    assert values.shape == (2, 5) and values.dtype == torch.float32
    assert model.v_head.summary.weight.dtype == torch.float32
    # logits_to_keep=2: the last two positions only, values aligned with them
    kept_logits, _, kept_values = model(input_ids=IDS, logits_to_keep=2)
    assert kept_logits.shape[1] == 2 and torch.allclose(kept_values, values[:, -2:])


def test_zero_init_gives_zero_values(tiny_model_dir):
    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir, v_head_init="zero")
    assert model(input_ids=IDS)[2].abs().max().item() == 0.0


def test_save_and_load_round_trip(tiny_model_dir, tmp_path):
    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir, seed=3)
    with torch.no_grad():
        model.pretrained_model.model.layers[0].mlp.down_proj.weight.add_(0.5)  # differ from the base folder
    model.save_pretrained(tmp_path)
    assert (tmp_path / VALUE_HEAD_FILE).exists() and (tmp_path / "model.safetensors").exists()
    logits, _, values = model(input_ids=IDS)

    plain = AutoModelForCausalLM.from_pretrained(tmp_path)  # the value head file is ignored
    assert torch.allclose(plain(input_ids=IDS).logits, logits, atol=1e-5)
    again = AutoModelForCausalLMWithValueHead.from_pretrained(tmp_path, seed=99)  # seed would change a fresh head
    assert torch.allclose(again(input_ids=IDS)[2], values, atol=1e-6)


def test_lora_save_load_and_merge(tiny_model_dir, tmp_path):
    from peft import LoraConfig

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir, peft_config=lora)
    assert model.is_peft_model
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or n.startswith("v_head") for n in trainable)
    with torch.no_grad():  # LoRA's B starts at zero: make the adapter do something
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    logits, _, values = model(input_ids=IDS)
    with model.disable_adapter():
        base_logits = model(input_ids=IDS)[0]
    assert not torch.allclose(logits, base_logits, atol=1e-4)

    model.save_pretrained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").exists()
    assert (tmp_path / "adapter" / VALUE_HEAD_FILE).exists()
    again = AutoModelForCausalLMWithValueHead.from_pretrained(tmp_path / "adapter")
    assert again.is_peft_model
    again_logits, _, again_values = again(input_ids=IDS)
    assert torch.allclose(again_logits, logits, atol=1e-5) and torch.allclose(again_values, values, atol=1e-6)

    merged = model.merge_and_unload()
    assert not model.is_peft_model and not hasattr(merged, "peft_config")
    model.save_pretrained(tmp_path / "merged")
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    assert torch.allclose(plain(input_ids=IDS).logits, logits, atol=1e-4)


def test_reference_model_is_a_frozen_copy(tiny_model_dir):
    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir)
    ref = create_reference_model(model)
    assert not ref.training and not any(p.requires_grad for p in ref.parameters())
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    assert not torch.equal(next(model.parameters()), next(ref.parameters()))


def _trl_layout(model: AutoModelForCausalLM, folder, weight: torch.Tensor, bias: torch.Tensor) -> None:
    """The folder TRL 0.11's save_pretrained writes: the backbone's weights and v_head.summary.{weight,bias}
    together in one model.safetensors, no separate value-head file."""
    from safetensors.torch import load_file, save_file

    model.save_pretrained(folder)
    state = load_file(str(folder / "model.safetensors"))
    state["v_head.summary.weight"], state["v_head.summary.bias"] = weight, bias
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})


def test_trl_checkpoint_loads_its_value_head(tiny_model_dir, tmp_path):
    import warnings

    backbone = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    hidden = backbone.config.hidden_size
    weight = torch.arange(hidden, dtype=torch.float32).reshape(1, hidden) / 100  # known values, not an init
    _trl_layout(backbone, tmp_path, weight, torch.tensor([0.25]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # found: no MissingValueHeadWarning
        model = AutoModelForCausalLMWithValueHead.from_pretrained(tmp_path)
    assert torch.equal(model.v_head.summary.weight, weight)
    assert model.v_head.summary.bias.item() == 0.25
    # values = hidden . w + b on the last hidden state
    _, _, values = model(input_ids=IDS)
    last = backbone(input_ids=IDS, output_hidden_states=True).hidden_states[-1]
    assert torch.allclose(values, last @ weight[0] + 0.25, atol=1e-5)
    assert not (tmp_path / VALUE_HEAD_FILE).exists()


def test_trl_checkpoint_sharded_and_wrong_shape(tiny_model_dir, tmp_path):
    import json

    from safetensors.torch import save_file

    backbone = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    hidden = backbone.config.hidden_size
    backbone.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").rename(tmp_path / "model-00001-of-00002.safetensors")
    save_file({"v_head.summary.weight": torch.full((1, hidden), 0.5), "v_head.summary.bias": torch.tensor([-1.0])},
              str(tmp_path / "model-00002-of-00002.safetensors"), metadata={"format": "pt"})
    from safetensors import safe_open

    with safe_open(str(tmp_path / "model-00001-of-00002.safetensors"), "pt") as f:
        weight_map = {k: "model-00001-of-00002.safetensors" for k in f.keys()}
    weight_map.update({k: "model-00002-of-00002.safetensors" for k in ("v_head.summary.weight", "v_head.summary.bias")})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    model = AutoModelForCausalLMWithValueHead.from_pretrained(tmp_path)
    assert model.v_head.summary.weight.eq(0.5).all() and model.v_head.summary.bias.item() == -1.0

    save_file({"weight": torch.zeros(1, hidden + 1), "bias": torch.zeros(1)}, str(tmp_path / VALUE_HEAD_FILE))
    with pytest.raises(ValueError, match="shape"):
        AutoModelForCausalLMWithValueHead.from_pretrained(tmp_path)


def test_missing_value_head_warns(tiny_model_dir):
    from rlhf.value_head import MissingValueHeadWarning

    with pytest.warns(MissingValueHeadWarning, match="fresh one"):
        AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir)


def test_from_pretrained_accepts_a_model_object_and_trl_head_arguments(tiny_model_dir):
    backbone = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLMWithValueHead.from_pretrained(
        backbone, summary_dropout_prob=0.1, v_head_init_strategy="normal", v_head_initializer_range=1.0)
    assert model.pretrained_model is backbone
    assert isinstance(model.v_head.dropout, torch.nn.Dropout) and model.v_head.dropout.p == 0.1
    assert 0.6 < model.v_head.summary.weight.std().item() < 1.4  # std 1.0 asked, not our 1/sqrt(32) = 0.18
    assert model(input_ids=IDS)[2].shape == (2, 5)


def test_push_to_hub_calls_the_backbone_and_uploads_the_head(tiny_model_dir, monkeypatch):
    from unittest import mock

    import huggingface_hub
    from safetensors.torch import load

    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir)
    backbone_push = mock.Mock(return_value="commit-info")
    monkeypatch.setattr(model.pretrained_model, "push_to_hub", backbone_push)
    api = mock.Mock()
    monkeypatch.setattr(huggingface_hub, "HfApi", mock.Mock(return_value=api))
    assert model.push_to_hub("me/policy", private=True, token="t") == "commit-info"
    backbone_push.assert_called_once_with("me/policy", private=True, token="t")
    upload = api.upload_file.call_args.kwargs
    assert upload["repo_id"] == "me/policy" and upload["path_in_repo"] == VALUE_HEAD_FILE
    assert torch.equal(load(upload["path_or_fileobj"])["weight"], model.v_head.summary.weight.detach())


def test_saved_folder_has_the_layout_trl_reads(tiny_model_dir, tmp_path):
    from safetensors.torch import load_file

    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir, seed=5)
    model.save_pretrained(tmp_path)
    weights = load_file(str(tmp_path / "model.safetensors"))  # what TRL 0.11's from_pretrained reads
    assert torch.equal(weights["v_head.summary.weight"], model.v_head.summary.weight.detach())
    assert torch.equal(weights["v_head.summary.bias"], model.v_head.summary.bias.detach())
    (tmp_path / VALUE_HEAD_FILE).unlink()  # only the TRL layout left: still found
    again = AutoModelForCausalLMWithValueHead.from_pretrained(tmp_path)
    assert torch.equal(again.v_head.summary.weight, model.v_head.summary.weight)
    plain = AutoModelForCausalLM.from_pretrained(tmp_path)  # extra keys ignored
    assert torch.allclose(plain(input_ids=IDS).logits, model(input_ids=IDS)[0], atol=1e-5)


def test_sharded_save_indexes_the_head_for_trl(tiny_model_dir, tmp_path):
    import json

    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_model_dir, seed=5)
    model.save_pretrained(tmp_path, max_shard_size="100KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())["weight_map"]
    # the head's TRL keys went into a shard with the weights (no file rewritten after), and the index names it
    assert index["v_head.summary.weight"].startswith("model-") and index["v_head.summary.bias"].startswith("model-")
    (tmp_path / VALUE_HEAD_FILE).unlink()
    again = AutoModelForCausalLMWithValueHead.from_pretrained(tmp_path)
    assert torch.equal(again.v_head.summary.weight, model.v_head.summary.weight)
    plain = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert torch.allclose(plain(input_ids=IDS).logits, model(input_ids=IDS)[0], atol=1e-5)
