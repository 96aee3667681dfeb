"""rlhf.hardware: bf16 is the default only where the CPU (or GPU) runs it natively."""
from rlhf import hardware
from rlhf.configs import PPOConfig

SAPPHIRE_RAPIDS = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
SKYLAKE = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw\n"


def test_cpu_flags_are_read_from_cpuinfo():
    assert {"avx512_bf16", "amx_bf16"} <= hardware.cpu_flags(SAPPHIRE_RAPIDS)
    assert not hardware.cpu_flags(SKYLAKE) & hardware.BF16_CPU_FLAGS  # AVX-512 alone emulates bf16
    assert hardware.cpu_flags("no flags line here") == frozenset()


def test_bf16_default_follows_this_cpu(monkeypatch):
    hardware.bf16_is_fast.cache_clear()
    real = hardware.cpu_flags
    monkeypatch.setattr(hardware, "cpu_flags", lambda cpuinfo=None: real(SKYLAKE))
    assert hardware.bf16_is_fast("cpu") is False
    hardware.bf16_is_fast.cache_clear()
    monkeypatch.setattr(hardware, "cpu_flags", lambda cpuinfo=None: real(SAPPHIRE_RAPIDS))
    assert hardware.bf16_is_fast("cpu") is True
    assert hardware.bf16_is_fast("mps") is False
    hardware.bf16_is_fast.cache_clear()
    monkeypatch.undo()
    # The config default is whatever this machine answers; an explicit value always wins.
    assert PPOConfig().bf16 == hardware.bf16_is_fast()
    assert PPOConfig(bf16=False).bf16 is False
