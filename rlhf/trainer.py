"""TRL 0.11's `trl.trainer` import path (`from trl.trainer import PPOTrainer` -> `from rlhf.trainer import ...`).

The same names as `rlhf` itself, loaded on first use from rlhf/__init__.py's one table, so importing this module does
not import transformers.Trainer.
"""
import rlhf

__all__ = list(rlhf._LAZY_EXPORTS)


def __getattr__(name: str):
    if name in rlhf._LAZY_EXPORTS:
        return getattr(rlhf, name)
    raise AttributeError(f"module 'rlhf.trainer' has no attribute {name!r}")
