"""Samplers from TRL: LengthSampler (random generation lengths), BestOfNSampler (rejection sampling) and
RepeatSampler (the online trainers' prompt order: each generation batch repeated for the passes that reuse it).

Randomness is passed in: each sampler owns a seeded torch.Generator, and BestOfNSampler's sampling runs
in a forked RNG seeded from it, so neither touches the caller's global RNG state.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields, replace

import torch
from torch.utils.data import Sampler

from rlhf.configs import GenerationSettings


class LengthSampler:
    """A callable returning a random int in [min_value, max_value) (max excluded, as TRL's)."""

    def __init__(self, min_value: int, max_value: int, generator: torch.Generator | None = None) -> None:
        if not 0 <= min_value < max_value:
            raise ValueError(f"LengthSampler: need 0 <= min_value < max_value, got {min_value}, {max_value}")
        self.min_value, self.max_value = min_value, max_value
        self.generator = generator if generator is not None else torch.Generator().manual_seed(0)

    def __call__(self) -> int:
        return int(torch.randint(self.min_value, self.max_value, (1,), generator=self.generator))


def settings_from_generation_config(config, base: GenerationSettings | None = None) -> GenerationSettings:
    """A transformers GenerationConfig (or a dict of its keys, as TRL's generate(**kwargs) takes) as
    GenerationSettings. Unset or None values keep `base`'s; top_k None or 0 is off, as TRL's examples set it;
    min_new_tokens is the minimum (GenerationConfig's min_length counts the prompt too, so it is not used)."""
    values = config if isinstance(config, dict) else config.to_dict()
    base = base or GenerationSettings()
    known = {f.name for f in fields(GenerationSettings)} - {"min_length", "batch_size", "seed", "autocast"}
    changes = {k: values[k] for k in known if values.get(k) is not None}
    if "top_k" in values:
        changes["top_k"] = int(values["top_k"] or 0)
    if values.get("min_new_tokens"):
        changes["min_length"] = int(values["min_new_tokens"])
    return replace(base, **changes)


class BestOfNSampler:
    """Sample `sample_size` responses per query and keep the `n_candidates` best by `queries_to_scores`.

    queries_to_scores: list of texts (query + response, decoded) -> list of floats, e.g. a reward model's
    scorer or any function. Sampling settings are a GenerationSettings (any top_k/top_p/temperature: no
    KL is estimated here); `length_sampler` draws max_new_tokens per call when given. TRL 0.11's
    `generation_config=` (a transformers GenerationConfig) is read into these settings.
    """

    def __init__(
        self,
        model,
        tokenizer,
        queries_to_scores: Callable[[list[str]], Sequence[float]],
        length_sampler: Callable[[], int] | None = None,
        sample_size: int = 4,
        seed: int = 0,
        n_candidates: int = 1,
        generation_settings: GenerationSettings | None = None,
        generation_config=None,
    ) -> None:
        if sample_size < 1 or not 1 <= n_candidates <= sample_size:
            raise ValueError(f"BestOfNSampler: need 1 <= n_candidates ({n_candidates}) <= sample_size ({sample_size})")
        self.model, self.tokenizer, self.queries_to_scores = model, tokenizer, queries_to_scores
        self.length_sampler, self.sample_size, self.n_candidates = length_sampler, sample_size, n_candidates
        self.settings = generation_settings or GenerationSettings()
        if generation_config is not None:
            self.settings = settings_from_generation_config(generation_config, self.settings)
        self.generator = torch.Generator().manual_seed(seed)

    def generate(
        self, queries: torch.Tensor | Sequence[torch.Tensor], skip_special_tokens: bool = True,
        device: str | torch.device | None = None, **generation_kwargs,
    ) -> list[list[str]]:
        """For each query, its n_candidates best texts (query + response), best first.

        `device` and `generation_kwargs` (e.g. max_new_tokens, temperature) as in TRL 0.11's generate."""
        from rlhf.generation import generate_batch

        queries = [queries] if isinstance(queries, torch.Tensor) and queries.dim() == 1 else list(queries)
        if device is not None:
            queries = [q.to(device) for q in queries]
        settings = settings_from_generation_config(generation_kwargs, self.settings) if generation_kwargs else self.settings
        # A fresh seed per call from our generator: repeated calls differ, the sequence is reproducible.
        settings = replace(settings, seed=int(torch.randint(0, 2**31 - 1, (1,), generator=self.generator)))
        if self.length_sampler is not None and "max_new_tokens" not in generation_kwargs:
            settings = replace(settings, max_new_tokens=self.length_sampler())
        repeated = [q for q in queries for _ in range(self.sample_size)]  # query i's samples at i*n ... i*n+n-1
        responses = generate_batch(self.model, self.tokenizer, repeated, settings)
        texts = [self.tokenizer.decode(torch.cat([q.cpu(), r.cpu()]), skip_special_tokens=skip_special_tokens)
                 for q, r in zip(repeated, responses)]
        scores = torch.as_tensor([float(s) for s in self.queries_to_scores(texts)])
        if len(scores) != len(texts):
            raise ValueError(f"BestOfNSampler: queries_to_scores returned {len(scores)} scores for {len(texts)} texts")
        best = []
        for i in range(len(queries)):
            group = scores[i * self.sample_size : (i + 1) * self.sample_size]
            top = torch.topk(group, self.n_candidates).indices  # ties: the earlier sample
            best.append([texts[i * self.sample_size + int(j)] for j in top])
        return best


class RepeatSampler(Sampler):
    """Prompt indices for whole groups: each prompt `mini_repeat_count` times in a row (its group of answers),
    `batch_size` prompts per generation batch, each generation batch `repeat_count` times (the micro-steps that
    reuse it). Seeded, so every process draws the same order (TRL's RepeatSampler)."""

    def __init__(self, data_source, mini_repeat_count: int, batch_size: int = 1, repeat_count: int = 1,
                 shuffle: bool = True, seed: int | None = None):
        self.num_samples = len(data_source)
        self.mini_repeat_count, self.batch_size, self.repeat_count = mini_repeat_count, batch_size, repeat_count
        self.shuffle = shuffle
        self.generator = torch.Generator()
        if seed is not None:
            self.generator.manual_seed(seed)

    def __iter__(self):
        order = torch.randperm(self.num_samples, generator=self.generator).tolist() if self.shuffle \
            else list(range(self.num_samples))
        chunks = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        for chunk in chunks:
            if len(chunk) < self.batch_size:
                continue  # a partial last batch would break the groups
            for _ in range(self.repeat_count):
                for index in chunk:
                    yield from [index] * self.mini_repeat_count

    def __len__(self) -> int:
        return (self.num_samples // self.batch_size) * self.batch_size * self.mini_repeat_count * self.repeat_count
