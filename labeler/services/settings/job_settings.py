"""A training job's own settings (around the stage trainer's config), in sections by the part of the job that reads
them: the run itself, the labels it learns from, where a policy's rewards come from, and how it is launched.

Each section is a frozen dataclass that declares and validates its fields; `JobConfig` is the sections together,
one flat namespace, because the flat names are what `--set key=value`, config files, the Train tab and every
stored run's `config_json` ({"job": {...changed fields...}, ...}) use. `section_of(name)` says which section a
setting is in; the Train tab's groups and `train --list-settings` are drawn from SECTIONS.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from typing import ClassVar, Literal

from labeler import forms
from labeler.services.settings import training_stages
from labeler.services.settings.durations import budget_seconds
from labeler.services.settings.label_filters import filter_field
from rlhf.hardware import bf16_is_fast

# The stages, from their registry (on this floor too: training_stages imports no export code).
ALL_STAGES = tuple(training_stages.STAGES)

CONSTRAINT_LR = 1.0  # the Lagrange multiplier's step per batch (JobConfig.constraint_lr says why)


def _check(condition: bool, name: str, value, why: str) -> None:
    if not condition:
        raise ValueError(f"{name}={value!r}: {why}")


@dataclass(frozen=True)
class RunSettings:
    """What is trained, for how long, and what comes out."""

    TITLE: ClassVar[str] = "Run"
    STAGES: ClassVar[tuple[str, ...]] = ALL_STAGES  # the training stages that read this section

    model: str = field(default="", metadata={"help": "Base model: a registry name, 'default', a folder or a hub id "
                                                     "(blank: 'default', the embedded chat model, for every stage; "
                                                     "rm also takes 'default-encoder', the embedded MiniLM)."})
    recipe: Literal["", "0.5b", "1.5b", "3b", "8b"] = field(default="", metadata={
        "help": "Settings for a model of this size on a GPU (answer length, learning rate, mini-batch, LoRA from 3b, "
                "gradient checkpointing; docs/GPU.md lists each); settings given explicitly win. Blank: "
                "the 2-core CPU defaults. train --dry-run suggests one from the model's parameter count."})
    output_name: str = field(default="", metadata={"help": "Registry name of the trained model (blank: <stage>-run<id>)."})
    steps: int = field(default=40, metadata={"help": "Optimizer steps (sft/kto: max_steps; rm/dpo: max_steps, unset: three passes (rm) or one (dpo) over the training pairs, counted when the run is queued; ppo: PPO batches of 64 answers: 40 take about 10 minutes on 2 CPU cores with bf16, 13 without; grpo/rloo: generation batches)."})
    time_budget: str | None = field(default=None, metadata={
        "help": "PPO: wall time the run may take, e.g. 20m or 1h30m (blank: none). steps is then fitted to it from a "
                "micro-step measured on this machine when the run is queued, and the run says what it chose."})
    checkpoint_every: int = field(default=10, metadata={
        "help": "Save a resumable checkpoint every N steps (0: only at the end). PPO with reward human or mix "
                "journals every step and writes its weights as checkpoint_share allows, keeping the newest only."})
    checkpoint_share: float = field(default=0.05, metadata={
        "help": "PPO with reward human or mix: the largest share of the run's time spent writing weights and "
                "optimizer state. People's labels and the answers they judged are journalled every step (a few kB); "
                "the weights are written again once the time trained since the last write is (1/share - 1) times "
                "what that write took (0.05: 19x, so a 20 s write comes once per 6.3 min), and a resumed run trains "
                "the journalled steps after them again. 0: weights every step."})
    keep_checkpoints: bool = field(default=False, metadata={
        "help": "Keep the run's checkpoints once it succeeds. Each holds the weights and the optimizer's state, about "
                "3x the model's fp32 size (a 135M model's: 1.6 GB), and serves only to resume a run that did not "
                "finish; off, a run that succeeds deletes them and keeps its final model. A failed or cancelled "
                "run keeps them either way."})
    bf16: bool = field(default_factory=bf16_is_fast, metadata={
        "help": "bf16 autocast for training and generation (default: on where the hardware runs it fast: CPUs with "
                "AVX-512 BF16 or AMX, GPUs with bf16; the value used is stored with the run)."})
    lora: bool = field(default=False, metadata={"help": "Train a LoRA adapter instead of all weights."})
    lora_r: int = field(default=8, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=16, metadata={"help": "LoRA scaling alpha."})
    seed: int = field(default=0, metadata={"help": "Random seed of the job (data split, prompt order)."})
    eval_samples: int = field(default=4, metadata={
        "help": "sft/dpo/ppo: answers per held-out prompt in the automatic evaluation of the "
                "finished model against its base (0: no evaluation)."})

    def __post_init__(self):
        _check(self.steps >= 1, "steps", self.steps, "must be at least 1")
        _check(self.checkpoint_every >= 0, "checkpoint_every", self.checkpoint_every, "must be 0 or positive")
        _check(0 <= self.checkpoint_share < 1, "checkpoint_share", self.checkpoint_share, "must be in [0, 1)")
        budget_seconds(self.time_budget)  # ValueError naming time_budget and the bad value
        _check(self.lora_r >= 1, "lora_r", self.lora_r, "must be at least 1")

    def base_model(self, stage: str) -> str:
        # A reward model too starts from the policy's kind of model (a decoder that sees where an answer ends, as
        # InstructGPT's reward models did): on bench/own_task.py's example tasks, PPO from a reward model on the
        # embedded MiniLM encoder won 63% (concise) and 66% (formal) against the base; from one on the embedded
        # chat model, the same recipe (320 judged answers, 24 steps of 16), 80% and 83% (seed 0; formal at seed 1:
        # 68%; 76-83% at both seeds once it trained three passes, docs/YOUR_TASK.md).
        # MiniLM at the reward model's learning rate of 5e-5 hardly moved in one pass (eval loss 0.677, margin 0.03).
        return self.model or "default"


@dataclass(frozen=True)
class DataSettings:
    """Which labels the run learns from: straight from the database through export's row functions and filters."""

    TITLE: ClassVar[str] = "Data"
    STAGES: ClassVar[tuple[str, ...]] = ALL_STAGES

    annotators: str = field(default="", metadata={"help": "Comma-separated annotators whose labels are used (blank: all)."})
    min_annotators: int = filter_field("min_annotators")
    min_agreement: float | None = filter_field("min_agreement")
    # On for training (export's default is off): an RM or DPO run on a project with ratings only still has pairs.
    include_rating_pairs: bool = filter_field("include_rating_pairs", default=True)
    sft_min_score: float | None = field(default=None, metadata={"help": "SFT: keep rated answers with a mean score at least this (blank: the scale's midpoint)."})
    test_size: float = field(default=0.1, metadata={"help": "Held-out fraction for evaluation."})
    criterion: str = field(default="", metadata={"help": "Reward model: learn one of the project's added criteria "
                                                         "(rlhf-studio questions list) instead of its own score (blank: its own)."})

    def __post_init__(self):
        _check(self.min_annotators >= 1, "min_annotators", self.min_annotators, "must be at least 1")
        _check(0 <= self.test_size < 1, "test_size", self.test_size, "must be in [0, 1)")


