"""What a trainer needs to run the same code on 1 or N processes (accelerate: DDP, DeepSpeed ZeRO, FSDP).

prepare_reference: the frozen reference model placed and sharded as the policy is (no bare `.to(device)`).
unwrap_model_for_generation: the policy whole for `generate()`, gathering ZeRO-3 / FSDP shards meanwhile.
gradient_sync: DDP's all-reduce on the last micro-batch of a gradient accumulation only.
full_state_dict: the whole weights of a ZeRO-3 / FSDP-sharded model for saving (None when not sharded).
TRL 0.11 does the same (models/utils.py unwrap_model_for_generation, PPOTrainer._prepare_deepspeed); the
DeepSpeed and FSDP branches could not be run on this project's CPU-only CI (see README, docs/SCALING.md).
"""
from __future__ import annotations

import contextlib
import copy

import torch


def _zero_stage(accelerator) -> int:
    from accelerate.utils import DistributedType

    if accelerator.distributed_type != DistributedType.DEEPSPEED:
        return 0
    return int(accelerator.state.deepspeed_plugin.zero_stage or 0)


def prepare_reference(accelerator, ref_model: torch.nn.Module) -> torch.nn.Module:
    """The frozen reference model placed and wrapped as the policy is, for inference only: on its device with
    accelerate's mixed-precision autocast, never wrapped in DDP (it has no gradients to average); sharded under
    FSDP (TRL 0.11 prepares it the same way), and under DeepSpeed ZeRO-3 initialised as a DeepSpeed inference
    engine with the policy's ZeRO config (TRL's _prepare_deepspeed)."""
    from accelerate.utils import DistributedType

    ref_model = ref_model.eval().requires_grad_(False)
    if _zero_stage(accelerator) == 3:
        import deepspeed

        ds_config = copy.deepcopy(accelerator.state.deepspeed_plugin.deepspeed_config)
        hidden = getattr(getattr(ref_model, "config", None), "hidden_size", None)
        if hidden is not None:
            ds_config["zero_optimization"].update({
                "reduce_bucket_size": hidden * hidden,
                "stage3_param_persistence_threshold": 10 * hidden,
                "stage3_prefetch_bucket_size": 0.9 * hidden * hidden,
            })
        ds_config.pop("optimizer", None)
        ds_config.pop("scheduler", None)
        engine, *_ = deepspeed.initialize(model=ref_model, config=ds_config)
        engine.eval()
        return engine
    # Below ZeRO-3 the reference is a plain replicated model; FSDP shards it (evaluation_mode=False wraps it).
    return accelerator.prepare_model(ref_model, evaluation_mode=accelerator.distributed_type != DistributedType.FSDP)


@contextlib.contextmanager
def unwrap_model_for_generation(model: torch.nn.Module, accelerator):
    """The policy without its DDP/DeepSpeed/FSDP wrapper, whole while the block runs: under ZeRO-3 every rank's
    parameter shards are gathered (a collective: every rank must enter, as many times), under FSDP the full
    parameters are summoned; otherwise it is the unwrapped model as it is. Generation calls the model once per
    token, so gathering once around generate() is far cheaper than ZeRO-3's per-forward gathers."""
    unwrapped = accelerator.unwrap_model(model)
    if _zero_stage(accelerator) == 3:
        import deepspeed

        with deepspeed.zero.GatheredParameters(model.parameters()):
            yield unwrapped
        return
    from torch.distributed.fsdp import FullyShardedDataParallel

    if isinstance(model, FullyShardedDataParallel):
        with FullyShardedDataParallel.summon_full_params(model, writeback=False, recurse=True):
            yield unwrapped
        return
    yield unwrapped


@contextlib.contextmanager
def gradient_sync(accelerator, model: torch.nn.Module, sync: bool):
    """backward() inside this block all-reduces gradients only when `sync` (the last micro-batch of an
    accumulation); accelerate's no_sync is a no-op where it does not apply (one process, ZeRO-2/3)."""
    if sync:
        yield
    else:
        with accelerator.no_sync(model):
            yield


def all_reduce_gradients(accelerator, model: torch.nn.Module) -> None:
    """Average DDP gradients over ranks by hand: for an accumulation whose last micro-batch did no backward
    (skipped), so the micro-batches before it, run under no_sync, were never averaged."""
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return
    for param in model.parameters():
        if param.grad is not None:
            param.grad.copy_(accelerator.reduce(param.grad, "mean"))


def sharded_by_caller(model: torch.nn.Module) -> bool:
    """True for a model already wrapped in torch's FullyShardedDataParallel or fully_shard (FSDP2) before it
    reached the trainer (accelerate offers FSDP on GPUs only, so on CPU ranks it is done by hand)."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    if isinstance(model, FullyShardedDataParallel):
        return True
    try:
        from torch.distributed.fsdp import FSDPModule  # fully_shard (FSDP2), torch >= 2.6
    except ImportError:
        return False
    return any(isinstance(m, FSDPModule) for m in model.modules())


def is_sharded(accelerator, model: torch.nn.Module) -> bool:
    """True when no process holds the model's whole parameters: DeepSpeed ZeRO-3, FSDP through accelerate, or a
    model the caller sharded itself (sharded_by_caller)."""
    from accelerate.utils import DistributedType

    if _zero_stage(accelerator) == 3 or accelerator.distributed_type == DistributedType.FSDP:
        return True
    return sharded_by_caller(model)


def full_state_dict(accelerator, model: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """The whole weights of a sharded model, keys as the unwrapped model's, for saving; None when the model is
    not sharded (one process, DDP, ZeRO-1/2: its own parameters are whole, save them directly).

    A collective under sharding: call it on every rank. ZeRO-3 and accelerate's FSDP go through accelerate's
    get_state_dict (ZeRO-3 needs stage3_gather_16bit_weights_on_model_save); a model wrapped by the caller in
    torch's FSDP gets FSDP's full state dict, fully_shard's get_model_state_dict(full_state_dict=True). Under FSDP
    the weights land on the main process only (CPU offloaded); other ranks get an empty dict."""
    if not is_sharded(accelerator, model):
        return None
    from accelerate.utils import DistributedType
    from torch.distributed.fsdp import FullStateDictConfig, FullyShardedDataParallel, StateDictType

    if _zero_stage(accelerator) == 3 or accelerator.distributed_type == DistributedType.FSDP:
        return accelerator.get_state_dict(model)
    if isinstance(model, FullyShardedDataParallel):
        # offload_to_cpu on CPU ranks crashes torch 2.13's FSDP (a segfault cloning the unsharded tensors).
        on_cpu = all(p.device.type == "cpu" for p in model.parameters())
        config = FullStateDictConfig(offload_to_cpu=not on_cpu, rank0_only=True)
        with FullyShardedDataParallel.state_dict_type(model, StateDictType.FULL_STATE_DICT, config):
            return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
