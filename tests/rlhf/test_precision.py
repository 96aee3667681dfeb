"""Precision: fp32 master weights for full fine-tuning whatever dtype the checkpoint was saved in, half precision only
in autocast (bf16, or fp16 with a gradient scaler where bf16 is missing), pure bf16 only when asked, with a warning;
QLoRA's config reaching from_pretrained and its refusals."""
import importlib.util
import json
import warnings

import pytest
import torch
from safetensors import safe_open
from transformers import LlamaConfig, LlamaForCausalLM

from rlhf.configs import PPOConfig
from rlhf.loading import load_causal_lm
from rlhf.ppo import PPOTrainer
from rlhf.precision import (
    PureHalfPrecisionWarning,
    autocast_dtype,
    model_load_kwargs,
    trainer_precision_flags,
)
from rlhf.value_head import AutoModelForCausalLMWithValueHead
from tests.rlhf.test_ppo import SMALL_TOKENIZER, rollouts


@pytest.fixture(scope="module")
def bf16_model_dir(tmp_path_factory):
    """A 2-layer Llama over 16 tokens saved in bf16, as most hub checkpoints are (config.json says bfloat16)."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=True, bos_token_id=1, eos_token_id=0, pad_token_id=0)
    out = tmp_path_factory.mktemp("bf16-llama")
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    return out


def saved_dtypes(folder) -> set[torch.dtype]:
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        return {f.get_tensor(k).dtype for k in f.keys() if not k.startswith("v_head.")}


def test_loaders_give_float32_unless_asked(bf16_model_dir):
    # transformers 5 reads dtype=None as "auto": before the fix these came back in bf16
    assert {p.dtype for p in load_causal_lm(bf16_model_dir).parameters()} == {torch.float32}
    value_model = AutoModelForCausalLMWithValueHead.from_pretrained(bf16_model_dir)
    assert {p.dtype for p in value_model.parameters()} == {torch.float32}
    assert {p.dtype for p in load_causal_lm(bf16_model_dir, dtype="auto").parameters()} == {torch.bfloat16}


def _ppo_step_fraction_moved(model_dir, tmp_path, name: str, **config_values) -> tuple[float, set]:
    """One PPO step at lr 1e-5 (an Adam update of about 1e-5 per weight: below bf16's resolution, 1.2e-4 at a
    weight of 0.02); the share of backbone weights that moved, and the saved model's dtypes."""
    config = PPOConfig(batch_size=4, mini_batch_size=4, ppo_epochs=1, learning_rate=1e-5, bf16=True, **config_values)
    model = AutoModelForCausalLMWithValueHead.from_pretrained(model_dir, **model_load_kwargs(config, lora=False))
    trainer = PPOTrainer(config, model, None, SMALL_TOKENIZER)
    backbone = trainer.model.pretrained_model
    before = {n: p.detach().clone() for n, p in backbone.named_parameters()}
    trainer.step(*rollouts(4))
    moved = sum(int((p.detach() != before[n]).sum()) for n, p in backbone.named_parameters())
    total = sum(p.numel() for p in backbone.parameters())
    trainer.model.save_pretrained(tmp_path / name)
    return moved / total, saved_dtypes(tmp_path / name)


