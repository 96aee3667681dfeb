"""Typed config dataclasses (stdlib imports only). Every field has help text. GenerationSettings is frozen;
PPOConfig is mutable as TRL's is, each assignment validated as the constructor validates.

The CLI's `--set key=value` flags and the UI's forms are built from these fields
(labeler/forms.py), so adding a hyperparameter is adding one field here.
"""
from __future__ import annotations

import importlib.util
import math
import os
import warnings
from dataclasses import dataclass, field, fields
from typing import Literal

from rlhf.hardware import bf16_is_fast
from rlhf.precision import check_dtype, dtype_field, load_in_4bit_field, model_init_kwargs_field

# attn_implementation's values for every trainer (rlhf/attention.py; here so a config imports no transformers).
ATTENTION_CHOICES = ("auto", "lean_eager", "eager", "sdpa", "flash_attention_2", "model")


# ---- the speed and memory settings every trainer applies to its model: one definition each, used by PPOConfig
# below and by the Trainer-based configs' base (rlhf/trainer_config.py TrainerConfig), so they cannot drift apart.
def keep_freed_memory_field():
    return field(default=True, metadata={
        "help": "On CPU, keep freed memory in the process (no page faults per step; see rlhf/cpu_memory.py)."})


def attn_implementation_field(default: str):
    return field(default=default, metadata={
        "help": "Attention kernel of the model (and its reference) while training (TRL's attn_implementation; "
                "model_init_kwargs' attn_implementation sets it too): auto (lean_eager on CPU, see rlhf/attention.py), "
                "lean_eager, eager, sdpa, flash_attention_2 (GPU, needs the flash-attn package), model (keep the "
                "model's own)."})


def share_input_casts_field():
    return field(default=True, metadata={
        "help": "Under bf16 autocast, cast each attention/MLP block's input once for all its projections (one bf16 "
                "copy kept, not 2-3; see rlhf/autocast_inputs.py)."})


def attention_from_init_kwargs(value: str, default: str, model_init_kwargs: dict | None) -> str:
    """The attention kernel when TRL's model_init_kwargs={"attn_implementation": ...} names one: it counts as the
    attn_implementation setting (one setting, two spellings); both set to different kernels is an error."""
    asked = (model_init_kwargs or {}).get("attn_implementation")
    if asked is None or asked == value:
        return value
    _check(value == default, "attn_implementation", value,
           f"disagrees with model_init_kwargs' attn_implementation={asked!r}: set one of them")
    return asked
# Longest answer any stage generates: beyond the context of every model this project trains, and a bound that
# refuses `max_new_tokens=1000000000000` when it is read (a dry run's time estimate once generated for minutes).
MAX_NEW_TOKENS = 32_768


def check_learning_rate(value) -> None:
    """A learning rate is a positive finite number (nan, inf and -1 were accepted by SFT and trained to NaNs)."""
    _check(isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0,
           "learning_rate", value, "must be a positive finite number, e.g. 2e-5")


def check_attn_implementation(value: str) -> None:
    _check(value in ATTENTION_CHOICES, "attn_implementation", value, f"must be one of {', '.join(ATTENTION_CHOICES)}")


# log_with choices that go through accelerate's trackers: the module each imports -> what to pip install
# (mlflow-skinny is the tracking client alone; the full mlflow adds the server UI and its dependencies).
TRACKER_PACKAGES = {"wandb": "wandb", "mlflow": "mlflow-skinny", "trackio": "trackio"}


def _check(condition: bool, name: str, value, why: str) -> None:
    if not condition:
        raise ValueError(f"{name}={value!r}: {why}")


