"""TRL 0.11's `trl.trainer` import path (`from trl.trainer import PPOTrainer` -> `from rlhf.trainer import ...`).

Names load on first use, as in rlhf/__init__.py, so importing this module does not import transformers.Trainer.
"""
_LAZY_EXPORTS = {
    "PPOConfig": "rlhf.configs",
    "PPOTrainer": "rlhf.ppo",
    "RewardConfig": "rlhf.reward",
    "RewardTrainer": "rlhf.reward",
    "DPOConfig": "rlhf.dpo",
    "DPOTrainer": "rlhf.dpo",
    "SFTConfig": "rlhf.sft",
    "SFTTrainer": "rlhf.sft",
    "GRPOConfig": "rlhf.grpo",
    "GRPOTrainer": "rlhf.grpo",
    "RLOOConfig": "rlhf.rloo",
    "RLOOTrainer": "rlhf.rloo",
    "KTOConfig": "rlhf.kto",
    "KTOTrainer": "rlhf.kto",
    "OnlineDPOConfig": "rlhf.online_dpo",
    "OnlineDPOTrainer": "rlhf.online_dpo",
    "XPOConfig": "rlhf.xpo",
    "XPOTrainer": "rlhf.xpo",
    "NashMDConfig": "rlhf.nash_md",
    "NashMDTrainer": "rlhf.nash_md",
    "AdaptiveKLController": "rlhf.kl_control",
    "FixedKLController": "rlhf.kl_control",
    "TextEnvironment": "rlhf.environment",
}
__all__ = list(_LAZY_EXPORTS)


def __getattr__(name: str):
    if name in _LAZY_EXPORTS:
        import importlib

        return getattr(importlib.import_module(_LAZY_EXPORTS[name]), name)
    raise AttributeError(f"module 'rlhf.trainer' has no attribute {name!r}")
