"""PPOTrainer's checkpoints and saving: its state (optimizer, scheduler, beta, running score moments, step, every
rank's RNG states, the fp16 gradient scaler's scale), resumable checkpoints (save_checkpoint / load_checkpoint), and TRL
0.11's save_pretrained and push_to_hub. Kept apart from rlhf/ppo.py, which holds the algorithm; PPOTrainer takes these
methods from PPOCheckpointing, which reads the trainer's optimizer, lr_scheduler, kl_ctl, running, current_step,
generator, data_generator, accelerator, model, tokenizer, config, last_stats, is_peft and scaler.
"""
from __future__ import annotations

import os
import random
import warnings
from pathlib import Path

import torch

from rlhf.configs import PPOConfig
from rlhf.distributed import full_state_dict
from rlhf.value_head import VALUE_HEAD_FILE, AutoModelForCausalLMWithValueHead

TRAINER_STATE_FILE = "trainer_state.pt"


class PPOCheckpointing:
    """PPOTrainer's checkpoint / resume and save / push methods (every one that reaches a collective must be called
    on every rank)."""

    def state_dict(self) -> dict:
        """Everything but the weights: optimizer, scheduler, beta, running score stats, step, RNG states, and the
        fp16 gradient scaler's state (its scale and growth tracker; None without a scaler: bf16 or fp32 runs).

        The optimizer state is this rank's (under DDP the same on every rank). The RNG states are every
        rank's, in rank order (`rng_per_rank`, gathered: call on every rank), so each rank resumes its own
        sampling; `rng` is this rank's, as a single process saves it."""
        from accelerate.utils import gather_object

        rng = {"torch": torch.get_rng_state(), "shuffle": self.generator.get_state(),
               "data": self.data_generator.get_state(), "python": random.getstate()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        rng_per_rank = gather_object([rng]) if self.accelerator.num_processes > 1 else [rng]
        return {
            "optimizer": self.optimizer.state_dict(),
            "lr_scheduler": self.lr_scheduler.state_dict() if self.lr_scheduler is not None else None,
            "kl_ctl": self.kl_ctl.state_dict(),
            "running": self.running.state_dict(),
            "step": self.current_step,
            "rng": rng,
            "rng_per_rank": rng_per_rank,
            "grad_scaler": _scaler_state(self.scaler),
        }

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if self.lr_scheduler is not None and state.get("lr_scheduler") is not None:
            self.lr_scheduler.load_state_dict(state["lr_scheduler"])
        self.kl_ctl.load_state_dict(state["kl_ctl"])
        self.running.load_state_dict(state["running"])
        self.current_step = int(state["step"])
        rng = state["rng"]
        per_rank = state.get("rng_per_rank") or []
        if len(per_rank) == self.accelerator.num_processes:  # else (a new world size) every rank takes rng
            rng = per_rank[self.accelerator.process_index]
        torch.set_rng_state(rng["torch"])
        self.generator.set_state(rng["shuffle"])
        self.data_generator.set_state(rng["data"])
        random.setstate(_as_tuples(rng["python"]))
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        self._load_scaler_state(state.get("grad_scaler"))

    def _load_scaler_state(self, saved: dict | None) -> None:
        """Resume the fp16 scaler where it was: a fresh one starts at 65536 and skips (overflowing) steps until it
        halves back down to the scale the run had found. A checkpoint without it (written before the scaler was
        saved, or by a bf16/fp32 run) leaves the fresh scaler as it is; a saved scale with no scaler here (the run
        resumed in bf16 or fp32, e.g. on a GPU with bf16) is of no use, and the warning says precision changed."""
        scaler = getattr(self, "scaler", None)
        if not saved:
            return
        if scaler is None:
            warnings.warn(f"PPOTrainer.load_checkpoint: the checkpoint was written by an fp16 run (gradient scale "
                          f"{saved.get('scale')}); this run has no fp16 gradient scaler (bf16 or fp32), so the "
                          f"saved scale is ignored", UserWarning, stacklevel=3)
            return
        scaler.load_state_dict(saved)

    def save_checkpoint(self, directory: str | os.PathLike) -> Path:
        """Weights as safetensors (save_pretrained: backbone or adapter, plus value head) and the trainer
        state as trainer_state.pt, loadable with torch.load(weights_only=True).

        Call it on every rank: the state gathers the ranks' RNG states, the main process alone writes, and
        every rank returns once the files are there (so any rank may read them next). Under DDP the main
        process's weights are everyone's; ZeRO-3/FSDP shards are gathered (gathered_state_dict). The optimizer
        state is the main process's (under FSDP/ZeRO its shard only)."""
        directory = Path(directory)
        state = self.state_dict()
        weights = self.gathered_state_dict()
        if self.accelerator.is_main_process:
            directory.mkdir(parents=True, exist_ok=True)
            self.unwrapped_model.save_pretrained(directory, state_dict=weights)
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(directory)
            torch.save(state, directory / TRAINER_STATE_FILE)
        self.accelerator.wait_for_everyone()
        return directory

    def gathered_state_dict(self) -> dict[str, torch.Tensor] | None:
        """The policy's whole weights when ZeRO-3 / FSDP shard them (accelerate's get_state_dict, or FSDP's full
        state dict for a model sharded by hand), for the main process to save; None when not sharded (the
        unwrapped model's own parameters are whole). A collective under sharding: call on every rank."""
        return full_state_dict(self.accelerator, self.model)

    def save_pretrained(self, save_directory: str | os.PathLike, *, config=None, repo_id: str | None = None,
                        push_to_hub: bool = False, model_card_kwargs: dict | None = None,
                        **push_to_hub_kwargs) -> str | None:
        """TRL 0.11's PPOTrainer.save_pretrained (huggingface_hub's ModelHubMixin): the policy (backbone or
        adapter, value head in both layouts), the tokenizer and a README.md model card (settings, steps, the last
        step's stats), written offline too (TRL's needs the Hub's whoami()). `push_to_hub=True` then pushes to
        `repo_id` (default: the folder's name) and returns the commit URL. `config` and `model_card_kwargs` are
        TRL's mixin arguments, accepted and unused: the folder's config.json is the model's, the card ours.
        Call on every rank, as save_checkpoint (ZeRO-3/FSDP shards are gathered: gathered_state_dict)."""
        from rlhf.cards import model_card, write_card

        directory = Path(save_directory)
        weights = self.gathered_state_dict()
        if self.accelerator.is_main_process:
            directory.mkdir(parents=True, exist_ok=True)
            model = self.unwrapped_model
            model.save_pretrained(directory, state_dict=weights)
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(directory)
            base = getattr(model.config, "_name_or_path", None) or None
            metrics = {"steps": self.current_step, "kl_coef": float(self.kl_ctl.value),
                       **{k: v for k, v in self.last_stats.items() if not k.startswith("time/")}}
            estimator = "GAE" if self.config.advantage_estimator == "gae" else "RLOO"
            write_card(directory, model_card(
                title=directory.name, trained_with=f"PPO with {estimator} advantages (rlhf.PPOTrainer, TRL 0.11 API)",
                base_model=str(base) if base else None, settings=plain_values(self.config), metrics=metrics,
                tags=["ppo"], value_head=True, pipeline_tag="text-generation",
                library_name="peft" if self.is_peft else "transformers",
                datasets=[self.config.query_dataset] if self.config.query_dataset else ()))
        self.accelerator.wait_for_everyone()
        if push_to_hub:
            return self.push_to_hub(repo_id or directory.name, **push_to_hub_kwargs)
        return None

    def push_to_hub(self, repo_id: str, *, config=None, commit_message: str = "Push model using huggingface_hub.",
                    private: bool | None = None, token: str | None = None, branch: str | None = None,
                    create_pr: bool | None = None, allow_patterns=None, ignore_patterns=None, delete_patterns=None,
                    model_card_kwargs: dict | None = None) -> str | None:
        """TRL 0.11's (ModelHubMixin's): save_pretrained into a temporary folder, then one upload_folder commit.
        Returns the commit URL on the main process (None elsewhere); call on every rank."""
        import tempfile

        from huggingface_hub import HfApi

        url = None
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / repo_id.split("/")[-1]
            self.save_pretrained(folder)
            if self.accelerator.is_main_process:
                api = HfApi(token=token)
                repo_id = api.create_repo(repo_id=repo_id, private=private, exist_ok=True).repo_id
                url = api.upload_folder(repo_id=repo_id, repo_type="model", folder_path=folder,
                                        commit_message=commit_message, revision=branch, create_pr=create_pr,
                                        allow_patterns=allow_patterns, ignore_patterns=ignore_patterns,
                                        delete_patterns=delete_patterns)
            self.accelerator.wait_for_everyone()  # no rank leaves (and deletes its folder) mid-upload
        return url

    def load_checkpoint(self, directory: str | os.PathLike) -> None:
        """Restore weights and trainer state written by save_checkpoint into this trainer."""
        directory = Path(directory)
        load_weights(self.unwrapped_model, directory)
        self.load_state_dict(torch.load(directory / TRAINER_STATE_FILE, weights_only=True))


def plain_values(config: PPOConfig) -> dict:
    """The config's numbers, strings and bools: what a tracker stores as the run's hyperparameters."""
    from dataclasses import asdict

    return {k: v for k, v in asdict(config).items() if isinstance(v, (int, float, str, bool))}


def load_weights(model: AutoModelForCausalLMWithValueHead, directory: Path) -> None:
    """Load save_pretrained's safetensors (full or sharded backbone, or a peft adapter) into `model`."""
    from safetensors.torch import load_file

    if model.is_peft_model:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model.pretrained_model, load_file(str(directory / "adapter_model.safetensors")))
    else:
        files = sorted(directory.glob("model*.safetensors"))
        if not files:
            raise FileNotFoundError(f"{directory}: no model*.safetensors to resume from")
        state = {}
        for f in files:
            state.update(load_file(str(f)))
        # save_pretrained also writes the value head into the model file, in the layout TRL 0.11 reads
        # (v_head.summary.*); it is loaded from its own file below.
        state = {k: v for k, v in state.items() if not k.startswith("v_head.")}
        result = model.pretrained_model.load_state_dict(state, strict=False)
        # Tied weights (lm_head = embeddings) are saved once, so they may be "missing"; nothing may be extra.
        if result.unexpected_keys:
            raise ValueError(f"{directory}: unexpected weights {result.unexpected_keys[:5]}")
    model.v_head.summary.load_state_dict(load_file(str(directory / VALUE_HEAD_FILE)))


def _scaler_state(scaler: torch.amp.GradScaler | None) -> dict | None:
    """The scaler's state_dict (plain floats and ints: torch.load(weights_only=True) reads it), None without one
    (or a disabled one, whose state_dict is empty)."""
    return (scaler.state_dict() or None) if scaler is not None else None


def _as_tuples(value):
    """random.setstate needs tuples; torch.load may hand lists back."""
    return tuple(_as_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value