@dataclass(frozen=True)
class RewardSettings:
    """A policy run's rollouts and how they are rewarded.

    Where rewards come from is labeler/services/settings/reward_spec.py's grammar, spelled out in reward, reward_model
    and reward_function; then people's part and what is generated."""

    TITLE: ClassVar[str] = "Rewards"
    STAGES: ClassVar[tuple[str, ...]] = training_stages.names(samples=True)  # ppo, grpo, rloo

    reward: Literal["rm", "human", "mix", "function"] = field(default="rm", metadata={
        "help": "Reward source: rm: the reward model · human: the Rate tab · mix: both · function: e.g. VADER "
                "(--set reward= also takes one spec: rm:NAME, mix:NAME, vader, vader-with-prompt, module:function).",
        "widget": "radio"})
    reward_model: str = field(default="", metadata={
        "help": "Reward model (registry name or folder) for rm/mix; blank: the newest registered one."})
    reward_function: str = field(default="vader", metadata={"help": "For reward=function: 'vader' (VADER sentiment of the answer alone), 'vader-with-prompt' or module:function taking (queries, responses)."})
    subtract_query_score: bool = field(default=False, metadata={"help": "Reward model: subtract the query's own score."})
    # A reward model's scores have an arbitrary offset and scale; standardised on its training answers (the base
    # policy's), at the spread of VADER and of human ratings on base answers (std 0.37 and about 0.5 on [-1, 1]),
    # the one init_kl_coef tuned on VADER fits them too (raw, the demo's reward model reached KL 18 nats).
    rm_score_std: float | None = field(default=0.5, metadata={
        "help": "Reward model: standardise its scores with the mean and std of its training answers (saved with "
                "it), then scale to this std; blank: raw scores."})
    # Reward-model scores are standardised to rm_score_std (0.5), and a run drifts a criterion's batch mean by about
    # 0.05-0.1 of them: at Safe RLHF's lambda learning rate of 0.1 (on raw costs several units wide) the multiplier
    # would rise 0.01 a batch and never bind in a run of tens of steps. At 1.0, on bench/criteria_conflict.py
    # (maximise `short`, hold `complete` at the base's level, 24 steps of 16), it rose to 0.3 within 5 batches, the
    # held criterion's batch mean came back to the base's, and its win rate against the base was 62% where the run
    # on `short` alone fell to 45% (docs/YOUR_TASK.md).
    constraint_lr: float = field(default=CONSTRAINT_LR, metadata={
        "help": "reward=REWARD,SPEC>=NUMBER (or >=base): the Lagrange multiplier's step per batch, lambda <- max(0, "
                "lambda - lr * (batch mean of the constrained criterion - threshold)) (Safe RLHF, Dai et al. "
                "2023); kept in the run's checkpoints, so a resumed run goes on from it."})
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
        "help": "mix with the online reward model: refit it in the background after this many new labels."})
    # On by default: people label batch k+1 while the trainer steps on batch k. Off, the trainer idled 25% of a
    # mixed run (five annotators at 2 s a label, bench/human_loop.py) waiting for each batch's rankings.
    human_overlap: bool = field(default=True, metadata={
        "help": "human/mix: generate the next batch and queue it for people while the trainer steps on the "
                "current one (one batch of staleness, corrected by the PPO ratio against the generating policy); "
                "off: the trainer waits for each batch's labels."})
    heldout_every: int = field(default=10, metadata={
        "help": "PPO: every N steps, answer the held-out prompts once each and log their positive share and mean "
                "reward (the evaluation's measure), so the Train tab plots progress during the run (0: off)."})
    max_new_tokens: int = field(default=16, metadata={
        "help": "Tokens per answer, in rollouts (PPO, GRPO, RLOO) and the evaluation of every policy run; a run "
                "takes its project's answer length unless this is set (16 is the shipped task's)."})
    answers_per_prompt: int = field(default=4, metadata={
        "help": "PPO: answers sampled per prompt in each batch; RLOO compares each with the others (must divide "
                "batch_size)."})
    samples_per_step: int = field(default=4, metadata={"help": "PPO: generations stored per step for the samples table."})

    def __post_init__(self):
        _check(self.rm_score_std is None or self.rm_score_std > 0, "rm_score_std", self.rm_score_std, "must be positive (blank: raw scores)")
        _check(math.isfinite(self.constraint_lr) and self.constraint_lr > 0, "constraint_lr", self.constraint_lr,
               "must be a positive number (the Lagrange multiplier's step per batch)")
        _check(self.human_timeout > 0, "human_timeout", self.human_timeout, "must be positive")
        _check(self.w_human >= 0 and self.w_rm >= 0, "w_human/w_rm", (self.w_human, self.w_rm), "must be >= 0")
        _check(1 <= self.max_new_tokens <= 32_768, "max_new_tokens", self.max_new_tokens,
               "must be between 1 and 32,768 (rlhf.configs.MAX_NEW_TOKENS)")
        _check(0 < self.human_share <= 1, "human_share", self.human_share, "must be in (0, 1]")
        _check(self.rm_refit_every >= 1, "rm_refit_every", self.rm_refit_every, "must be at least 1")
        _check(self.heldout_every >= 0, "heldout_every", self.heldout_every, "must be 0 (off) or positive")
        _check(not (self.reward in ("human", "mix") and self.human_label == "ranking"
                    and not 2 <= self.answers_per_prompt <= 8), "answers_per_prompt", self.answers_per_prompt,
               "human_label=ranking puts each prompt's answers in one ranking: 2 to 8 answers (or human_label=rating)")
        _check(self.answers_per_prompt >= 1, "answers_per_prompt", self.answers_per_prompt, "must be at least 1")


