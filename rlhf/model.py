"""TRL 0.11's `trl.model` import path: `from trl.model import AutoModelForCausalLMWithValueHead` becomes
`from rlhf.model import AutoModelForCausalLMWithValueHead`. The implementation is rlhf/value_head.py."""
from rlhf.value_head import AutoModelForCausalLMWithValueHead, ValueHead, create_reference_model

__all__ = ["AutoModelForCausalLMWithValueHead", "ValueHead", "create_reference_model"]
