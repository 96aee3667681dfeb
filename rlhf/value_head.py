"""A causal LM with a scalar value head, for PPO (TRL's AutoModelForCausalLMWithValueHead).

The head is dropout + linear on the last hidden state, kept in fp32. It is saved beside the backbone
as `value_head.safetensors`, so `AutoModelForCausalLM.from_pretrained(folder)` loads the folder as a
plain model and ignores the head, while `AutoModelForCausalLMWithValueHead.from_pretrained(folder)`
brings the head back too. TRL 0.11's layout (the head's `v_head.summary.*` keys inside model.safetensors)
loads as well. With a peft_config the backbone is a PeftModel: save_pretrained writes the
adapter, and `merge_and_unload()` gives a plain transformers model.

PEFT folders: TRL 0.11 writes the head into a pickle, `pytorch_model.bin`, beside the adapter, and reads
`model.safetensors` there first when it exists. This library loads no pickle: such a folder is refused with
the one command that converts it (torch's weights-only loader, run by the user who trusts the file). Ours
write the head both as value_head.safetensors and as `v_head.summary.*` in model.safetensors beside the
adapter, so TRL 0.11 loads them too, without any pickle.
"""
from __future__ import annotations

import contextlib
import copy
import json
import os
import warnings
from pathlib import Path
from typing import Literal

import torch
from torch import nn

from rlhf.loading import resolve_model_path
from rlhf.peft_utils import apply_peft, is_peft_model, merged_model

VALUE_HEAD_FILE = "value_head.safetensors"
TRL_PREFIX = "v_head."  # TRL 0.11 saves the head inside the model's weights as v_head.summary.{weight,bias}


class MissingValueHeadWarning(UserWarning):
    """A folder loaded with AutoModelForCausalLMWithValueHead had no value head: a fresh one was initialised."""