@dataclass(frozen=True)
class LaunchSettings:
    """How the run's processes are started."""

    TITLE: ClassVar[str] = "Launch"
    STAGES: ClassVar[tuple[str, ...]] = ALL_STAGES

    runner: str = field(default="", metadata={"help": "Advanced: module:function running the stage instead of the built-in one."})
    # More than one process: `accelerate launch` with the user's setup (launch.worker_command, docs/SCALING.md).
    # Blank falls back to the server's RLHF_STUDIO_NUM_PROCESSES / _ACCELERATE_CONFIG, then accelerate's own
    # default config file, then one process.
    num_processes: int | None = field(default=None, metadata={
        "help": "Training processes (accelerate launch --num_processes: one per GPU; gloo ranks on a CPU-only "
                "machine). Each PPO rank generates its own batch of answers. Blank: the number the server was started "
                "with, else the accelerate config's, else 1."})
    accelerate_config: str = field(default="", metadata={
        "help": "accelerate config file (YAML, as `accelerate config` writes it, e.g. configs/accelerate/ddp.yaml) "
                "for DDP, DeepSpeed, FSDP or several machines. Blank: the config the server was started with, else "
                "accelerate's default config file."})

    def __post_init__(self):
        _check(self.runner == "" or ":" in self.runner, "runner", self.runner, "must be module:function")
        _check(self.num_processes is None or self.num_processes >= 1, "num_processes", self.num_processes,
               "must be at least 1 (blank: the server's setting)")


