"""TRL 0.11's `trl.extras` import path: `from trl.extras import BestOfNSampler` becomes
`from rlhf.extras import BestOfNSampler` (the sampler itself lives in rlhf/samplers.py)."""
from rlhf.samplers import BestOfNSampler

__all__ = ["BestOfNSampler"]
