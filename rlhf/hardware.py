"""What the hardware runs fast. Stdlib only at import time (configs use it for their defaults)."""
from __future__ import annotations

import functools
from pathlib import Path

# CPU features with native bf16 matrix products: AVX-512 BF16 (dot products) and AMX (tile matrix units).
# Without them, torch emulates bf16 on CPU through fp32 conversions, which is slower than plain fp32.
BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU's feature flags (Linux /proc/cpuinfo); empty where that file does not exist."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        if line.startswith("flags") and ":" in line:
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


@functools.lru_cache(maxsize=None)
def bf16_is_fast(device_type: str | None = None) -> bool:
    """True where half-precision autocast speeds training and generation up: any CUDA GPU (one without bf16, a T4
    or V100, then runs fp16 autocast with a gradient scaler in its place: rlhf/precision.py autocast_dtype), or a
    CPU with AVX-512 BF16 or AMX (measured here: bf16 matrix products about 4x fp32). On any other CPU bf16 is
    emulated and slower, so the default there is fp32.

    device_type None means the device training will use: CUDA when available, else the CPU.
    """
    import torch

    if device_type is None:
        device_type = "cuda" if torch.cuda.is_available() else "cpu"
    if device_type == "cuda":
        return torch.cuda.is_available()
    if device_type == "cpu":
        return bool(cpu_flags() & BF16_CPU_FLAGS)
    return False


def gpu_has_native_bf16() -> bool:
    """Whether the CUDA GPU computes bf16 in hardware (compute capability 8.0 and up: Ampere, Ada, Hopper; any ROCm
    GPU). torch.cuda.is_bf16_supported() alone also says True on a T4 or V100, where bf16 is emulated through fp32
    (including_emulation=True, its default): slow, and the run would get no fp16 gradient scaler in its place."""
    import torch

    # torch reads the capability (and says True on ROCm) without trying an emulated bf16 tensor
    return torch.cuda.is_bf16_supported(including_emulation=False)


# What the default is, in words, for help and settings listings (labeler/forms.py prints these rather than call
# the function, which imports torch to ask about a GPU): the value is worked out when a config is built.
bf16_is_fast.default_text = "auto: on where the hardware runs bf16 fast"
