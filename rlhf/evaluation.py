"""Evaluate a policy on prompts it never trained on: reward, share above a threshold, KL to a base, length,
diversity. The same numbers for `rlhf-studio eval`, the automatic evaluation of finished runs, the demo and
bench/learning.py.

    result = evaluate_policy(model, tokenizer, prompts, answer_vader, ref_model=base, samples=4)
    result.metrics()   # {"eval/reward_mean": ..., "eval/positive_share": ..., "eval/kl": ..., ...}

KL is measured on the policy's own samples, summed over each answer's tokens (log p_policy - log p_base, the
Monte-Carlo estimate of KL(policy || base) per answer, as PPO's objective/kl), in float32 whatever the
generation ran in.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from rlhf.configs import GenerationSettings
from rlhf.core import logprobs_from_logits, pad_sequences, unfinished
from rlhf.generation import build_prompt_ids, decode_responses, eos_token_ids, generate_batch
from rlhf.rewards import vader_answer
from rlhf.stats import WinRate, wilson_interval  # defined there (stdlib only); imported from here too

RewardFunction = Callable[[Sequence[str], Sequence[str]], Sequence[float]]


def distinct_n(texts: Sequence[str], n: int = 2) -> float:
    """Distinct n-grams over all texts: unique word n-grams / all word n-grams (lowercased, whitespace words).
    1.0 when every n-gram is new, near 0 when the texts repeat one phrase; 0.0 with no n-gram at all."""
    grams = []
    for text in texts:
        words = text.lower().split()
        grams.extend(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
    return len(set(grams)) / len(grams) if grams else 0.0


def win_rate(scores: Sequence[float], base_scores: Sequence[float], prompt_index: Sequence[int]) -> WinRate:
    """Answer i of a model against answer i of its base to the same prompt (`prompt_index[i]`): a win when it
    scores higher, half when equal. The interval counts prompts, not answers, as the independent trials: answers
    to one prompt are alike, and counting each would claim more certainty than the prompts give."""
    if not len(scores) == len(base_scores) == len(prompt_index):
        raise ValueError(f"win_rate: {len(scores)} scores, {len(base_scores)} base scores and {len(prompt_index)} "
                         "prompt indices: one each per comparison")
    if not scores:
        raise ValueError("win_rate: no comparisons")
    wins = sum(a > b for a, b in zip(scores, base_scores))
    ties = sum(a == b for a, b in zip(scores, base_scores))
    rate = (wins + 0.5 * ties) / len(scores)
    prompts = len(set(prompt_index))
    low, high = wilson_interval(rate, prompts)
    return WinRate(rate, low, high, wins, ties, len(scores) - wins - ties, prompts)


# VADER compound sentiment of the answer alone: the held-out "positive answer" measure (> 0.5).
answer_vader = vader_answer


@torch.no_grad()
def response_logprob_sums(model, queries: Sequence[torch.Tensor], responses: Sequence[torch.Tensor], pad_id: int,
                          batch_size: int = 32) -> torch.Tensor:
    """Sum of each response's token log-probs given its query, float32, shape (N,). Empty responses give 0.

    Queries are left padded and responses right padded, so response token j of every row sits in the same
    column; position ids come from the mask, so padding changes no logit.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    sums = []
    for start in range(0, len(queries), batch_size):
        q_list = [q.long() for q in queries[start : start + batch_size]]
        r_list = [r.long() for r in responses[start : start + batch_size]]
        q = pad_sequences(q_list, pad_id, side="left")  # (b, Q)
        r = pad_sequences([x if len(x) else torch.tensor([pad_id]) for x in r_list], pad_id, side="right")  # (b, R)
        q_mask = (torch.arange(q.shape[1]) >= q.shape[1] - torch.tensor([len(x) for x in q_list])[:, None]).long()
        r_mask = (torch.arange(r.shape[1]) < torch.tensor([len(x) for x in r_list])[:, None]).long()
        attention_mask = torch.cat([q_mask, r_mask], dim=1)  # (b, Q+R)
        position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
        input_ids = torch.cat([q, r], dim=1)
        R = r.shape[1]
        logits = model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                       position_ids=position_ids.to(device), logits_to_keep=R + 1).logits[:, :-1].float()  # (b, R, V)
        logprobs = logprobs_from_logits(logits, r.to(device))  # (b, R)
        sums.append((logprobs * r_mask.to(device)).sum(dim=1).cpu())
    model.train(was_training)
    return torch.cat(sums) if sums else torch.zeros(0)


