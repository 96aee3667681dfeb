"""The reference model's log-probs for the offline trainers (DPO, KTO): which model gives them, and one pass of it
over a dataset whose results ride along as columns (precompute_ref_log_probs), so a training step needs no
reference forward pass. What the log-probs are (a pair's summed completion log-probs, KTO's mismatched pairs) is
each trainer's own; this module is the plumbing they share."""
from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Callable, Iterator

import torch

from rlhf.distributed import is_sharded
from rlhf.peft_utils import is_peft_model


@contextlib.contextmanager
def reference_model(ref_model: torch.nn.Module | None, model: torch.nn.Module, accelerator) -> Iterator[torch.nn.Module]:
    """The model that gives reference log-probs: `ref_model` when there is one; otherwise the policy `model` with
    its LoRA adapter off, or (before training, with precompute_ref_log_probs) the untrained policy itself, in eval
    mode meanwhile (no dropout in the reference). The policy is run unwrapped (no DDP hooks, and the shared-prompt
    forward applies to it), unless its weights are sharded (ZeRO-3, FSDP): then its wrapper gathers them."""
    if ref_model is not None:
        yield ref_model
        return
    policy = accelerator.unwrap_model(model)
    was_training = policy.training
    policy.eval()
    try:
        with policy.disable_adapter() if is_peft_model(policy) else contextlib.nullcontext():
            yield model if is_sharded(accelerator, model) else policy
    finally:
        policy.train(was_training)


def with_reference_columns(dataset, collate: Callable[[list[dict]], dict[str, torch.Tensor]], batch_size: int,
                           device, reference_logps: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]):
    """`dataset` (a datasets.Dataset) plus one column per name that `reference_logps(batch)` returns ((B,) tensors),
    from one pass over it in order, `batch_size` rows at a time, collated by `collate` and moved to `device`."""
    columns: dict[str, list[float]] = defaultdict(list)
    for start in range(0, len(dataset), batch_size):
        batch = collate([dataset[i] for i in range(start, min(start + batch_size, len(dataset)))])
        batch = {key: value.to(device) for key, value in batch.items()}
        for name, values in reference_logps(batch).items():
            columns[name].extend(values.tolist())
    for name, values in columns.items():
        dataset = dataset.add_column(name, values)
    return dataset


__all__ = ["reference_model", "with_reference_columns"]
