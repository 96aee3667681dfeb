"""TRL 0.11's module path `trl.extras.best_of_n_sampler` (the sampler lives in rlhf/samplers.py)."""
from rlhf.samplers import BestOfNSampler

__all__ = ["BestOfNSampler"]