SECTIONS = (RunSettings, DataSettings, RewardSettings, LaunchSettings)


# The bases are listed in reverse: a dataclass takes its bases' fields in reverse MRO order, so JobConfig's fields
# read in SECTIONS' order (run, data, rewards, launch).
@dataclass(frozen=True)
class JobConfig(LaunchSettings, RewardSettings, DataSettings, RunSettings):
    """Settings of the job around the trainer: the sections together, one flat namespace (see the module doc)."""

    def __post_init__(self):
        for section in SECTIONS:
            section.__post_init__(self)
        # Across sections: the rating queue lives in the main process.
        _check(not (self.num_processes and self.num_processes > 1 and self.reward in ("human", "mix")),
               "num_processes", self.num_processes, f"reward={self.reward} needs one process (the rating queue is "
               "the main process's; train with reward=rm or function on several)")


def section_names(section) -> list[str]:
    """The section's settings, in declaration order."""
    return [f.name for f in fields(section)]


_SECTION_OF = {name: section for section in SECTIONS for name in section_names(section)}


def section_of(name: str):
    """The section that owns the job setting `name`; KeyError for a name that is not a job setting."""
    return _SECTION_OF[name]


def load_job_config(config_json: str | dict) -> JobConfig:
    """A stored run's JobConfig (its config_json's "job" part: the changed fields)."""
    data = json.loads(config_json) if isinstance(config_json, str) else config_json
    return forms.build_config(JobConfig, data.get("job", {}))