def load_value_head_state(folder: str | os.PathLike) -> dict[str, torch.Tensor] | None:
    """{"weight", "bias"} of the summary layer from value_head.safetensors or, failing that, from the
    `v_head.summary.*` keys of model.safetensors / its shards (TRL 0.11). None, with a warning, when neither."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    folder = Path(folder)
    if (folder / VALUE_HEAD_FILE).exists():
        return load_file(str(folder / VALUE_HEAD_FILE))
    index = folder / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = {name: folder / shard for name, shard in weight_map.items() if name.startswith(TRL_PREFIX)}
    elif (folder / "model.safetensors").exists():
        with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
            files = {name: folder / "model.safetensors" for name in f.keys() if name.startswith(TRL_PREFIX)}
    else:
        files = {}
    state = {}
    for name, file in files.items():
        with safe_open(str(file), framework="pt") as f:
            state[name[len(TRL_PREFIX):]] = f.get_tensor(name)
    if state:
        state = {k.removeprefix("summary."): v for k, v in state.items()}
        if set(state) != {"weight", "bias"}:
            raise ValueError(f"{folder}: value head keys {sorted(files)} are not v_head.summary.weight/bias")
        return state
    trl_peft_pickle = folder / "pytorch_model.bin"
    if (folder / "adapter_config.json").exists() and trl_peft_pickle.exists():
        raise ValueError(trl_peft_conversion_message(folder))
    pickles = sorted(p.name for p in folder.glob("*.bin"))
    why = (f"; {', '.join(pickles)} may hold it (TRL's peft layout) but pickles are not loaded (safetensors only)"
           if pickles else "")
    warnings.warn(f"{folder}: no value head ({VALUE_HEAD_FILE} or v_head.* weights in model.safetensors){why}; "
                  "a fresh one is initialised (expected when starting from a plain language model)",
                  MissingValueHeadWarning, stacklevel=3)
    return None


def trl_peft_conversion_message(folder: Path) -> str:
    """One line: why a TRL 0.11 PEFT value-head folder is refused, and the command that converts it."""
    src, dst = folder / "pytorch_model.bin", folder / VALUE_HEAD_FILE
    command = (f"python -c \"import torch; from safetensors.torch import save_file; s = torch.load({str(src)!r}, "
               f"weights_only=True); save_file({{k.split('v_head.summary.')[1]: v.contiguous() for k, v in s.items() "
               f"if 'v_head.summary.' in k}}, {str(dst)!r})\"")
    return (f"{folder}: the value head is in pytorch_model.bin (TRL 0.11's PEFT layout), a pickle, which this library "
            f"does not load (safetensors only); if you trust the file, convert it once with: {command}")


class ValueHead(nn.Module):
    """dropout -> linear(hidden, 1), in fp32 whatever the backbone's dtype."""

    def __init__(self, hidden_size: int, dropout: float = 0.0, init: Literal["normal", "zero"] = "normal",
                 init_std: float | None = None, generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.summary = nn.Linear(hidden_size, 1, dtype=torch.float32)
        with torch.no_grad():
            self.summary.bias.zero_()
            if init == "zero":
                self.summary.weight.zero_()
            elif init == "normal":
                # std 1/sqrt(hidden): initial values have about the scale of one hidden unit (~1 after the
                # final norm), small next to typical scores, and no bias towards either sign.
                std = init_std if init_std is not None else hidden_size**-0.5
                self.summary.weight.normal_(0.0, std, generator=generator)
            else:
                raise ValueError(f"ValueHead: init={init!r} is not 'normal' or 'zero'")

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        # Autocast off: the value regression target can be large, and bf16 rounds it to 3 digits.
        with torch.autocast(device_type=hidden_states.device.type, enabled=False):
            return self.summary(self.dropout(hidden_states.float())).squeeze(-1)  # (B, T)


class AutoModelForCausalLMWithValueHead(nn.Module):
    """Wraps any causal LM (or a PeftModel of one); forward returns (logits, loss, values) as in TRL."""

    def __init__(self, pretrained_model: nn.Module, v_head_dropout: float = 0.0,
                 v_head_init: Literal["normal", "zero"] = "normal", v_head_init_std: float | None = None,
                 seed: int = 0) -> None:
        super().__init__()
        self.pretrained_model = pretrained_model
        hidden_size = self._hf_model.config.get_text_config().hidden_size
        generator = torch.Generator().manual_seed(seed)
        self.v_head = ValueHead(hidden_size, v_head_dropout, v_head_init, v_head_init_std, generator)
        self.v_head.to(next(pretrained_model.parameters()).device)

    # ---- loading and saving -------------------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike | nn.Module, peft_config=None,
                        dtype=None, trust_remote_code: bool = False, v_head_dropout: float = 0.0,
                        v_head_init: Literal["normal", "zero"] = "normal", v_head_init_std: float | None = None,
                        seed: int = 0, **kwargs) -> "AutoModelForCausalLMWithValueHead":
        """A folder, short name ('default'), hub id or an already loaded transformers/peft model (as in TRL);
        an adapter folder is loaded trainable on its base.

        The value head comes from `value_head.safetensors` (this library's layout) or from `v_head.*` keys in
        the folder's `model.safetensors` (TRL 0.11's layout); a folder with neither gets a fresh head and a
        MissingValueHeadWarning. TRL's value-head arguments are accepted: `summary_dropout_prob` (dropout),
        `v_head_init_strategy` ("normal" or None) with `v_head_initializer_range` (its std).
        """
        from transformers import AutoModelForCausalLM

        v_head_dropout = kwargs.pop("summary_dropout_prob", v_head_dropout)
        if kwargs.pop("v_head_init_strategy", None) == "normal":
            v_head_init, v_head_init_std = "normal", kwargs.pop("v_head_initializer_range", 0.2)
        kwargs.pop("v_head_initializer_range", None)
        if kwargs.pop("reward_adapter", None) is not None:
            raise NotImplementedError("AutoModelForCausalLMWithValueHead: reward_adapter (TRL's reward model as a "
                                      "second adapter) is not supported; score with rlhf.reward.RewardScorer")
        kwargs.pop("reward_adapter_name", None)
        is_trainable = kwargs.pop("is_trainable", True)

        if isinstance(pretrained_model_name_or_path, nn.Module):  # TRL accepts a model object too
            backbone = pretrained_model_name_or_path
            if peft_config is not None and not is_peft_model(backbone):
                from peft import get_peft_model

                backbone = get_peft_model(backbone, peft_config)
            return cls(backbone, v_head_dropout, v_head_init, v_head_init_std, seed)

        path = resolve_model_path(pretrained_model_name_or_path)
        # dtype None: float32 master weights, not transformers 5's "auto" (rlhf/precision.py)
        load = dict(dtype=torch.float32 if dtype is None else dtype, use_safetensors=True,
                    trust_remote_code=trust_remote_code, **kwargs)
        adapter_config = Path(path) / "adapter_config.json"
        if adapter_config.exists():
            from peft import PeftModel

            base = json.loads(adapter_config.read_text())["base_model_name_or_path"]
            backbone = AutoModelForCausalLM.from_pretrained(resolve_model_path(base), **load)
            backbone = PeftModel.from_pretrained(backbone, path, is_trainable=is_trainable)
        else:
            backbone = apply_peft(AutoModelForCausalLM.from_pretrained(path, **load), peft_config)
        model = cls(backbone, v_head_dropout, v_head_init, v_head_init_std, seed)
        state = load_value_head_state(path)
        if state is not None:
            expected = model.v_head.summary.weight.shape
            if state["weight"].shape != expected:
                raise ValueError(f"{path}: value head weight has shape {tuple(state['weight'].shape)}, "
                                 f"the model needs {tuple(expected)}")
            model.v_head.summary.load_state_dict(state)
        return model

    def _head_state(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu().contiguous() for k, v in self.v_head.summary.state_dict().items()}

    def save_pretrained(self, save_directory: str | os.PathLike, state_dict: dict[str, torch.Tensor] | None = None,
                        **kwargs) -> None:
        """Backbone (or adapter) as transformers/peft write it, plus value_head.safetensors; a full model also
        gets the head's v_head.summary.* keys in its weights, the layout TRL 0.11 reads.

        `state_dict`: this wrapper's whole weights (`pretrained_model.*`, `v_head.*` keys), e.g. gathered from
        ZeRO-3 / FSDP shards (rlhf.distributed.full_state_dict); written instead of the module's own parameters."""
        from safetensors.torch import save_file

        os.makedirs(save_directory, exist_ok=True)
        head = self._head_state()
        if state_dict is not None:
            backbone = {k[len("pretrained_model."):]: v for k, v in state_dict.items() if k.startswith("pretrained_model.")}
            head = {k[len(f"{TRL_PREFIX}summary."):]: v.detach().cpu().contiguous() for k, v in state_dict.items()
                    if k.startswith(f"{TRL_PREFIX}summary.")}
            if set(head) != {"weight", "bias"} or not backbone:
                raise ValueError(f"save_pretrained: state_dict has no pretrained_model.* or v_head.summary.weight/bias "
                                 f"keys (got {sorted(state_dict)[:4]}...)")
            kwargs["state_dict"] = backbone
        trl_head = {f"{TRL_PREFIX}summary.{k}": v for k, v in head.items()}
        if not self.is_peft_model:
            # TRL 0.11's layout (the head's keys among the model's weights) written with the weights in one pass:
            # added afterwards, it read and rewrote the whole model file (a 1.5B model's 6 GB in fp32) at every
            # checkpoint. A sharded save indexes them in whichever shard holds them.
            kwargs["state_dict"] = {**(kwargs.get("state_dict") or self.pretrained_model.state_dict()), **trl_head}
        # Both transformers 5 and peft write safetensors by default.
        self.pretrained_model.save_pretrained(save_directory, **kwargs)
        save_file(head, os.path.join(save_directory, VALUE_HEAD_FILE))
        if self.is_peft_model:
            # TRL 0.11 reads a PEFT folder's head from model.safetensors before pytorch_model.bin; transformers
            # and peft load the adapter folder from adapter_config.json and never read this file.
            save_file(trl_head, os.path.join(save_directory, "model.safetensors"), metadata={"format": "pt"})

    def save_merged(self, save_directory: str | os.PathLike, state_dict: dict[str, torch.Tensor] | None = None,
                    dtype: torch.dtype | None = None) -> None:
        """A full model folder that a plain AutoModelForCausalLM.from_pretrained loads (a LoRA adapter merged
        into its base; this wrapper then holds the merged model), the value head beside it (fp32, as trained).

        With `state_dict` (whole weights gathered from shards) the weights come from it and this (sharded)
        module is left as it is: an adapter is written from it and merged on its base, loaded on the CPU.
        `dtype`: the backbone's weights written in it (the base checkpoint's, rlhf.loading.stored_dtype)."""
        from rlhf.loading import mark_saved_dtype, weights_in_dtype

        if state_dict is None:
            self.merge_and_unload()
            state_dict = {f"pretrained_model.{k}": v for k, v in self.pretrained_model.state_dict().items()}
            state_dict.update({f"{TRL_PREFIX}summary.{k}": v for k, v in self._head_state().items()})
        if not self.is_peft_model:
            backbone = weights_in_dtype({k: v for k, v in state_dict.items() if k.startswith("pretrained_model.")},
                                        dtype)
            self.save_pretrained(save_directory, state_dict={**state_dict, **backbone})
            mark_saved_dtype(save_directory, dtype)
            return
        import tempfile

        from safetensors.torch import load_file, save_file

        from rlhf.loading import load_causal_lm

        with tempfile.TemporaryDirectory() as adapter:
            self.save_pretrained(adapter, state_dict=state_dict)
            head = load_file(str(Path(adapter) / VALUE_HEAD_FILE))
            # the base as its adapter names it, in the dtype it was saved in, with the trained adapter on it, and
            # the head's TRL keys written with its weights (as save_pretrained does)
            merged = load_causal_lm(adapter, dtype="auto").merge_and_unload()
            merged.save_pretrained(save_directory, state_dict={
                **weights_in_dtype(merged.state_dict(), dtype),
                **{f"{TRL_PREFIX}summary.{k}": v for k, v in head.items()}})
        save_file(head, os.path.join(save_directory, VALUE_HEAD_FILE))
        mark_saved_dtype(save_directory, dtype)

    def push_to_hub(self, repo_id: str, **kwargs):
        """The backbone's own push_to_hub (as TRL's wrapper does), then value_head.safetensors beside it."""
        from huggingface_hub import HfApi
        from safetensors.torch import save as safetensors_bytes

        result = self.pretrained_model.push_to_hub(repo_id, **kwargs)
        HfApi(token=kwargs.get("token")).upload_file(
            path_or_fileobj=safetensors_bytes(self._head_state()), path_in_repo=VALUE_HEAD_FILE, repo_id=repo_id,
            commit_message="Upload value head")
        return result

    def merge_and_unload(self) -> nn.Module:
        """Merge a LoRA adapter into the backbone; returns the plain transformers model (also kept here)."""
        self.pretrained_model = merged_model(self.pretrained_model)
        return self.pretrained_model

    # ---- the model ----------------------------------------------------------------------------------
    @property
    def is_peft_model(self) -> bool:
        return is_peft_model(self.pretrained_model)

    @property
    def _hf_model(self) -> nn.Module:
        return self.pretrained_model.get_base_model() if self.is_peft_model else self.pretrained_model

    @property
    def config(self):
        return self._hf_model.config

    @property
    def generation_config(self):
        return self._hf_model.generation_config

    def disable_adapter(self):
        """Context in which a peft backbone runs without its adapter: the reference policy."""
        return self.pretrained_model.disable_adapter() if self.is_peft_model else contextlib.nullcontext()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                logits_to_keep: int = 0, with_values: bool = True,
                **kwargs) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(logits (B, K, V), loss, values (B, K)) for the last K = logits_to_keep positions (0: all).

        `with_values=False` (the reference's pass, whose values nobody reads): values None, the head not run.
        No KV cache unless asked (use_cache=True): a scoring or training pass never reuses one, and the cache would
        hold keys and values of every layer until the pass ends."""
        kwargs.setdefault("use_cache", False)
        if not with_values:
            out = self.pretrained_model(input_ids=input_ids, attention_mask=attention_mask,
                                        logits_to_keep=logits_to_keep, **kwargs)
            return out.logits, getattr(out, "loss", None), None
        with last_hidden_state(self._hf_model) as captured:
            out = self.pretrained_model(input_ids=input_ids, attention_mask=attention_mask,
                                        logits_to_keep=logits_to_keep, **kwargs)
        hidden = captured.get("hidden")  # (B, K, H): what the LM head read, after the final norm
        if hidden is None:  # a model whose logits do not come from its output embeddings: ask for all hidden states
            out = self.pretrained_model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True,
                                        logits_to_keep=logits_to_keep, **kwargs)
            hidden = out.hidden_states[-1]  # (B, T, H), after the final norm
        if logits_to_keep:
            hidden = hidden[:, -logits_to_keep:]
        return out.logits, getattr(out, "loss", None), self.v_head(hidden)

    def generate(self, *args, **kwargs):
        return self.pretrained_model.generate(*args, **kwargs)

    def gradient_checkpointing_enable(self, **kwargs) -> None:
        self._hf_model.gradient_checkpointing_enable(**kwargs)


@contextlib.contextmanager
def last_hidden_state(model: nn.Module):
    """{"hidden": the input of the model's LM head during the block}: the last hidden state (after the final norm)
    at the positions logits are computed for (logits_to_keep), which is what the value head reads. Taken this way
    rather than with output_hidden_states=True, which keeps every layer's hidden states alive until the pass ends
    (layers x B x T x H: in a no-grad pass, nothing else would hold them). Empty when the model has no output
    embeddings or computes logits without them."""
    captured: dict[str, torch.Tensor] = {}
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        yield captured
        return
    handle = head.register_forward_pre_hook(lambda module, args: captured.__setitem__("hidden", args[0]))
    try:
        yield captured
    finally:
        handle.remove()


# TRL 0.11's decoder-layer name patterns (GPT-2, OPT, GPT-NeoX, Llama/Mistral/Qwen/...), tried in this order.
LAYER_PATTERNS = ("transformer.h.{layer}", "model.decoder.layers.{layer}", "gpt_neox.layers.{layer}", "model.layers.{layer}")


def shared_parameter_names(model: nn.Module, num_shared_layers: int, pattern: str | None = None) -> list[str]:
    """Names of the parameters before decoder layer `num_shared_layers` (embeddings and layers 0..n-1), in
    named_parameters() order, as TRL 0.11's create_reference_model selects them. `pattern` (e.g.
    "transformer.h.{layer}") overrides the built-in LAYER_PATTERNS; matched as a whole name part, so layer 1
    does not match layer 10."""
    names = [n for n, _ in model.named_parameters()]
    candidates = [pattern] if pattern is not None else list(LAYER_PATTERNS)
    for candidate in candidates:
        marker = candidate.format(layer=num_shared_layers) + "."
        first = next((i for i, n in enumerate(names) if n.startswith(marker) or f".{marker}" in n), None)
        if first is not None:
            return names[:first]
    raise ValueError(f"create_reference_model: num_shared_layers={num_shared_layers}: no parameter matches "
                     f"{', '.join(c.format(layer=num_shared_layers) for c in candidates)} (pass pattern=, e.g. "
                     "'model.layers.{layer}', or fewer layers than the model has)")


def create_reference_model(model: AutoModelForCausalLMWithValueHead, num_shared_layers: int | None = None,
                           pattern: str | None = None, dtype: torch.dtype | None = None
                           ) -> AutoModelForCausalLMWithValueHead:
    """A frozen copy in eval mode: the reference policy for the KL penalty.

    num_shared_layers (TRL 0.11): the policy's parameters before that decoder layer are frozen (no longer
    trained), so policy and reference stay equal there and only the later layers (and the heads) learn.
    `pattern` names the layers when LAYER_PATTERNS does not fit the model. `dtype`: the backbone's weights copied
    in that dtype (rlhf/precision.py reference_dtype: bf16 for a run computing in bf16), never whole in fp32 first.
    """
    from rlhf.precision import copy_in_dtype

    from transformers.integrations import is_deepspeed_zero3_enabled

    if is_deepspeed_zero3_enabled():
        raise ValueError("create_reference_model: DeepSpeed ZeRO-3 is on, and a copy of a sharded model is not a "
                         "model; load the reference with AutoModelForCausalLMWithValueHead.from_pretrained (as TRL says)")
    shared = set(shared_parameter_names(model, num_shared_layers, pattern)) if num_shared_layers is not None else set()
    ref = copy_in_dtype(model, dtype, only=model.pretrained_model)
    for p in ref.parameters():
        p.requires_grad_(False)
    for name, p in model.named_parameters():
        if name in shared:
            p.requires_grad_(False)
    return ref.eval()