def test_an_update_below_bf16_resolution_moves_the_fp32_master_weights(bf16_model_dir, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error", PureHalfPrecisionWarning)
        moved, dtypes = _ppo_step_fraction_moved(bf16_model_dir, tmp_path, "fp32")
    assert moved > 0.9  # (Adam moves every weight with a gradient; the few without one are tied/unused)
    assert dtypes == {torch.float32}  # what was asked (the default): full-precision weights
    # Pure bf16, when asked, warns, and the same update is mostly rounded away.
    with pytest.warns(PureHalfPrecisionWarning, match="no fp32 master copy"):
        moved_bf16, dtypes_bf16 = _ppo_step_fraction_moved(bf16_model_dir, tmp_path, "bf16", dtype="bfloat16")
    assert moved_bf16 < 0.2 and dtypes_bf16 == {torch.bfloat16}


def test_sft_loads_full_fine_tuning_in_float32_and_lora_base_in_the_compute_dtype(bf16_model_dir, tiny_model_dir):
    from datasets import Dataset
    from peft import LoraConfig

    from rlhf.loading import load_tokenizer
    from rlhf.sft import SFTConfig, SFTTrainer

    rows = Dataset.from_list([{"prompt": "a", "completion": " b"}] * 2)
    tokenizer = load_tokenizer(tiny_model_dir, padding_side="right")
    args = dict(output_dir="unused", report_to="none", max_steps=1, bf16=True)
    full = SFTTrainer(str(bf16_model_dir), args=SFTConfig(**args), train_dataset=rows, processing_class=tokenizer)
    assert {p.dtype for p in full.model.parameters()} == {torch.float32}
    lora = SFTTrainer(str(bf16_model_dir), args=SFTConfig(**args), train_dataset=rows, processing_class=tokenizer,
                      peft_config=LoraConfig(r=2, target_modules="all-linear", task_type="CAUSAL_LM"))
    dtypes = {n: p.dtype for n, p in lora.model.named_parameters()}
    assert {d for n, d in dtypes.items() if "lora_" in n} == {torch.float32}  # adapters: fp32
    assert {d for n, d in dtypes.items() if "lora_" not in n} == {torch.bfloat16}  # frozen base: compute dtype


def test_fp16_autocast_trains_through_a_gradient_scaler(monkeypatch):
    """Where bf16 is missing (a T4), bf16=True runs fp16 autocast with a GradScaler; CPU autocast has fp16 too,
    so the path is run here by making the selection answer fp16."""
    from tests.rlhf.test_ppo import small_vocab_model

    monkeypatch.setattr("rlhf.ppo.autocast_dtype", lambda asked, device: torch.float16 if asked else None)
    trainer = PPOTrainer(PPOConfig(batch_size=4, mini_batch_size=2, learning_rate=1e-3, bf16=True),
                         small_vocab_model(), None, SMALL_TOKENIZER)
    assert isinstance(trainer.scaler, torch.amp.GradScaler)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    stats = trainer.step(*rollouts(4))
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values() if isinstance(v, float))
    assert trainer.scaler.get_scale() > 0 and trainer.scaler._scale is not None  # the scaler took part
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters() if "v_head" not in n)


@pytest.mark.parametrize("asked, device, bf16_supported, expected", [
    (True, "cuda", True, torch.bfloat16), (True, "cuda", False, torch.float16), (True, "cpu", None, torch.bfloat16),
    (False, "cuda", False, None), (False, "cpu", None, None),
])
def test_autocast_dtype_selection(asked, device, bf16_supported, expected):
    assert autocast_dtype(asked, device, bf16_supported) == expected


def test_trainer_flags_switch_to_fp16_on_a_gpu_without_bf16():
    assert trainer_precision_flags(True, False, "cuda", bf16_supported=False) == (False, True)
    assert trainer_precision_flags(True, False, "cuda", bf16_supported=True) == (True, False)
    assert trainer_precision_flags(True, False, "cpu") == (True, False)
    assert trainer_precision_flags(False, False, "cuda", bf16_supported=False) == (False, False)


def test_model_load_kwargs_reads_dtype_in_every_spelling():
    assert model_load_kwargs(PPOConfig(), lora=False)["dtype"] == "float32"
    assert model_load_kwargs(PPOConfig(bf16=True), lora=True)["dtype"] == "bfloat16"
    assert model_load_kwargs(PPOConfig(bf16=False), lora=True)["dtype"] == "float32"
    assert model_load_kwargs(PPOConfig(model_init_kwargs={"torch_dtype": torch.bfloat16}), lora=False)["dtype"] == "bfloat16"
    kwargs = model_load_kwargs(PPOConfig(model_init_kwargs={"dtype": "auto", "attn_implementation": "eager",
                                                            "revision": "main"}), lora=False)
    assert kwargs == {"dtype": "auto", "revision": "main"}  # the kernel is the attn_implementation setting
    with pytest.raises(ValueError, match="dtype='float16' and model_init_kwargs dtype='bfloat16' disagree"):
        model_load_kwargs(PPOConfig(dtype="float16", model_init_kwargs={"dtype": "bfloat16"}), lora=False)
    with pytest.raises(ValueError, match=r"dtype='half': must be one of float32, bfloat16, float16, auto"):
        PPOConfig(dtype="half")


def test_attn_implementation_from_model_init_kwargs_is_the_same_setting():
    assert PPOConfig(model_init_kwargs={"attn_implementation": "sdpa"}).attn_implementation == "sdpa"
    with pytest.raises(ValueError, match="attn_implementation='eager': disagrees with model_init_kwargs"):
        PPOConfig(attn_implementation="eager", model_init_kwargs={"attn_implementation": "sdpa"})


