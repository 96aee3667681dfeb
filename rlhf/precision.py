"""Which dtype a trained model's weights are loaded in, and which dtype its forward passes compute in.

Full fine-tuning keeps fp32 master weights: the model is loaded in float32 whatever dtype its checkpoint was
saved in (TRL's default, for the same reason), and the forward passes run under bf16 autocast (or fp16 with a
gradient scaler where the GPU has no bf16). An Adam update is about lr per step (1e-6 .. 3e-5); bf16 keeps 8 bits
of mantissa, so a weight of 0.02 moves only in steps of 2^-13 (1.2e-4): in pure bf16 such updates round away.
transformers 5.x reads from_pretrained(dtype=None) as "auto" (the checkpoint's dtype), which is why every loader
here says float32 explicitly.

LoRA trains only its adapters, so the frozen base is loaded in the compute dtype (half the memory) and peft keeps
the adapters in fp32. Pure half-precision training is there when asked for (dtype=bfloat16), with a warning.

Stdlib only at import time: the configs import this for their fields.
"""
from __future__ import annotations

import warnings
from dataclasses import field

# The dtypes a model may be loaded in ("auto": the checkpoint's own, as transformers' from_pretrained reads it).
DTYPE_CHOICES = ("float32", "bfloat16", "float16", "auto")
HALF_DTYPES = ("bfloat16", "float16")


class PureHalfPrecisionWarning(UserWarning):
    """Trainable weights in bf16/fp16: the optimizer keeps no fp32 master copy, small updates are lost."""


def dtype_field():
    return field(default=None, metadata={
        "help": "dtype the model is loaded in when given by name (TRL's dtype): blank: float32 for full fine-tuning "
                "(fp32 master weights; the forward passes still run under bf16/fp16 autocast), the compute dtype "
                "for LoRA's frozen base; bfloat16/float16: pure half-precision training (warned: updates below "
                "its resolution are lost); auto: the checkpoint's own dtype."})


def model_init_kwargs_field():
    return field(default=None, metadata={
        "help": "Keyword arguments for from_pretrained when the model is given by name (TRL's model_init_kwargs), "
                "e.g. {\"attn_implementation\": \"flash_attention_2\"} or {\"dtype\": \"bfloat16\"}."})


def load_in_4bit_field():
    return field(default=False, metadata={
        "help": "QLoRA (TRL's load_in_4bit): load the base model in 4-bit NF4 through bitsandbytes (pip install "
                "'rlhf-studio[qlora]'; needs a CUDA GPU and lora) and train LoRA adapters on it; the saved model "
                "is merged into a full-precision copy of the base."})


def check_dtype(value) -> None:
    if value is not None and dtype_name(value) not in DTYPE_CHOICES:
        raise ValueError(f"dtype={value!r}: must be one of {', '.join(DTYPE_CHOICES)} (or blank)")


def dtype_name(value) -> str | None:
    """'bfloat16' for torch.bfloat16, 'bfloat16', or 'torch.bfloat16'; None stays None."""
    if value is None:
        return None
    return str(value).removeprefix("torch.")


def compute_dtype_name(bf16: bool, fp16: bool = False) -> str:
    return "bfloat16" if bf16 else "float16" if fp16 else "float32"


def model_load_kwargs(args, lora: bool, frozen: bool = False) -> dict:
    """from_pretrained keyword arguments for the model a trainer trains, from its config: `dtype` (or TRL's
    model_init_kwargs["dtype"] / ["torch_dtype"]), the rest of model_init_kwargs, and with load_in_4bit a
    bitsandbytes quantization_config. Unset dtype: float32 for full fine-tuning, the compute dtype for LoRA.
    `frozen`: a reference model given by name, loaded as TRL does with the same arguments (4-bit allowed)."""
    kwargs = dict(getattr(args, "model_init_kwargs", None) or {})
    kwargs.pop("attn_implementation", None)  # the attn_implementation setting: applied after loading (rlhf/attention.py)
    asked = dtype_name(kwargs.pop("torch_dtype", None))
    asked = dtype_name(kwargs.pop("dtype", None)) or asked
    setting = dtype_name(getattr(args, "dtype", None))
    if setting is not None and asked is not None and setting != asked:
        raise ValueError(f"dtype={setting!r} and model_init_kwargs dtype={asked!r} disagree: set one of them")
    asked = setting or asked
    check_dtype(asked)
    compute = compute_dtype_name(bool(getattr(args, "bf16", False)), bool(getattr(args, "fp16", False)))
    kwargs["dtype"] = asked or (compute if lora else "float32")
    quantized = bool(getattr(args, "load_in_4bit", False) or kwargs.pop("load_in_4bit", False))
    if quantized:
        if not lora and not frozen:
            raise ValueError("load_in_4bit=True needs lora=True: a 4-bit base cannot be trained, its LoRA adapters are")
        kwargs["quantization_config"] = bnb_4bit_config(compute)
        kwargs["dtype"] = asked or compute
    if "device_map" not in kwargs:
        device_map = rank_device_map(lora or quantized)
        if device_map is not None:
            kwargs["device_map"] = device_map
    return kwargs