@dataclass
class EvalResult:
    prompts: int
    samples: int
    mean_reward: float | None  # None without a reward function (a measure of people's, or none)
    positive_share: float | None  # share of answers whose reward is above `threshold`
    threshold: float
    mean_kl: float | None  # nats per answer; None without a base model
    mean_length: float  # tokens per answer
    distinct_2: float
    rows: list[dict] = field(repr=False, default_factory=list)  # prompt, answer, reward, kl, length, cut
    responses: list = field(repr=False, default_factory=list)  # each answer's token ids, for KL measured later

    def metrics(self) -> dict[str, float]:
        out = {"eval/length_mean": self.mean_length, "eval/distinct_2": self.distinct_2}
        if self.mean_reward is not None:
            out.update({"eval/reward_mean": self.mean_reward, "eval/positive_share": self.positive_share})
        if self.mean_kl is not None:
            out["eval/kl"] = self.mean_kl
        return out


def evaluate_policy(
    model,
    tokenizer,
    prompts: Sequence[str],
    reward_fn: RewardFunction | None,
    ref_model=None,
    samples: int = 4,
    max_new_tokens: int = 16,
    threshold: float = 0.5,
    seed: int = 0,
    batch_size: int = 32,
    bf16: bool = False,
    build_query: Callable[[str], torch.Tensor] | None = None,
) -> EvalResult:
    """Sample `samples` answers per prompt from the full distribution (temperature 1, no top-k/top-p, the
    way the policy is trained), score them with `reward_fn(prompts, answers)` (None: no scores, e.g. when people
    judge), and measure KL to `ref_model`.

    `build_query(prompt) -> token ids` formats a prompt as training did (default: the chat template)."""
    if not prompts:
        raise ValueError("evaluate_policy: no prompts to evaluate on")
    if samples < 1:
        raise ValueError(f"evaluate_policy: samples={samples}: must be at least 1")
    build_query = build_query or (lambda text: build_prompt_ids(tokenizer, text))
    texts = [p for p in prompts for _ in range(samples)]
    query_ids = [build_query(p) for p in texts]
    settings = GenerationSettings(max_new_tokens=max_new_tokens, batch_size=batch_size, seed=seed, autocast=bf16)
    responses = generate_batch(model, tokenizer, query_ids, settings)
    answers = decode_responses(tokenizer, responses)
    rewards = [float(r) for r in reward_fn(texts, answers)] if reward_fn is not None else [None] * len(answers)
    if len(rewards) != len(answers):
        raise ValueError(f"evaluate_policy: the reward function gave {len(rewards)} scores for {len(answers)} answers")
    kls: list[float] | None = None
    if ref_model is not None:
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_token_ids(model, tokenizer)[0]
        policy = response_logprob_sums(model, query_ids, responses, pad_id, batch_size)
        base = response_logprob_sums(ref_model, query_ids, responses, pad_id, batch_size)
        kls = (policy - base).tolist()
    # cut: no EOS within max_new_tokens (rlhf.core.unfinished, PPO's tokens/cut_share too); an answer whose last
    # allowed token is EOS finished, though its length equals the limit.
    cut = unfinished(responses, eos_token_ids(model, tokenizer))
    rows = [{"prompt": p, "answer": a, "reward": r, "kl": None if kls is None else kls[i], "length": len(t), "cut": c}
            for i, (p, a, r, t, c) in enumerate(zip(texts, answers, rewards, responses, cut))]
    n = len(rows)
    return EvalResult(
        prompts=len(prompts), samples=samples,
        mean_reward=None if reward_fn is None else sum(rewards) / n,
        positive_share=None if reward_fn is None else sum(r > threshold for r in rewards) / n,
        threshold=threshold,
        mean_kl=None if kls is None else sum(kls) / n,
        mean_length=sum(len(t) for t in responses) / n,
        distinct_2=distinct_n(answers, 2),
        rows=rows,
        responses=list(responses),
    )
