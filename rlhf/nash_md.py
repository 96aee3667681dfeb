"""Nash-MD (Munos et al. 2023, "Nash Learning from Human Feedback") with TRL's NashMDTrainer API.

    trainer = NashMDTrainer("default", judge=prefers_short, args=NashMDConfig(output_dir="nash-md"), train_dataset=rows)

Nash-MD keeps online DPO's loop (rlhf/online_dpo.py: sample, judge, reference log-probs) and changes two steps:
1. the opponent's answer is sampled from the geometric mixture of the policy and the reference,
   pi_mix proportional to ref^c * pi^(1 - c) with c = mixture_coef (rlhf/online_losses.py geometric_mixture_logits),
   token by token in sample_geometric_mixture below (both models keep a KV cache);
2. the loss is not DPO's: the policy's own answer is reinforced by its probability of beating the opponent's
   (minus 0.5), with a REINFORCE estimate of the KL to the reference (online_losses.nash_md_losses). The probability
   is sigmoid(score difference) with a scoring judge or reward model, and 1 / 0 / 0.5 from a verdict (win, loss, tie).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch

from rlhf.generation import left_pad
from rlhf.online_dpo import OnlineDPOConfig, OnlineDPOTrainer, check_schedule
from rlhf.online_losses import (
    geometric_mixture_logits,
    nash_md_losses,
    value_for_epoch,
    win_probability_from_scores,
    win_probability_from_verdicts,
)


@torch.no_grad()
def sample_geometric_mixture(policy: torch.nn.Module, reference: torch.nn.Module, input_ids: torch.Tensor,
                             attention_mask: torch.Tensor, max_new_tokens: int, mixture_coef: float, eos_ids: list[int],
                             pad_id: int, temperature: float | None = 1.0, generator: torch.Generator | None = None,
                             reference_context=contextlib.nullcontext) -> torch.Tensor:
    """(B, C) tokens sampled from the geometric mixture of `policy` and `reference` after left-padded prompts (B, P);
    after a row's EOS it is padded with `pad_id`. temperature None: greedy. `reference_context()` wraps each reference
    call (the policy with its adapter disabled when the reference is the LoRA policy's base)."""
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    past = {"policy": None, "reference": None}

    def forward(name, model, ids, mask, positions):
        with reference_context() if name == "reference" else contextlib.nullcontext():
            out = model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=past[name],
                        use_cache=True)
        past[name] = out.cache  # transformers 5.24 names the KV cache `cache` (past_key_values is deprecated)
        return out.logits[:, -1].float()  # (B, V)

    policy_logits = forward("policy", policy, input_ids, attention_mask, position_ids)
    ref_logits = forward("reference", reference, input_ids, attention_mask, position_ids)
    eos = torch.tensor(eos_ids, device=input_ids.device)
    done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
    positions = position_ids[:, -1:]
    tokens = []
    for _ in range(max_new_tokens):
        logps = geometric_mixture_logits(policy_logits, ref_logits, mixture_coef)  # (B, V)
        if temperature is None:
            next_tokens = logps.argmax(-1)
        else:
            next_tokens = torch.multinomial(torch.softmax(logps / temperature, dim=-1), 1, generator=generator)[:, 0]
        next_tokens = torch.where(done, torch.full_like(next_tokens, pad_id), next_tokens)
        tokens.append(next_tokens)
        done = done | torch.isin(next_tokens, eos)
        if bool(done.all()):
            break
        attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], dim=1)
        positions = positions + 1
        policy_logits = forward("policy", policy, next_tokens[:, None], attention_mask, positions)
        ref_logits = forward("reference", reference, next_tokens[:, None], attention_mask, positions)
    return torch.stack(tokens, dim=1)


