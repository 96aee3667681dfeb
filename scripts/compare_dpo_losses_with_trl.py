"""Check rlhf/dpo_losses.py against TRL's own DPO loss code, on random fp32 tensors.

    pip download trl==1.16.0 --no-deps -d /tmp/trl && python3 -m zipfile -e /tmp/trl/trl-1.16.0-py3-none-any.whl /tmp/trl116
    python3 scripts/compare_dpo_losses_with_trl.py /tmp/trl116/trl/trainer/dpo_trainer.py

TRL is not imported (its trainers need their own environment): the f-divergence and loss block of
DPOTrainer._compute_loss is cut out of the source and run with a stand-in `self` on the same log-probs, masks and
per-token log-probs as ours. Prints each (f-divergence, loss) pair's relative difference; exit 1 above 1e-5.
The sigmoid loss is compared at label_smoothing 0: TRL 1.x ignores label_smoothing there, this library keeps
TRL 0.x's conservative DPO.
"""
from __future__ import annotations

import argparse
import math
import sys
import types

import torch
import torch.nn.functional as F

from rlhf.dpo_losses import DPO_LOSS_TYPES, F_DIVERGENCE_LOSSES, F_DIVERGENCES, PairLogps, dpo_losses

BLOCK_START = '        if self.f_divergence_type == "reverse_kl":  # standard DPO'
BLOCK_END = "        if self.aux_loss_enabled:\n            aux_loss = outputs.aux_loss"


def trl_loss_block(path: str) -> str:
    source = open(path, encoding="utf-8").read()
    if BLOCK_START not in source or BLOCK_END not in source:
        sys.exit(f"{path}: the loss block's first and last lines were not found (another TRL version?)")
    block = source[source.index(BLOCK_START):source.index(BLOCK_END)]
    return "\n".join(line[8:] for line in block.splitlines())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dpo_trainer_py", help="TRL's trl/trainer/dpo_trainer.py")
    parser.add_argument("--pairs", type=int, default=6, help="preference pairs per batch (default 6)")
    args = parser.parse_args()
    block = trl_loss_block(args.dpo_trainer_py)
    g = torch.Generator().manual_seed(0)
    n, length, beta, alpha, eps, tau = args.pairs, 9, 0.2, 0.3, 0.01, 0.05
    worst = 0.0
    for f_div in F_DIVERGENCES:
        for name in DPO_LOSS_TYPES:
            if f_div != "reverse_kl" and name not in F_DIVERGENCE_LOSSES:
                continue
            smoothing = 0.0 if name == "sigmoid" else eps
            completion_mask = (torch.rand(2 * n, length, generator=g) < 0.8).long()
            completion_mask[:, 0], completion_mask[:, 1] = 0, 1  # a prompt token, then at least one completion token
            per_token_logps = -3 * torch.rand(2 * n, length - 1, generator=g) * completion_mask[:, 1:]
            logps = per_token_logps.sum(1)
            ref = logps + torch.randn(2 * n, generator=g)
            (chosen, rejected), (ref_chosen, ref_rejected) = logps.chunk(2), ref.chunk(2)
            trl_self = types.SimpleNamespace(
                f_divergence_type=f_div, f_alpha_divergence_coef=alpha, beta=beta, loss_types=[name], loss_weights=[1.0],
                label_smoothing=smoothing, use_weighting=False, args=types.SimpleNamespace(discopop_tau=tau))
            env = dict(self=trl_self, torch=torch, F=F, math=math, device="cpu", completion_mask=completion_mask,
                       shift_completion_mask=completion_mask[:, 1:], per_token_logps=per_token_logps,
                       chosen_logps=chosen, rejected_logps=rejected, ref_chosen_logps=ref_chosen,
                       ref_rejected_logps=ref_rejected, chosen_logratios=chosen - ref_chosen,
                       rejected_logratios=rejected - ref_rejected)
            exec(block, env)  # noqa: S102 - TRL's own source, from a file the user points at
            theirs = float(env["loss"])
            pairs = PairLogps(chosen, rejected, ref_chosen, ref_rejected, *completion_mask.sum(1).float().chunk(2),
                              f_divergence=f_div, f_alpha=alpha)
            ours = float(dpo_losses(pairs, beta, name, label_smoothing=smoothing, discopop_tau=tau).mean())
            diff = abs(ours - theirs) / max(1.0, abs(theirs))
            worst = max(worst, diff)
            print(f"{f_div:16s} {name:13s} ours {ours:.6f}  TRL {theirs:.6f}  relative difference {diff:.1e}")
    print(f"largest relative difference: {worst:.1e}")
    return 0 if worst <= 1e-5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
