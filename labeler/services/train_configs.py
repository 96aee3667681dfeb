"""What a training run is configured with: the job's own settings (JobConfig) plus the stage trainer's config.

A run's `config_json` is `{"job": {...changed JobConfig fields...}, "trainer": {...changed trainer fields...}}`.
`--set key=value` (CLI), a `--config FILE.json` and the Train tab's form all go through `resolve_run_config`,
which looks each key up in JobConfig first, then in the stage's trainer config (labeler/forms.py does the
parsing), so the same typo fails the same way everywhere.
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from labeler import forms
from labeler.services.errors import InputError
from labeler.services.export import data_field
from labeler.services.run_estimate import budget_seconds
from rlhf.hardware import bf16_is_fast

STAGES = ("sft", "rm", "dpo", "ppo", "grpo", "rloo", "kto")
# The trainer config class of each stage, imported lazily (torch/transformers are slow to import).
STAGE_CONFIG_CLASSES = {
    "sft": "rlhf.sft:SFTConfig",
    "rm": "rlhf.reward:RewardConfig",
    "dpo": "rlhf.dpo:DPOConfig",
    "ppo": "rlhf.configs:PPOConfig",
    # TRL 1.x trainers, with the app's CPU defaults (labeler/services/stage_runners_online.py)
    "grpo": "labeler.services.stage_runners_online:StudioGRPOConfig",
    "rloo": "labeler.services.stage_runners_online:StudioRLOOConfig",
    "kto": "labeler.services.stage_runners_online:StudioKTOConfig",
}
# The trainer fields the Train tab shows; every other field is still settable with --set or a JSON file.
# (steps, seed and bf16 are job settings, passed on to the trainer: max_steps, seed, bf16.)
FORM_FIELDS = {
    "sft": ["learning_rate", "per_device_train_batch_size", "max_length", "completion_only_loss", "packing"],
    "rm": ["learning_rate", "per_device_train_batch_size", "max_length", "center_rewards_coefficient"],
    "dpo": ["learning_rate", "per_device_train_batch_size", "beta", "loss_type", "max_length"],
    "ppo": ["learning_rate", "batch_size", "mini_batch_size", "ppo_epochs", "init_kl_coef", "adap_kl_ctrl",
            "target"],
    "grpo": ["learning_rate", "per_device_train_batch_size", "num_iterations", "beta", "loss_type", "scale_rewards",
             "epsilon"],
    "rloo": ["learning_rate", "per_device_train_batch_size", "num_iterations", "beta", "normalize_advantages"],
    "kto": ["learning_rate", "per_device_train_batch_size", "beta", "desirable_weight", "undesirable_weight"],
}


def _check(condition: bool, name: str, value, why: str) -> None:
    if not condition:
        raise ValueError(f"{name}={value!r}: {why}")


@dataclass(frozen=True)
class JobConfig:
    """Settings of the job around the trainer: which model and data, how rewards are made, when to checkpoint."""

    model: str = field(default="", metadata={"help": "Base model: a registry name, 'default', a folder or a hub id "
                                                     "(blank: 'default-encoder' for rm, 'default' otherwise)."})
    output_name: str = field(default="", metadata={"help": "Registry name of the trained model (blank: <stage>-run<id>)."})
    steps: int = field(default=40, metadata={"help": "Optimizer steps (sft/rm/dpo: max_steps; ppo: PPO batches of 64 answers: 40 take about 12 minutes on 2 CPU cores; grpo/rloo: generation batches; kto: max_steps)."})
    time_budget: str | None = field(default=None, metadata={
        "help": "PPO: wall time the run may take, e.g. 20m or 1h30m (blank: none). steps is then fitted to it from a "
                "micro-step measured on this machine when the run is queued, and the run says what it chose."})
    checkpoint_every: int = field(default=10, metadata={
        "help": "Save a resumable checkpoint every N steps (0: only at the end). PPO with reward human or mix saves "
                "one after every step and keeps the newest only (people's labels cannot be asked for again)."})
    bf16: bool = field(default_factory=bf16_is_fast, metadata={
        "help": "bf16 autocast for training and generation (default: on where the hardware runs it fast: CPUs with "
                "AVX-512 BF16 or AMX, GPUs with bf16; the value used is stored with the run)."})
    lora: bool = field(default=False, metadata={"help": "Train a LoRA adapter instead of all weights."})
    lora_r: int = field(default=8, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=16, metadata={"help": "LoRA scaling alpha."})
    # Data: straight from the database through export's row functions and its filters.
    annotators: str = field(default="", metadata={"help": "Comma-separated annotators whose labels are used (blank: all)."})
    min_annotators: int = data_field("min_annotators")
    min_agreement: float | None = data_field("min_agreement")
    # On for training (export's default is off): an RM or DPO run on a project with ratings only still has pairs.
    include_rating_pairs: bool = data_field("include_rating_pairs", default=True)
    sft_min_score: float | None = field(default=None, metadata={"help": "SFT: keep rated answers with a mean score at least this (blank: the scale's midpoint)."})
    test_size: float = field(default=0.1, metadata={"help": "Held-out fraction for evaluation."})
    # PPO
    reward: Literal["rm", "human", "mix", "function"] = field(default="rm", metadata={
        "help": "PPO reward source: rm: the reward model · human: the Rate tab · mix: both · function: e.g. VADER.",
        "widget": "radio"})
    reward_model: str = field(default="", metadata={
        "help": "Reward model (registry name or folder) for rm/mix; blank: the newest registered one.",
        "widget": "dropdown"})  # the Train tab lists the registered reward models
    reward_function: str = field(default="vader", metadata={"help": "For reward=function: 'vader' (VADER sentiment of the answer alone), 'vader-with-prompt' or module:function taking (queries, responses)."})
    subtract_query_score: bool = field(default=False, metadata={"help": "Reward model: subtract the query's own score."})
    # A reward model's scores have an arbitrary offset and scale; standardised on its training answers (the base
    # policy's), at the spread of VADER and of human ratings on base answers (std 0.37 and about 0.5 on [-1, 1]),
    # the one init_kl_coef tuned on VADER fits them too (raw, the demo's reward model reached KL 18 nats).
    rm_score_std: float | None = field(default=0.5, metadata={
        "help": "Reward model: standardise its scores with the mean and std of its training answers (saved with "
                "it), then scale to this std; blank: raw scores."})
    w_human: float = field(default=1.0, metadata={"help": "mix: weight of the human reward."})
    w_rm: float = field(default=1.0, metadata={"help": "mix: weight of the reward model."})
    human_timeout: float = field(default=300.0, metadata={"help": "Seconds to wait for human ratings of a batch."})
    timeout_policy: Literal["skip", "wait", "rm"] = field(default="skip", metadata={
        "help": "Rollouts without a rating at the timeout: skip them, wait again, or score them with the reward model."})
    human_label: Literal["ranking", "rating"] = field(default="ranking", metadata={
        "help": "human/mix: how people judge a batch: rank each prompt's answers in one item (one label per group; "
                "the order is all RLOO needs) or rate each answer on the Likert scale.", "widget": "radio"})
    human_share: float = field(default=0.25, metadata={
        "help": "mix: share of each batch's answer groups that people judge (those the reward model is least sure "
                "of, one in four at random); the online reward model scores the rest."})
    online_rm: bool = field(default=True, metadata={
        "help": "mix: the reward model learns from every human label during the run (warm start from reward_model "
                "when one is registered or named, else from the encoder); off: a frozen reward model, people "
                "rate every answer, and rewards are w_human * human + w_rm * rm."})
    rm_refit_every: int = field(default=8, metadata={
        "help": "mix with online_rm: refit the reward model in the background after this many new labels."})
    # On by default: people label batch k+1 while the trainer steps on batch k. Off, the trainer idled 25% of a
    # mixed run (five annotators at 2 s a label, bench/human_loop.py) waiting for each batch's rankings.
    human_overlap: bool = field(default=True, metadata={
        "help": "human/mix: generate the next batch and queue it for people while the trainer steps on the "
                "current one (one batch of staleness, corrected by the PPO ratio against the generating policy); "
                "off: the trainer waits for each batch's labels."})
    heldout_every: int = field(default=10, metadata={
        "help": "PPO: every N steps, answer the held-out prompts once each and log their positive share and mean "
                "reward (the evaluation's measure), so the Train tab plots progress during the run (0: off)."})
    max_new_tokens: int = field(default=16, metadata={"help": "PPO: tokens generated per rollout."})
    answers_per_prompt: int = field(default=4, metadata={
        "help": "PPO: answers sampled per prompt in each batch; RLOO compares each with the others (must divide "
                "batch_size)."})
    samples_per_step: int = field(default=4, metadata={"help": "PPO: generations stored per step for the samples table."})
    seed: int = field(default=0, metadata={"help": "Random seed of the job (data split, prompt order)."})
    eval_samples: int = field(default=4, metadata={
        "help": "sft/dpo/ppo: answers per held-out prompt (split 'test') in the automatic evaluation of the "
                "finished model against its base (0: no evaluation)."})
    runner: str = field(default="", metadata={"help": "Advanced: module:function running the stage instead of the built-in one."})
    # More than one process: `accelerate launch` with the user's setup (launch.worker_command, README "More than
    # one GPU or machine"). Blank falls back to the server's RLHF_STUDIO_NUM_PROCESSES / _ACCELERATE_CONFIG,
    # then accelerate's own default config file, then one process.
    num_processes: int | None = field(default=None, metadata={
        "help": "Training processes (accelerate launch --num_processes: one per GPU; gloo ranks on a CPU-only "
                "machine). Each PPO rank generates its own batch_size answers. Blank: RLHF_STUDIO_NUM_PROCESSES, "
                "else the accelerate config's, else 1."})
    accelerate_config: str = field(default="", metadata={
        "help": "accelerate config file (YAML, as `accelerate config` writes it, e.g. configs/accelerate/ddp.yaml) "
                "for DDP, DeepSpeed, FSDP or several machines. Blank: RLHF_STUDIO_ACCELERATE_CONFIG, else "
                "accelerate's default config file."})

    def __post_init__(self):
        _check(self.steps >= 1, "steps", self.steps, "must be at least 1")
        _check(self.checkpoint_every >= 0, "checkpoint_every", self.checkpoint_every, "must be 0 or positive")
        budget_seconds(self.time_budget)  # ValueError naming time_budget and the bad value
        _check(self.lora_r >= 1, "lora_r", self.lora_r, "must be at least 1")
        _check(self.min_annotators >= 1, "min_annotators", self.min_annotators, "must be at least 1")
        _check(self.rm_score_std is None or self.rm_score_std > 0, "rm_score_std", self.rm_score_std, "must be positive (blank: raw scores)")
        _check(0 <= self.test_size < 1, "test_size", self.test_size, "must be in [0, 1)")
        _check(self.human_timeout > 0, "human_timeout", self.human_timeout, "must be positive")
        _check(self.w_human >= 0 and self.w_rm >= 0, "w_human/w_rm", (self.w_human, self.w_rm), "must be >= 0")
        _check(self.max_new_tokens >= 1, "max_new_tokens", self.max_new_tokens, "must be at least 1")
        _check(0 < self.human_share <= 1, "human_share", self.human_share, "must be in (0, 1]")
        _check(self.rm_refit_every >= 1, "rm_refit_every", self.rm_refit_every, "must be at least 1")
        _check(self.heldout_every >= 0, "heldout_every", self.heldout_every, "must be 0 (off) or positive")
        _check(not (self.reward in ("human", "mix") and self.human_label == "ranking"
                    and not 2 <= self.answers_per_prompt <= 8), "answers_per_prompt", self.answers_per_prompt,
               "human_label=ranking puts each prompt's answers in one ranking: 2 to 8 answers (or human_label=rating)")
        _check(self.answers_per_prompt >= 1, "answers_per_prompt", self.answers_per_prompt, "must be at least 1")
        _check(self.runner == "" or ":" in self.runner, "runner", self.runner, "must be module:function")
        _check(self.num_processes is None or self.num_processes >= 1, "num_processes", self.num_processes,
               "must be at least 1 (blank: the server's setting)")
        _check(not (self.num_processes and self.num_processes > 1 and self.reward in ("human", "mix")),
               "num_processes", self.num_processes, f"reward={self.reward} needs one process (the rating queue is "
               "the main process's; train with reward=rm or function on several)")

    def base_model(self, stage: str) -> str:
        return self.model or ("default-encoder" if stage == "rm" else "default")


def stage_config_class(stage: str):
    if stage not in STAGES:
        raise InputError(f"unknown stage {stage!r}; choose one of {', '.join(STAGES)}", field="stage")
    # Imported on demand (the trainers pull in torch); a broken trainer module fails here, loudly.
    module_name, _, cls_name = STAGE_CONFIG_CLASSES[stage].partition(":")
    return getattr(importlib.import_module(module_name), cls_name)


def form_fields(stage: str) -> list[str]:
    names = {spec.name for spec in forms.field_specs(stage_config_class(stage))}
    return [name for name in FORM_FIELDS[stage] if name in names]


# What the web Train form (and its "More settings" box) may set: an allowlist, as anyone with a login can post
# it. Numbers, switches and choices of the training math and the job, nothing that names a file, a folder, code
# to import, a tracker or the hub. A field added to a config later stays command-line only (rlhf-studio train
# --set) until it is listed here.
WEB_JOB_SETTINGS = (
    "model", "output_name", "steps", "time_budget", "checkpoint_every", "bf16", "lora", "lora_r", "lora_alpha",
    "annotators", "min_annotators", "min_agreement", "include_rating_pairs", "sft_min_score", "test_size",
    "reward", "reward_model", "reward_function", "subtract_query_score", "rm_score_std", "w_human", "w_rm",
    "human_timeout", "timeout_policy", "human_label", "human_share", "online_rm", "rm_refit_every", "heldout_every",
    "human_overlap", "max_new_tokens", "answers_per_prompt", "samples_per_step", "seed", "eval_samples",
    "num_processes",
)
WEB_TRAINER_SETTINGS = (
    # optimiser and schedule
    "learning_rate", "weight_decay", "warmup_steps", "lr_scheduler_type", "max_grad_norm", "adam_beta1",
    "adam_beta2", "adam_epsilon", "optim", "gradient_accumulation_steps", "per_device_train_batch_size",
    "per_device_eval_batch_size", "num_train_epochs", "gradient_checkpointing", "logging_steps",
    # sequences and data
    "max_length", "max_prompt_length", "max_completion_length", "packing", "completion_only_loss",
    # preference and reward losses
    "beta", "loss_type", "label_smoothing", "center_rewards_coefficient", "desirable_weight", "undesirable_weight",
    "sync_ref_model", "ref_model_mixup_alpha", "ref_model_sync_steps",
    # PPO
    "batch_size", "mini_batch_size", "ppo_epochs", "init_kl_coef", "adap_kl_ctrl", "target", "horizon", "kl_coef_min", "gamma",
    "lam", "cliprange", "cliprange_value", "vf_coef", "kl_penalty", "whiten_rewards", "early_stopping",
    "target_kl", "ratio_threshold", "use_score_scaling", "use_score_norm", "score_clip", "entropy_coef",
    # GRPO / RLOO sampling and clipping
    "num_iterations", "num_generations", "epsilon", "epsilon_high", "scale_rewards", "normalize_advantages",
    "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "mask_truncated_completions",
    "steps_per_generation", "generation_batch_size",
)


def web_settings(stage: str) -> set[str]:
    """The settings a web form may send for `stage`: WEB_JOB_SETTINGS, the stage's FORM_FIELDS and the listed
    WEB_TRAINER_SETTINGS it has (jobs.create_run(from_web=True) refuses any other, naming it)."""
    names = {spec.name for spec in forms.field_specs(stage_config_class(stage))}
    return set(WEB_JOB_SETTINGS) | set(FORM_FIELDS[stage]) | (set(WEB_TRAINER_SETTINGS) & names)


def split_settings(stage: str, values: dict[str, Any], source: str | None = None) -> tuple[dict, dict]:
    """Raw key -> value settings into (job, trainer) parts; unknown keys raise InputError naming them."""
    job_names = {spec.name for spec in forms.field_specs(JobConfig)}
    trainer_names = {spec.name for spec in forms.field_specs(stage_config_class(stage))}
    job, trainer, unknown = {}, {}, []
    for key, value in values.items():
        if key in job_names:
            job[key] = value
        elif key in trainer_names:
            trainer[key] = value
        else:
            unknown.append(key)
    if unknown:
        raise InputError(f"unknown setting(s) for stage {stage}: {', '.join(sorted(unknown))}", file=source,
                         field=sorted(unknown)[0])
    return job, trainer


def read_config_file(path: str | Path) -> dict[str, Any]:
    """Settings from a JSON or YAML file (.yaml/.yml): flat {"key": value}, or {"job": {...}, "trainer": {...}} as
    stored on a run."""
    from labeler.services.readers import decode_text

    path = Path(path)
    if not path.exists() or path.is_dir():
        raise InputError("config file not found" if not path.exists() else "is a folder, not a config file",
                         file=str(path))
    # Strict UTF-8, NUL bytes refused, a FIFO or a device refused by name: errors name the line, never a traceback.
    text = decode_text(path)
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        from labeler.services.readers import MAX_JSON_DEPTH, check_depth

        try:
            data = check_depth(yaml.safe_load(text), lambda message: InputError(message, file=str(path)))
        except RecursionError:  # deeply nested input: one line, not a traceback
            raise InputError(f"nested more than {MAX_JSON_DEPTH} levels deep", file=str(path)) from None
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            raise InputError(f"not valid YAML: {getattr(error, 'problem', error)}", file=str(path),
                             line=mark.line + 1 if mark else None) from None
    else:
        from labeler.services.readers import load_json

        try:
            data = load_json(text, lambda message: InputError(message, file=str(path)))  # depth capped
        except json.JSONDecodeError as error:
            raise InputError(f"not valid JSON: {error.msg}", file=str(path), line=error.lineno) from None
    if not isinstance(data, dict):
        raise InputError("expected a mapping of settings (key: value)", file=str(path))
    if set(data) <= {"job", "trainer"} and all(isinstance(v, dict) for v in data.values()):
        return {**data.get("job", {}), **data.get("trainer", {})}
    return data


def resolve_run_config(stage: str, values: dict[str, Any], source: str | None = None) -> dict[str, dict]:
    """Validate settings for a stage; returns the run's config_json content {"job": ..., "trainer": ...}.

    Trainer settings are validated by building the trainer config once here (not only in the worker), so a
    bad value is refused before a run is queued.
    """
    job_values, trainer_values = split_settings(stage, values, source)
    job = forms.build_config(JobConfig, job_values, source)
    cls = stage_config_class(stage)
    trainer_config = forms.build_config(cls, _trainer_defaults(stage, cls, trainer_values), source)
    trainer = {k: v for k, v in forms.to_dict(trainer_config).items() if k in trainer_values}
    if stage == "ppo":
        try:
            trainer_config.prompts_per_batch(job.answers_per_prompt)  # PPO's rollout rule, checked by the library
        except ValueError as error:
            raise InputError(str(error), file=source, field="answers_per_prompt") from None
    # bf16 is stored even at its default: the default depends on the machine, the run must not.
    return {"job": {**forms.changed(job), "bf16": job.bf16}, "trainer": trainer}


def _trainer_defaults(stage: str, cls, values: dict[str, Any]) -> dict[str, Any]:
    # TrainingArguments needs an output_dir and defaults to reporting to installed integrations: the app
    # stores metrics itself, so report_to none unless set.
    names = {spec.name for spec in forms.field_specs(cls)}
    out = dict(values)
    if "output_dir" in names:
        out.setdefault("output_dir", "unused")
    if "report_to" in names:
        out.setdefault("report_to", "none")
    return out


def load_job_config(config_json: str | dict) -> JobConfig:
    data = json.loads(config_json) if isinstance(config_json, str) else config_json
    return forms.build_config(JobConfig, data.get("job", {}))