# ---- generation ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class GenerationSettings:
    """Sampling settings. The defaults keep PPO's KL honest (TRL's notes): pure sampling, no top-k/top-p,
    no forced minimum length."""

    max_new_tokens: int = field(default=48, metadata={"help": "Tokens to generate per response."})
    do_sample: bool = field(default=True, metadata={"help": "Sample (True) or greedy decode (False)."})
    temperature: float = field(default=1.0, metadata={"help": "Softmax temperature when sampling."})
    top_k: int = field(default=0, metadata={"help": "Keep only the k most likely tokens (0: off; PPO needs 0)."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass (1.0: off; PPO needs 1.0)."})
    # Counted in new tokens, not prompt + response: with left padding a total length would depend on the batch.
    min_length: int = field(
        default=-1, metadata={"help": "Minimum new tokens before EOS may end a response (-1: off; PPO needs -1)."}
    )
    batch_size: int = field(default=16, metadata={"help": "Prompts generated together (left padding)."})
    seed: int = field(default=0, metadata={"help": "Random seed for sampling."})
    autocast: bool = field(
        default=False, metadata={"help": "Run the forward passes under bfloat16 autocast (faster on recent CPUs)."}
    )

    def __post_init__(self):
        _check(1 <= self.max_new_tokens <= MAX_NEW_TOKENS, "max_new_tokens", self.max_new_tokens,
               f"must be between 1 and {MAX_NEW_TOKENS:,}")
        _check(self.temperature > 0, "temperature", self.temperature, "must be positive")
        _check(self.top_k >= 0, "top_k", self.top_k, "must be 0 (off) or positive")
        _check(0 < self.top_p <= 1, "top_p", self.top_p, "must be in (0, 1]")
        _check(self.batch_size >= 1, "batch_size", self.batch_size, "must be at least 1")

    @property
    def kl_safe(self) -> bool:
        """True when sampling from the full distribution, so the sampled tokens' KL estimate is unbiased.
        rlhf.generation.kl_unsafe_reasons says why not."""
        return (
            self.do_sample
            and self.top_k == 0
            and self.top_p == 1.0
            and self.min_length <= 0
            and self.temperature == 1.0
            and not self.autocast
        )


# ---- PPO -----------------------------------------------------------------------------------------
@dataclass
class PPOConfig:
    """PPO hyperparameters, named as in classic TRL.

    Mutable as TRL's is (`config.batch_size = 8`), but every assignment goes through the same validation as
    the constructor (see __setattr__), so a config is never left inconsistent.

    The defaults are the recipe measured to work on a CPU (the shipped sentiment task as a continuation task, 2
    cores, docs/RECIPES.md): RLOO advantages over 4 answers per prompt, 64 rollouts a step, one pass over them in
    mini-batches of 16, learning rate 6e-5, KL coefficient 0.03 held by the adaptive controller at a target of 9
    nats (40 steps on 2 Intel Xeon cores, alone: 94% positive held-out answers at KL 9.2 in 13.3 min with bf16
    off; two passes at lr 3e-5 and target 6, the defaults before, took 17.1 min with bf16 on and reached 80% at
    KL 5.4). A second pass over the same rollouts costs as much as the first training pass; one pass at twice the
    learning rate with the higher target reached more in less time (one run each; the two changes were not
    measured apart). TRL's sentiment example (lr 1.41e-5, batch 16, 4 epochs of mini-batch 4, GAE,
    init_kl_coef 0.2) made each small batch move the policy far (clipfrac 0.33-0.44) and learned slowly.
    """

    learning_rate: float = field(default=6e-5, metadata={"help": "Adam learning rate."})
    batch_size: int = field(default=64, metadata={"help": "Queries (rollouts) per PPO step."})
    # None -> min(batch_size, 16): TRL's own example `PPOConfig(batch_size=1)` must run, and 16 is the tuned value.
    mini_batch_size: int | None = field(default=None, metadata={
        "help": "Rollouts per forward/backward pass in the PPO epochs (blank: the batch size, at most 16)."})
    gradient_accumulation_steps: int = field(
        default=1, metadata={"help": "Mini-batches whose gradients are summed before one optimizer step."}
    )
    ppo_epochs: int = field(default=1, metadata={"help": "Passes over each batch of rollouts, in shuffled mini-batches."})
    seed: int = field(default=0, metadata={"help": "Seed for sampling, shuffling and the value-head init."})
    # -- reward = score - beta * KL(policy || reference) --
    init_kl_coef: float = field(default=0.03, metadata={"help": "Initial KL coefficient beta."})
    adap_kl_ctrl: bool = field(default=True, metadata={"help": "Adapt beta towards `target` (Ziegler et al. 2019)."})
    target: float = field(default=9.0, metadata={"help": "Target KL (nats per response) for the adaptive controller "
                                                     "(TRL's default is 6)."})
    # Ziegler's controller moves beta by at most a factor 1 + 0.2 * batch_size / horizon per step. TRL's 10,000 suits
    # runs of 100k+ rollouts; the default recipe is 40 x 64 = 2,560, where 10,000 left beta flat (0.029-0.030 while
    # KL sat at 9-12 against 6). 512 lets it move up to 2.5% a step: x2.7 over 40 steps when KL stays far off.
    horizon: int = field(default=512, metadata={
        "help": "Horizon (in rollouts) of the adaptive KL controller: beta changes by at most a factor "
                "1 + 0.2 * batch_size / horizon per step (TRL's default is 10000, for runs of 100k+ rollouts)."})
    kl_coef_min: float = field(default=0.0, metadata={
        "help": "Floor for the adaptive KL coefficient (0: none, as in TRL). At init_kl_coef, beta only rises "
                "above its start when the KL overshoots `target` (the app's default for runs rewarded by people)."})
    kl_penalty: Literal["kl", "abs", "mse", "full"] = field(
        default="kl",
        metadata={"help": "KL estimate per token: kl (logp - logq), abs, mse (0.5 (logp - logq)^2), full (exact, slower)."},
    )
    # -- advantages and losses --
    # RLOO by default: on the shipped task it learned several times faster per CPU-minute than GAE with a fresh
    # value head (bench/learning.py), and human or mixed rewards work with it unchanged.
    advantage_estimator: Literal["rloo", "gae"] = field(
        default="rloo",
        metadata={"help": "rloo: each answer's reward minus the mean reward of the other answers to the same query "
                          "in the batch (Ahmadian et al. 2024; sample several answers per query), no critic to "
                          "learn; gae: the value head's GAE advantages (classic PPO, TRL's PPOTrainer)."},
    )
    gamma: float = field(default=1.0, metadata={"help": "Discount factor for GAE."})
    lam: float = field(default=0.95, metadata={"help": "Lambda for GAE (bias/variance trade-off)."})
    cliprange: float = field(default=0.2, metadata={"help": "Clip range of the policy ratio (1 +- cliprange)."})
    cliprange_value: float = field(default=0.2, metadata={"help": "Clip range of the value prediction around the old value."})
    vf_coef: float = field(default=0.1, metadata={"help": "Weight of the value loss in the total loss."})
    whiten_rewards: bool = field(default=False, metadata={"help": "Whiten per-token rewards (keeping their mean) before GAE."})
    max_grad_norm: float | None = field(default=None, metadata={"help": "Clip the gradient norm to this value (None: off)."})
    # -- safety valves --
    early_stopping: bool = field(default=False, metadata={
        "help": "Run no further PPO epochs once an epoch's last mini-batch has policy KL (mean of old - new "
                "logprobs, TRL 0.11's policy/policykl) above 1.5 * target_kl."})
    target_kl: float = field(default=1.0, metadata={"help": "Policy-KL bound (between old and new policy) for early stopping."})
    ratio_threshold: float = field(
        default=10.0, metadata={"help": "Skip a mini-batch whose mean policy ratio exceeds this (numerical blow-up guard)."}
    )
    # -- scores --
    use_score_scaling: bool = field(default=False, metadata={"help": "Divide scores by their running std."})
    use_score_norm: bool = field(default=False, metadata={"help": "Also subtract the running mean (needs use_score_scaling)."})
    score_clip: float | None = field(default=None, metadata={"help": "Clip scores to +-score_clip after scaling (None: off)."})
    # -- speed and logging --
    bf16: bool = field(default_factory=bf16_is_fast, metadata={
        "help": "bf16 autocast for generation and forward passes (default: on where the hardware runs it fast, "
                "CPUs with AVX-512 BF16 or AMX and GPUs with bf16; off elsewhere)."})
    keep_freed_memory: bool = keep_freed_memory_field()
    # "model" by default: the policy also generates, and eager attention is slower there; in bench/ppo_step.py
    # eager took 2.28x -> 2.02x off the naive baseline's time, so PPO keeps the model's kernel (SDPA).
    attn_implementation: str = attn_implementation_field("model")
    rollout_forward_batch_size: int = field(
        default=16, metadata={"help": "Rollouts per no-grad forward pass (policy and reference logprobs); larger is faster."}
    )
    log_dir: str | None = field(default=None, metadata={"help": "Folder for TensorBoard events and metrics.csv/jsonl (None: no files)."})
    tensorboard: bool = field(default=True, metadata={"help": "Write TensorBoard event files into log_dir."})
    # -- TRL 0.11's PPOConfig fields, so its users' code runs with only the import changed ----------------
    exp_name: str = field(default="rlhf", metadata={"help": "Experiment name (TRL): names the TensorBoard folder runs/<exp_name> under log_with='tensorboard'."})
    log_with: Literal["wandb", "tensorboard", "mlflow", "trackio"] | None = field(default=None, metadata={
        "help": "TRL's tracker choice: tensorboard writes into log_dir (default: project_kwargs['logging_dir'] or "
                "runs/<exp_name>); wandb, mlflow and trackio log through accelerate's trackers and need their "
                "package (checked when training starts, not here); None: log_dir's files and the callback only."})
    tracker_project_name: str = field(default="trl", metadata={"help": "Tracker project name (TRL; wandb's project)."})
    tracker_kwargs: dict = field(default_factory=dict, metadata={"help": "Keyword arguments per tracker, e.g. {\"wandb\": {\"entity\": ...}} (TRL)."})
    accelerator_kwargs: dict = field(default_factory=dict, metadata={"help": "Keyword arguments for accelerate's Accelerator (TRL; PPOTrainer also accepts an accelerator=)."})
    project_kwargs: dict = field(default_factory=dict, metadata={"help": "accelerate ProjectConfiguration arguments (TRL); its logging_dir is the TensorBoard folder."})
    push_to_hub_if_best_kwargs: dict = field(default_factory=dict, metadata={"help": "TRL's push-to-hub-when-best arguments; recorded only, never pushed from training."})
    task_name: str | None = field(default=None, metadata={"help": "Task name, recorded for tracking only (TRL)."})
    model_name: str | None = field(default=None, metadata={"help": "Model name, recorded for tracking only (TRL); load the model yourself with from_pretrained."})
    query_dataset: str | None = field(default=None, metadata={"help": "Dataset name, recorded for tracking only (TRL)."})
    reward_model: str | None = field(default=None, metadata={"help": "Reward model name, recorded for tracking only (TRL)."})
    remove_unused_columns: bool = field(default=True, metadata={"help": "TRL: drop dataset columns the collator does not use; here the data_collator decides what it reads."})
    steps: int = field(default=20000, metadata={"help": "Number of training steps (TRL); your loop decides how many step() calls it makes."})
    forward_batch_size: int | None = field(default=None, metadata={
        "help": "Deprecated alias of mini_batch_size (as in TRL 0.11); rollout_forward_batch_size is the no-grad chunk size."})
    optimize_device_cache: bool = field(default=False, metadata={"help": "TRL's cache emptying between steps; not needed here (a warning says so when set)."})
    optimize_cuda_cache: bool | None = field(default=None, metadata={"help": "Deprecated alias of optimize_device_cache (TRL)."})
    gradient_checkpointing: bool = field(default=False, metadata={
        "help": "Recompute each transformer block's activations in the backward pass instead of keeping them (the "
                "policy's backbone, which the value head reads too): much less activation memory for about a third "
                "more compute per mini-batch; for large models or long answers on a GPU."})
    # How the app's PPO stage loads the policy (rlhf/precision.py model_load_kwargs); PPOTrainer itself takes a model.
    dtype: Literal["float32", "bfloat16", "float16", "auto"] | None = dtype_field()
    model_init_kwargs: dict | None = model_init_kwargs_field()
    load_in_4bit: bool = load_in_4bit_field()
    compare_steps: int = field(default=1, metadata={"help": "Steps between best-model comparisons for push_to_hub_if_best_kwargs (TRL); recorded only."})
    dataset_num_proc: int | None = field(default=None, metadata={"help": "Processes for dataset mapping (TRL); PPOTrainer maps no dataset, so unused."})
    # TRL fills these at runtime; passing them has no effect there either.
    backward_batch_size: int | None = field(default=None, metadata={
        "help": "Rollouts per optimizer step: always mini_batch_size x gradient_accumulation_steps (TRL runtime field; a value passed is replaced)."})
    world_size: int | None = field(default=None, metadata={"help": "TRL runtime field; the process count comes from accelerate. Ignored."})
    is_encoder_decoder: bool | None = field(default=None, metadata={"help": "TRL runtime field (decoder-only models here). Ignored."})
    is_peft_model: bool | None = field(default=None, metadata={"help": "TRL runtime field; read from the model. Ignored."})
    global_batch_size: int | None = field(default=None, metadata={"help": "TRL runtime field (batch_size x processes). Ignored."})
    global_backward_batch_size: int | None = field(default=None, metadata={"help": "TRL runtime field. Ignored."})

    def __post_init__(self):
        # Whether mini_batch_size follows batch_size (None given): a later `config.batch_size = 8` then re-derives it.
        object.__setattr__(self, "_mini_batch_auto", self.mini_batch_size is None and self.forward_batch_size is None)
        # TRL's aliases and implied values, resolved once here (object.__setattr__: not a user assignment), then
        # cleared so a later dataclasses.replace(config, mini_batch_size=...) is not overridden by the alias.
        if self.forward_batch_size is not None:
            warnings.warn("PPOConfig: forward_batch_size is deprecated (as in TRL 0.11), use mini_batch_size",
                          FutureWarning, stacklevel=3)
            object.__setattr__(self, "mini_batch_size", self.forward_batch_size)
            object.__setattr__(self, "forward_batch_size", None)
        if self.mini_batch_size is None:
            object.__setattr__(self, "mini_batch_size", min(self.batch_size, 16))
        if self.optimize_cuda_cache is not None:
            warnings.warn("PPOConfig: optimize_cuda_cache is deprecated (as in TRL 0.11), use optimize_device_cache",
                          FutureWarning, stacklevel=3)
            object.__setattr__(self, "optimize_device_cache", self.optimize_cuda_cache)
            object.__setattr__(self, "optimize_cuda_cache", None)
        if self.optimize_device_cache:
            warnings.warn("PPOConfig: optimize_device_cache does not apply here (PPOTrainer frees its activations "
                          "itself; see keep_freed_memory); ignored", stacklevel=3)
        _check(self.log_with in (None, "tensorboard", *TRACKER_PACKAGES), "log_with", self.log_with,
               "must be 'tensorboard', 'wandb', 'mlflow', 'trackio' or None")
        if self.log_with == "tensorboard" and self.log_dir is None:
            object.__setattr__(self, "log_dir", self.project_kwargs.get("logging_dir") or os.path.join("runs", self.exp_name))
        check_learning_rate(self.learning_rate)
        for name in ("target", "target_kl", "ratio_threshold", "cliprange", "cliprange_value"):
            _check(getattr(self, name) > 0, name, getattr(self, name), "must be positive")
        for name in ("batch_size", "mini_batch_size", "gradient_accumulation_steps", "ppo_epochs", "horizon",
                     "rollout_forward_batch_size", "steps", "compare_steps"):
            _check(getattr(self, name) >= 1, name, getattr(self, name), "must be at least 1")
        _check(self.init_kl_coef >= 0, "init_kl_coef", self.init_kl_coef, "must be >= 0")
        _check(self.kl_coef_min >= 0, "kl_coef_min", self.kl_coef_min, "must be >= 0")
        _check(self.vf_coef >= 0, "vf_coef", self.vf_coef, "must be >= 0")
        _check(0 <= self.gamma <= 1, "gamma", self.gamma, "must be in [0, 1]")
        _check(0 <= self.lam <= 1, "lam", self.lam, "must be in [0, 1]")
        object.__setattr__(self, "attn_implementation",
                           attention_from_init_kwargs(self.attn_implementation, "model", self.model_init_kwargs))
        check_attn_implementation(self.attn_implementation)
        check_dtype(self.dtype)
        _check(self.advantage_estimator in ("rloo", "gae"), "advantage_estimator", self.advantage_estimator,
               "must be rloo or gae")
        _check(self.kl_penalty in ("kl", "abs", "mse", "full"), "kl_penalty", self.kl_penalty, "must be kl, abs, mse or full")
        _check(self.max_grad_norm is None or self.max_grad_norm > 0, "max_grad_norm", self.max_grad_norm, "must be positive or None")
        _check(self.score_clip is None or self.score_clip > 0, "score_clip", self.score_clip, "must be positive or None")
        _check(not self.use_score_norm or self.use_score_scaling, "use_score_norm", self.use_score_norm,
               "only applies together with use_score_scaling=True")
        object.__setattr__(self, "backward_batch_size", self.mini_batch_size * self.gradient_accumulation_steps)
        _check(self.batch_size % self.backward_batch_size == 0, "batch_size", self.batch_size,
               f"must be a multiple of mini_batch_size * gradient_accumulation_steps = {self.backward_batch_size}")
        object.__setattr__(self, "_validated", True)

    def check_trackers(self) -> None:
        """Raise ImportError naming the missing package when `log_with` needs one that is not installed.

        Called when training starts (never at config time: a config is built and stored before any run)."""
        if self.log_with in TRACKER_PACKAGES and importlib.util.find_spec(self.log_with) is None:
            raise ImportError(f"PPOConfig.log_with={self.log_with!r} needs the {self.log_with} package: pip install "
                              f"{TRACKER_PACKAGES[self.log_with]} (or use log_with='tensorboard' or None)")

    def prompts_per_batch(self, answers_per_prompt: int) -> int:
        """PPO's rollout rule: each process generates whole groups, all answers_per_prompt answers to a prompt in
        its own batch_size rollouts, because RLOO's baseline is the other answers to the same prompt on the same
        process (PPOTrainer.step groups equal queries per process). The prompts a batch samples; ValueError naming
        both settings when answers_per_prompt does not divide batch_size."""
        _check(answers_per_prompt >= 1, "answers_per_prompt", answers_per_prompt, "must be at least 1")
        _check(self.batch_size % answers_per_prompt == 0, "answers_per_prompt", answers_per_prompt,
               f"must divide batch_size={self.batch_size} (each process generates whole groups of answers to a "
               "prompt in its batch)")
        return self.batch_size // answers_per_prompt

    def __setattr__(self, name: str, value) -> None:
        """TRL-style `config.field = value`, checked: the config is rebuilt with the new value through __init__
        (same errors as the constructor, derived sizes and aliases resolved again), then takes its state. A
        mini_batch_size that was derived from batch_size is derived again. Warnings about other fields are not
        repeated."""
        if "_validated" not in self.__dict__:  # the constructor's own assignments
            object.__setattr__(self, name, value)
            return
        names = [f.name for f in fields(self) if f.init]
        if name not in names:
            raise AttributeError(f"PPOConfig has no field {name!r}")
        values = {n: getattr(self, n) for n in names}
        if self._mini_batch_auto and name != "mini_batch_size":
            values["mini_batch_size"] = None
        values[name] = value
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            checked = PPOConfig(**values)
        for w in caught:
            if name in str(w.message):
                warnings.warn(w.message, w.category, stacklevel=2)
        self.__dict__.update(checked.__dict__)

    @property
    def optimizer_steps_per_batch(self) -> int:
        """Optimizer steps per PPO step (without early stopping)."""
        return self.ppo_epochs * self.batch_size // self.backward_batch_size