# ---- QLoRA: what a CPU allows -----------------------------------------------------------------------------
def test_load_in_4bit_needs_lora_then_bitsandbytes_then_a_gpu(monkeypatch):
    with pytest.raises(ValueError, match="load_in_4bit=True needs lora=True"):
        model_load_kwargs(PPOConfig(load_in_4bit=True), lora=False)
    monkeypatch.setattr("rlhf.precision.bnb_4bit_config", lambda compute: ("nf4", compute))
    # a frozen reference given by name takes the same arguments (TRL's way): 4-bit without LoRA is fine there
    assert model_load_kwargs(PPOConfig(load_in_4bit=True, bf16=True), lora=False, frozen=True) == {
        "dtype": "bfloat16", "quantization_config": ("nf4", "bfloat16")}
    monkeypatch.undo()
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bitsandbytes" else real_find_spec(name, *a))
    with pytest.raises(ImportError, match=r"pip install 'rlhf-studio\[qlora\]'"):
        model_load_kwargs(PPOConfig(load_in_4bit=True), lora=True)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "bitsandbytes" else real_find_spec(name, *a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="load_in_4bit=True needs a CUDA GPU"):
        model_load_kwargs(PPOConfig(load_in_4bit=True), lora=True)


def test_the_4bit_config_reaches_from_pretrained(monkeypatch, bf16_model_dir):
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from peft import LoraConfig

    config = PPOConfig(load_in_4bit=True, bf16=True)
    # bitsandbytes and a GPU "present" while the load arguments are built, and only then: peft asked find_spec too
    # (and cached the answer), so alone in a process this test had peft import the missing bitsandbytes.
    real_find_spec = importlib.util.find_spec
    with monkeypatch.context() as patched:
        patched.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "bitsandbytes" else real_find_spec(name, *a))
        patched.setattr(torch.cuda, "is_available", lambda: True)
        patched.delenv("LOCAL_RANK", raising=False)
        load_kwargs = model_load_kwargs(config, lora=True)
    seen = {}
    real = AutoModelForCausalLM.from_pretrained

    def capture(path, **kwargs):
        seen.update(kwargs)
        # no GPU here: neither the 4-bit config nor the GPU placement is passed on
        return real(path, **{k: v for k, v in kwargs.items() if k not in ("quantization_config", "device_map")})

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", capture)
    AutoModelForCausalLMWithValueHead.from_pretrained(
        bf16_model_dir, peft_config=LoraConfig(r=2, target_modules="all-linear", task_type="CAUSAL_LM"), **load_kwargs)
    quantization = seen["quantization_config"]
    assert isinstance(quantization, BitsAndBytesConfig) and quantization.load_in_4bit
    assert quantization.bnb_4bit_quant_type == "nf4" and quantization.bnb_4bit_compute_dtype == torch.bfloat16
    assert seen["dtype"] == "bfloat16"
    assert seen["device_map"] == {"": 0}  # this process's GPU (LOCAL_RANK unset: the one process is rank 0)


def test_a_qlora_adapter_is_merged_into_the_unquantised_base(bf16_model_dir):
    """merged_model: a 4-bit base cannot hold merged weights, so the adapter goes onto the base reloaded from its
    folder; the result equals the adapter merged in place (here the base is not really 4-bit: only flagged)."""
    import copy

    from peft import LoraConfig, get_peft_model

    from rlhf.peft_utils import merged_model

    torch.manual_seed(1)
    peft_model = get_peft_model(load_causal_lm(bf16_model_dir, dtype="bfloat16"),
                                LoraConfig(r=2, target_modules="all-linear", init_lora_weights=False))
    expected = {k: v.clone() for k, v in merged_model(copy.deepcopy(peft_model)).state_dict().items()}
    peft_model.get_base_model().is_loaded_in_4bit = True
    peft_model.get_base_model().config.quantization_config = {"bnb_4bit_compute_dtype": "bfloat16"}
    merged = merged_model(peft_model)
    assert not hasattr(merged, "peft_config") and merged is not peft_model.get_base_model()
    assert {p.dtype for p in merged.parameters()} == {torch.bfloat16}
    for key, value in merged.state_dict().items():
        torch.testing.assert_close(value, expected[key])


def test_flash_attention_2_is_a_choice_refused_clearly_where_flash_attn_is_missing(monkeypatch):
    from rlhf.attention import training_attention

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "flash_attn" else real_find_spec(name, *a))
    assert PPOConfig(attn_implementation="flash_attention_2").attn_implementation == "flash_attention_2"
    with pytest.raises(ValueError, match="needs the flash-attn package"):
        training_attention("flash_attention_2", "cuda")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "flash_attn" else real_find_spec(name, *a))
    assert training_attention("flash_attention_2", "cuda") == "flash_attention_2"
    assert training_attention("sdpa", "cpu") == "sdpa" and training_attention("eager", "cpu") == "eager"


