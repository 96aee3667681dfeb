"""The trainer tests' parameter checks, as TRL's tests do them: a snapshot before training, then every trainable
parameter changed and no frozen one did (assert_trained), or the names that changed (changed)."""
from __future__ import annotations

import torch


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def changed(before: dict[str, torch.Tensor], model: torch.nn.Module) -> list[str]:
    """The names of the model's parameters that differ from the snapshot, in the model's order."""
    return [name for name, p in model.named_parameters() if not torch.equal(before[name], p.detach())]


def assert_trained(before: dict[str, torch.Tensor], model: torch.nn.Module, no_gradient: tuple[str, ...] = ()) -> None:
    """`no_gradient`: name endings of trainable parameters the loss cannot move (checked to stay put)."""
    params = dict(model.named_parameters())
    assert set(params) == set(before), "the model's parameters are not the ones snapshotted"
    for name in params:
        if no_gradient and name.endswith(no_gradient):
            assert torch.equal(before[name], params[name]), f"{name} has no gradient, yet it changed"
    trainable = [name for name, p in params.items() if p.requires_grad]
    assert trainable, "no trainable parameter"
    stuck = [name for name in trainable
             if torch.equal(before[name], params[name]) and not (no_gradient and name.endswith(no_gradient))]
    moved = [name for name, p in params.items() if not p.requires_grad and not torch.equal(before[name], p)]
    assert not stuck, f"trainable parameters that did not change: {stuck}"
    assert not moved, f"frozen parameters that changed: {moved}"
