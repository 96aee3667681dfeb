"""The synthetic preference pairs the DPO and reward-model benches train on (stdlib only, so TRL's side,
run by another Python, builds the very same rows from the same seed)."""
from __future__ import annotations

import random

WORDS = (
    "the film story plot actor actress scene camera music score ending script director drama comedy "
    "character dialogue moment audience screen performance visual sound writing pace tension humour "
    "beautiful boring brilliant clumsy moving flat sharp slow tender loud quiet bright dark warm cold"
).split()


def synthetic_rows(n: int, seed: int) -> list[dict[str, str]]:
    """Movie-review-like pairs: ~50-word prompts, ~30-word answers (about 128 tokens together)."""
    rng = random.Random(seed)
    sentence = lambda k: " ".join(rng.choice(WORDS) for _ in range(k))  # noqa: E731
    return [{"prompt": "Review: " + sentence(50), "chosen": " " + sentence(30), "rejected": " " + sentence(30)} for _ in range(n)]