def test_half_precision_is_the_default_on_any_gpu(monkeypatch):
    """bf16's default (hardware.bf16_is_fast) is on for every CUDA GPU: where bf16 is missing, autocast_dtype then
    picks fp16 with a gradient scaler, rather than the run falling back to fp32."""
    from rlhf.hardware import bf16_is_fast

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    bf16_is_fast.cache_clear()
    try:
        assert bf16_is_fast("cuda") is True
        assert autocast_dtype(bf16_is_fast("cuda"), "cuda") == torch.float16
    finally:
        bf16_is_fast.cache_clear()


def test_lora_reward_model_on_a_bf16_base_trains_every_weight_in_fp32(tiny_encoder_dir):
    """A sequence classifier's score head is trained whole beside the adapters (peft's modules_to_save): on a base
    loaded in bf16 (LoRA's compute dtype) it gets an fp32 master too, so no weight trains in pure bf16."""
    from datasets import Dataset
    from peft import LoraConfig

    from rlhf.reward import RewardConfig, RewardTrainer

    rows = Dataset.from_list([{"prompt": "a", "chosen": " good", "rejected": " bad"}] * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PureHalfPrecisionWarning)
        trainer = RewardTrainer(str(tiny_encoder_dir), train_dataset=rows,
                                args=RewardConfig(output_dir="unused", report_to="none", max_steps=1, bf16=True),
                                peft_config=LoraConfig(r=2, target_modules=["query", "value"], task_type="SEQ_CLS"))
    trained = {n: p.dtype for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert any("classifier" in n or "score" in n for n in trained) and set(trained.values()) == {torch.float32}
    frozen = {p.dtype for p in trainer.model.parameters() if not p.requires_grad}
    assert frozen == {torch.bfloat16}  # the base: the compute dtype


def fake_gpu(monkeypatch, major: int, minor: int) -> None:
    """A CUDA GPU of compute capability major.minor where bf16 can be emulated (as torch finds on a T4 or V100)."""
    import types

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device=None: types.SimpleNamespace(major=major, minor=minor, name="fake"))
    monkeypatch.setattr(torch.cuda, "_check_bf16_tensor_supported", lambda device: True)
    monkeypatch.setattr(torch.version, "hip", None)


@pytest.mark.parametrize("capability, expected", [((7, 5), torch.float16), ((7, 0), torch.float16),
                                                  ((8, 0), torch.bfloat16), ((9, 0), torch.bfloat16)])
def test_bf16_only_where_the_gpu_has_it_natively(monkeypatch, capability, expected):
    """A T4 (7.5) or V100 (7.0) emulates bf16 and torch.cuda.is_bf16_supported() says True there: the run gets fp16
    with a gradient scaler instead; an A100 (8.0) or H100 (9.0) gets bf16."""
    from rlhf.hardware import gpu_has_native_bf16

    fake_gpu(monkeypatch, *capability)
    assert torch.cuda.is_bf16_supported() is True  # what the old check read: emulation counts
    assert gpu_has_native_bf16() is (expected == torch.bfloat16)
    assert autocast_dtype(True, "cuda") == expected
    fp16 = expected == torch.float16
    assert trainer_precision_flags(True, False, "cuda") == (not fp16, fp16)



def test_lora_and_qlora_models_load_onto_the_local_ranks_gpu(monkeypatch):
    """Under `accelerate launch` rank 1 of 2 loads its 4-bit (or LoRA) model onto GPU 1: without a device_map every
    rank's QLoRA model landed on GPU 0. Full fine-tuning, CPU runs, ZeRO-3 and FSDP get none."""
    import rlhf.precision as precision

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(precision, "bnb_4bit_config", lambda compute: ("nf4", compute))
    monkeypatch.setenv("LOCAL_RANK", "1")
    qlora = model_load_kwargs(PPOConfig(load_in_4bit=True, bf16=True), lora=True)
    assert qlora["device_map"] == {"": 1} and qlora["quantization_config"] == ("nf4", "bfloat16")
    assert model_load_kwargs(PPOConfig(bf16=True), lora=True)["device_map"] == {"": 1}
    assert model_load_kwargs(PPOConfig(load_in_4bit=True, bf16=True), lora=False, frozen=True)["device_map"] == {"": 1}
    assert "device_map" not in model_load_kwargs(PPOConfig(), lora=False)
    # a device_map the user gave in model_init_kwargs is kept
    assert model_load_kwargs(PPOConfig(model_init_kwargs={"device_map": "auto"}), lora=True)["device_map"] == "auto"
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    assert "device_map" not in model_load_kwargs(PPOConfig(bf16=True), lora=True)
    monkeypatch.delenv("ACCELERATE_USE_FSDP")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "device_map" not in model_load_kwargs(PPOConfig(bf16=True), lora=True)