def rank_device_map(adapters: bool) -> dict | None:
    """from_pretrained's device_map for a LoRA or QLoRA model on a CUDA GPU: {"": local rank}, this process's own
    GPU. Without it every rank of `accelerate launch` loads a 4-bit model onto GPU 0 (bitsandbytes quantises while
    loading, onto the current device, which is GPU 0 until the Accelerator sets it), and a LoRA base goes through
    the CPU first. None elsewhere: full fine-tuning (accelerate, ZeRO or FSDP place and shard it), ZeRO-3 and FSDP
    (they shard the weights themselves, and transformers refuses a device_map under ZeRO-3), and CPU ranks (each
    rank's model is in its own process's memory already)."""
    import os

    if not adapters:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        return None
    from transformers.integrations import is_deepspeed_zero3_enabled

    if is_deepspeed_zero3_enabled():
        return None
    return {"": int(os.environ.get("LOCAL_RANK", "0"))}


def bnb_4bit_config(compute_dtype: str):
    """QLoRA's quantisation (Dettmers et al. 2023): NF4 weights, double quantisation, matmuls in `compute_dtype`.
    ImportError / RuntimeError with what to do when bitsandbytes or a CUDA GPU is missing."""
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        raise ImportError("load_in_4bit=True needs bitsandbytes: pip install 'rlhf-studio[qlora]'")
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("load_in_4bit=True needs a CUDA GPU (bitsandbytes' 4-bit kernels); on this machine train "
                           "with lora=True and load_in_4bit=False")
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=getattr(torch, compute_dtype))


def warn_if_no_master_weights(model) -> bool:
    """Warn (PureHalfPrecisionWarning) when some trainable weight is bf16/fp16; True when it warned."""
    import torch

    half = {p.dtype for p in model.parameters() if p.requires_grad and p.dtype in (torch.bfloat16, torch.float16)}
    if half:
        names = ", ".join(sorted(dtype_name(d) for d in half))
        warnings.warn(f"training weights held in {names}: the optimizer keeps no fp32 master copy, so updates "
                      "smaller than the weights' resolution (about 1/256 of a weight in bf16) are lost; leave dtype "
                      "unset (float32 weights, half-precision autocast) unless memory forces this",
                      PureHalfPrecisionWarning, stacklevel=3)
    return bool(half)


def autocast_dtype(half_precision: bool, device_type: str, bf16_supported: bool | None = None):
    """The autocast dtype for a run that asked for half precision (the `bf16` setting): bfloat16, or float16 on a
    CUDA GPU without native bf16 (compute capability below 8.0: T4, V100, where torch.cuda.is_bf16_supported() says
    True by emulating it; fp16 then needs a gradient scaler); None when not asked."""
    import torch

    if not half_precision:
        return None
    if device_type == "cuda":
        if bf16_supported is None:
            from rlhf.hardware import gpu_has_native_bf16

            bf16_supported = gpu_has_native_bf16()  # native only: an emulated bf16 gets fp16 with a scaler instead
        return torch.bfloat16 if bf16_supported else torch.float16
    return torch.bfloat16


def reference_dtype(compute_dtype):
    """The dtype a frozen copy of the policy (PPO's and GRPO's reference) is kept in: bfloat16 where the run computes
    in bf16, since autocast would cast its fp32 weights to bf16 on every forward anyway (half the memory, the same
    matmuls; only the residual stream and the norms then run in bf16, within bf16's rounding of the log-probs,
    tests/rlhf/test_reference_dtype.py). None (the policy's own dtype) otherwise: fp16 has too little range for a
    residual stream that autocast keeps in fp32 (it overflows past 65504), and fp32 runs stay fp32."""
    import torch

    return torch.bfloat16 if compute_dtype == torch.bfloat16 else None


