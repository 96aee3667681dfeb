"""A TRL-style library for RLHF on torch, transformers, accelerate and peft.

Imports neither storage nor gradio: metrics leave through callbacks (see tracking.py).
"""
from rlhf.loading import DEFAULT_ENCODER, DEFAULT_POLICY, default_encoder_path, default_model_path

# ---- trainers, imported on first use: transformers.Trainer takes ~6 s to import on this machine and
# `import rlhf.loading` (the CLI, the UI) must stay instant. Add a trainer by adding its names here (rlhf/trainer.py,
# TRL's `trl.trainer` path, serves this same table).
_LAZY_EXPORTS = {
    "RewardConfig": "rlhf.reward",
    "RewardTrainer": "rlhf.reward",
    "RewardScorer": "rlhf.reward",
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
    "BaseJudge": "rlhf.judges",
    "BasePairwiseJudge": "rlhf.judges",
    "BaseRankJudge": "rlhf.judges",
    "BaseBinaryJudge": "rlhf.judges",
    "FunctionJudge": "rlhf.judges",
    "RewardModelJudge": "rlhf.judges",
    "merge_and_save": "rlhf.peft_utils",
    # PPO (classic TRL API)
    "PPOConfig": "rlhf.configs",
    "PPOTrainer": "rlhf.ppo",
    "AutoModelForCausalLMWithValueHead": "rlhf.value_head",
    "create_reference_model": "rlhf.value_head",
    "AdaptiveKLController": "rlhf.kl_control",
    "FixedKLController": "rlhf.kl_control",
    "LengthSampler": "rlhf.samplers",
    "BestOfNSampler": "rlhf.samplers",
    "TextEnvironment": "rlhf.environment",
    "TextHistory": "rlhf.environment",
    "set_seed": "rlhf.core",  # TRL 0.11's `from trl import set_seed`
}


def __getattr__(name: str):
    if name in _LAZY_EXPORTS:
        import importlib

        return getattr(importlib.import_module(_LAZY_EXPORTS[name]), name)
    raise AttributeError(f"module 'rlhf' has no attribute {name!r}")