@dataclass
class NashMDConfig(OnlineDPOConfig):
    """TRL's NashMDConfig: OnlineDPOConfig plus mixture_coef (loss_type is not used: Nash-MD has its own loss)."""

    mixture_coef: float | list[float] = field(default=0.5, metadata={
        "help": "Weight c of the reference in the opponent pi_mix ~ ref^c * pi^(1 - c), in [0, 1]; a list gives one "
                "per epoch, the last for the rest."})
    output_dir: str | None = field(default="nash-md-model", metadata={"help": "Where checkpoints and the final model go."})

    def __post_init__(self):
        if self.num_generations != 2:
            raise ValueError(f"num_generations={self.num_generations!r}: Nash-MD compares the policy's answer "
                             "with one from elsewhere: exactly 2")
        self.mixture_coef = check_schedule("mixture_coef", self.mixture_coef, positive=False, at_most_one=True)
        super().__post_init__()


class NashMDTrainer(OnlineDPOTrainer):
    """Nash-MD with TRL's constructor and config; logs TRL's loss/kl, loss/score, rewards/probabilities,
    objective/entropy, val/model_contain_eos_token, val/ref_contain_eos_token, beta and mixture_coef."""

    config_class = NashMDConfig
    _name = "NashMD"
    reference_scores_second = False  # the loss reads the reference's log-probs of the policy's own answers only

    @property
    def mixture_coef(self) -> float:
        return value_for_epoch(self.args.mixture_coef, self.state.epoch or 0)

    def _generate_pair(self, prompt_ids: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        # 1. the policy's answer, and the opponent's from the geometric mixture
        own = self._sample(prompt_ids)
        device = self.accelerator.device
        input_ids, attention_mask = left_pad(prompt_ids, self.processing_class.pad_token_id)
        policy = self.accelerator.unwrap_model(self.model)
        reference = self.accelerator.unwrap_model(self.ref_model) if self.ref_model is not None else policy
        context = (lambda: policy.disable_adapter()) if self.ref_model is None else contextlib.nullcontext
        was_training = policy.training
        policy.eval()
        try:
            with self.accelerator.autocast():
                mixture = sample_geometric_mixture(policy, reference, input_ids.to(device), attention_mask.to(device),
                                                   self.args.max_new_tokens, self.mixture_coef, self.eos_ids,
                                                   self.processing_class.pad_token_id, self.args.temperature,
                                                   reference_context=context)
        finally:
            policy.train(was_training)
        return own, self._cut_after_eos(mixture)

    def compute_loss(self, model, inputs: dict, return_outputs: bool = False, num_items_in_batch=None):
        if return_outputs:
            raise ValueError("The NashMDTrainer does not support returning outputs")
        # 2. REINFORCE on the policy's own answers (rows 0..B) by their probability of beating the mixture's
        batch_size = len(inputs["verdicts"])
        own = {k: inputs[k][:batch_size] for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")}
        token_logps = self._token_logps(model, own)  # (B, C)
        if "scores" in inputs:
            probability = win_probability_from_scores(inputs["scores"][:batch_size], inputs["scores"][batch_size:])
        else:
            probability = win_probability_from_verdicts(inputs["verdicts"])
        losses, score, kl = nash_md_losses(token_logps, inputs["ref_token_logps"][:batch_size], own["completion_mask"],
                                           probability.to(token_logps.dtype), self.beta)
        metrics = self._metrics[self._mode()]
        metrics["loss/kl"].append(kl.mean().item())
        if self.model.training:
            self._micro_step_kls.append(kl.mean().item())  # the KL budget's (OnlineDPOTrainer.spent_kl_budget)
        metrics["loss/score"].append(score.mean().item())
        metrics["rewards/probabilities"].append(probability.mean().item())
        metrics["objective/entropy"].append((-token_logps.detach().sum(-1)).mean().item())
        metrics["val/model_contain_eos_token"].append(inputs["has_eos"][:batch_size].float().mean().item())
        metrics["val/ref_contain_eos_token"].append(inputs["has_eos"][batch_size:].float().mean().item())
        metrics["beta"].append(self.beta)
        metrics["mixture_coef"].append(self.mixture_coef)
        return losses.mean()


__all__ = ["NashMDConfig", "NashMDTrainer", "sample_geometric_mixture"]