def copy_in_dtype(module, dtype, only=None):
    """A deep copy of `module` whose Linear weights under `only` (default: all) are `dtype`, each cast
    from the original rather than copied in fp32 and then cast: the peak is the copy's own size. dtype None: a plain
    deep copy. Buffers keep their dtype (rotary frequencies are computed in fp32 on purpose)."""
    import copy

    import torch

    memo: dict[int, torch.nn.Parameter] = {}
    if dtype is not None:
        # Only the matmul weights: autocast casts a Linear's fp32 weight to `dtype` on every forward, so a copy kept
        # in `dtype` computes exactly what the policy does; embeddings (and a head tied to them) and norms run in
        # fp32 under autocast and stay fp32 here, or the first step's KL would start at bf16's rounding (-0.05 per
        # answer on the 135M model) instead of 0.
        root = only if only is not None else module
        embedded = {id(p) for m in module.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
        matmuls = [p for m in root.modules() if isinstance(m, torch.nn.Linear) for p in m.parameters(recurse=False)]
        for parameter in matmuls:
            if id(parameter) in embedded or id(parameter) in memo:
                continue
            if parameter.is_floating_point() and parameter.dtype != dtype:
                # deepcopy finds each parameter (a tied weight once) in the memo and takes the cast one
                memo[id(parameter)] = torch.nn.Parameter(parameter.detach().to(dtype),
                                                         requires_grad=parameter.requires_grad)
    return copy.deepcopy(module, memo)


def cast_matmul_weights(module, dtype):
    """`module` itself with its Linear weights in `dtype`, the rest as it is (copy_in_dtype's rule, in place: for a
    reference just loaded, which nothing else shares). dtype None: unchanged."""
    import torch

    if dtype is None:
        return module
    embedded = {id(p) for m in module.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
    for m in module.modules():
        if isinstance(m, torch.nn.Linear):
            for parameter in m.parameters(recurse=False):
                if id(parameter) not in embedded and parameter.is_floating_point() and parameter.dtype != dtype:
                    parameter.data = parameter.data.to(dtype)
    return module


def trainer_reference_dtype(args):
    """The dtype of the frozen reference of an HF-Trainer-based trainer (DPO, KTO, online DPO): bf16 matmul weights
    in a bf16 run (reference_dtype), else None (the policy's dtype)."""
    import torch

    return reference_dtype(torch.bfloat16 if getattr(args, "bf16", False) else None)


def trainer_precision_flags(bf16: bool, fp16: bool, device_type: str, bf16_supported: bool | None = None
                            ) -> tuple[bool, bool]:
    """TrainingArguments' (bf16, fp16) for a run that asked for `bf16`: on a CUDA GPU without bf16, fp16 autocast
    (accelerate adds the gradient scaler) in its place."""
    import torch

    if bf16 and device_type == "cuda" and autocast_dtype(True, device_type, bf16_supported) == torch.float16:
        return False, True
    return bf16, fp16


class InheritedMixedPrecisionWarning(UserWarning):
    """accelerate's process-wide state carries an earlier trainer's mixed precision into this one."""


def inherited_mixed_precision(accelerator) -> str | None:
    """The mixed precision accelerate's process-wide state gives `accelerator` although this process was not
    launched with it (`accelerate launch --mixed_precision`, which sets ACCELERATE_MIXED_PRECISION): an earlier
    trainer in the same process (an HF Trainer with bf16=True, in a notebook) left it there. None when there is
    none, or when the launch asked for it."""
    import os

    mixed = getattr(accelerator, "mixed_precision", "no") or "no"
    if mixed == "no" or os.environ.get("ACCELERATE_MIXED_PRECISION", "no") == mixed:
        return None
    return mixed


def undo_prepared_autocast(model) -> None:
    """Give back the forward that accelerator.prepare wrapped in its mixed-precision autocast (it keeps the
    original as `_original_forward`), so the trainer's own precision decides. Unwraps DDP's module first."""
    inner = getattr(model, "module", model)
    original = inner.__dict__.get("_original_forward")
    if original is not None:
        inner.forward = original
        del inner._original_forward
