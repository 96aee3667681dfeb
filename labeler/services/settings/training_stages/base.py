"""What every training stage says about itself (`Stage`), and the pure helpers the stages share.

A stage's facts live in its own module of this package (sft.py, rm.py, ...), each a `STAGE = Stage(...)`; the
registry (`__init__.py`) finds them. This package stands on the settings' ground floor: it imports no export, project
or prompt code and no torch, so job_settings, the storage check of a run's stage, the estimate and the preview read
the stage names and facts here instead of repeating them (tests/test_import_cycles.py checks it). What does the work
is named as "module:attribute" and imported when asked for: the rows a stage trains on
(labeler/services/training/stages.py), its trainer config's library class and its runner (runners/).
"""
from __future__ import annotations

import importlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from labeler.errors import InputError


# Fewer training rows and a run stops at once (the stage runners' require_rows; the preview and launching refuse it).
MIN_TRAINING_ROWS = 2


def no_app_defaults(trainer_settings: dict, job) -> dict:
    return {}


def no_data_problem(rows: list) -> str | None:
    return None


def per_device_batch(mini: int, accumulation: int) -> dict[str, Any]:
    """A recipe's batch shape on transformers' Trainer (sft, rm, dpo, kto): the same examples per optimizer step,
    fewer per forward pass."""
    return {"per_device_train_batch_size": max(1, mini // 2), "gradient_accumulation_steps": accumulation}


def generation_batch(mini: int, accumulation: int) -> dict[str, Any]:
    """A recipe's batch shape for GRPO and RLOO: mini-batches of `mini` answers, 64 answers per generation batch
    (answer length: the job's max_new_tokens, which becomes max_completion_length)."""
    return {"per_device_train_batch_size": mini, "steps_per_generation": 64 // mini}


# GRPO and RLOO: the job's answers per prompt and answer length are their trainer's group size and completion
# length unless the trainer settings set them (Stage.from_job; stored with the run when it is resolved).
ONLINE_FROM_JOB = {"num_generations": "answers_per_prompt", "max_completion_length": "max_new_tokens"}


def check_online_groups(job, trainer) -> None:
    """People rank each prompt's group of answers: with reward human or mix the trainer's group is the job's."""
    if job.reward in ("human", "mix") and trainer.num_generations != job.answers_per_prompt:
        raise InputError(f"num_generations={trainer.num_generations}: with reward={job.reward} it must equal "
                         f"answers_per_prompt={job.answers_per_prompt} (people rank each prompt's group)",
                         field="num_generations")


def groups_per_step(job, trainer) -> int:
    """Prompts a GRPO or RLOO generation batch answers (on each rank): whole groups (OnlineRLConfig checks it)."""
    return trainer.generation_batch_size // trainer.num_generations


@dataclass
class StudioOnlineDefaults:
    """The CPU defaults GRPO and RLOO share in the app (TRL's are made for GPUs), the recipe measured for GRPO in
    docs/RECIPES.md: 16 prompts x 4 answers of 16 tokens per generation batch, 2 passes over it in mini-batches of
    16, learning rate 3e-5. Listed first among a Studio config's bases (grpo.py, rloo.py), so its defaults override
    the library's (dataclass fields are gathered from the last base to the first); beta differs between the two and
    stays with each. A plain dataclass: the library's class, which imports torch, is subclassed only when a run
    asks for it."""

    learning_rate: float = field(default=3e-5, metadata={"help": "AdamW learning rate (the tuned CPU value with 2 passes; TRL's default 1e-6 suits long GPU runs)."})
    per_device_train_batch_size: int = field(default=16, metadata={"help": "Answers per mini-batch (one optimizer step)."})
    steps_per_generation: int | None = field(default=4, metadata={"help": "Mini-batches per generation batch: 4 x 16 = 64 answers, 16 prompts x 4."})
    num_generations: int = field(default=4, metadata={"help": "Answers per prompt (unless set: the job's answers_per_prompt)."})
    max_completion_length: int = field(default=16, metadata={"help": "Tokens per answer (unless set: the job's max_new_tokens, the project's answer length)."})
    num_iterations: int = field(default=2, metadata={"help": "Passes over each generation batch (PPO's ppo_epochs)."})


# The prompt tokens a row of the trainers on labels (sft, rm, dpo, kto) is given room for: DPOConfig's own
# max_prompt_length (a longer prompt keeps its end there) and the chat's MIN_PROMPT_TOKENS. A fixed budget rather
# than the project's longest prompt: the settings resolve without a tokenizer or the database (app_defaults sees the
# trainer settings and the job only), and a run's shape, its memory and time estimate included, then stays the same
# as prompts are added. A team's questions are a few dozen tokens with the chat template; 256 leaves them room.
PROMPT_BUDGET = 256
# Room past the answer length: the chat template's end of turn after an answer cut at the limit (SmolLM2's
# <|im_end|> and a newline: 2 tokens) and the odd extra token a decoded answer tokenises into again.
END_OF_TURN_ROOM = 8


def fitted_max_length(trainer_settings: dict, job, prompt_budget: int = PROMPT_BUDGET) -> dict:
    """{"max_length": prompt budget + the run's answer length + END_OF_TURN_ROOM} unless the settings set
    max_length (typed, a recipe or a file: kept, None too). The answer length is the job's max_new_tokens, which is
    the project's answer length unless typed (train_configs.resolve_settings). At the classes' default of 512 a
    project fitted to 384 tokens would have its full-length answers cut in training after any prompt over 128
    tokens, and one fitted to 64 was sized (and its memory estimated) for sequences several times its own."""
    if "max_length" in trainer_settings:
        return {}
    return {"max_length": prompt_budget + job.max_new_tokens + END_OF_TURN_ROOM}


def load(spec: str):
    """The attribute a "module:attribute" string names, its module imported now (a broken one fails here, loudly)."""
    module_name, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def built_when_asked(cls: type) -> type:
    """A Studio trainer config class defined inside its stage module's builder function (its base, the library's
    class, imports torch): named as if defined at the module's top, where the module's `__getattr__` returns it,
    so pickling finds it (transformers' Trainer saves its arguments with every checkpoint, training_args.bin)."""
    cls.__qualname__ = cls.__name__
    return cls


def config_attribute(module: str, name: str, build: Callable[[], type]) -> Callable[[str], type]:
    """A stage module's `__getattr__` (PEP 562) that gives its config class `name`, built by `build` when first asked
    for (the class subclasses the library's, which imports torch: never built by the registry)."""
    def attribute(asked: str) -> type:
        if asked == name:
            return build()
        raise AttributeError(f"module {module!r} has no attribute {asked!r}")
    return attribute


@dataclass(frozen=True)
class Stage:
    """One training stage, as facts: its trainer config and runner (named), its app defaults, the words and charts
    the app shows for it, and which rows it trains on (named; `rows`, the one function its runner and the preview
    both call)."""

    name: str
    order: int  # its place where a person picks a stage (the CLI's choices, the Train tab's radio): sft first
    config_class: str  # "module:Class" of its trainer config
    runner: str  # "module:function" of its run(ctx: StageContext) -> RunResult
    # "module:function" of (db, project, job, **options) -> its training rows after the job's data filters: dicts
    # (sft, rm, dpo, kto) or, for the stages that sample answers, the project's training prompt texts (in the
    # database's order); `rows` calls it
    training_rows: str
    unit: str  # what a row is, in the preview: "answers", "pairs" or "prompts"
    label: str  # the Train tab's stage radio
    note: str  # the Train tab's line under it
    card: str  # "trained with" on the model card (hub.py)
    metrics: tuple[str, ...]  # the run monitor's default charts
    form_fields: tuple[str, ...]  # the trainer fields the Train tab shows (every other: --set or a file)
    full_lr: float  # a recipe's learning rate, full fine-tuning
    lora_lr: float  # ... and with LoRA
    recipe_batch: Callable[[int, int], dict] = per_device_batch  # (mini, accumulation) -> a recipe's batch fields
    aka: str = ""  # what the name stands for, where it is not said by the name itself (rm: "reward model")
    default_model: str = "default"
    answers: bool = True  # trains a policy that writes answers: evaluated on held-out prompts, max_new_tokens pinned
    samples: bool = False  # samples answers to the project's prompts (ppo, grpo, rloo): a time estimate, a reward
    time_budget: bool = False  # `time_budget` fits its steps (ppo)
    online_trl: bool = False  # a TRL online trainer fed the job's answers per prompt and length (grpo, rloo)
    value_head: bool = False  # its model is saved with a value head beside it
    # the file of rows it freezes at its first start (StageContext.frozen_rows) and its model's snapshot kind, for
    # a model kept from a cancelled run's checkpoint (kept_models); ("", "") when none is recorded
    frozen_rows: tuple[str, str] = ("", "")
    # settings the app gives its trainer unless the user set them: (explicit trainer settings, the run's JobConfig)
    # -> the missing ones
    app_defaults: Callable[[dict, Any], dict] = no_app_defaults
    # why the rows cannot be trained on although there are enough of them, or None (the preview's blocker)
    data_problem: Callable[[list], str | None] = no_data_problem
    # (job, trainer config) -> prompts a step samples answers to, on each rank (the stages that sample)
    prompts_per_step: Callable[[Any, Any], int] | None = None
    # (job, trainer config) -> None, or InputError naming the setting that breaks a rule of the trainer
    check: Callable[[Any, Any], None] | None = None
    # trainer field -> the job field that gives it unless the trainer settings set it (grpo, rloo: ONLINE_FROM_JOB)
    from_job: dict = field(default_factory=dict)
    # steps when the run sets none: this many passes over its training rows, counted when the run is queued
    # (run_settings.resolve_run); None: the job's own default (40)
    default_passes: float | None = None
    # What the memory estimate (run_estimate.train_shape) counts for a stage trained on rows by transformers'
    # Trainer: the sequences one row is (pairs and online DPO's two answers: 2; KTO: a row and its KL row), the
    # tokens the language-model head computes logits for ("answer", "all" for SFT's whole sequence, "none" for a
    # scalar head), and whether it holds a frozen copy of the policy as its reference (unless LoRA turns the
    # adapter off for it or the reference's log-probs are precomputed).
    sequences_per_row: int = 1
    logit_tokens: Literal["answer", "all", "none"] = "answer"
    reference_copy: bool = False

    @property
    def ppo_loop(self) -> bool:
        """Samples answers in our PPOTrainer's own loop (PPOConfig's batch_size and mini_batch_size), not a TRL
        online trainer's (online_trl: generation batches of per_device_train_batch_size)."""
        return self.samples and not self.online_trl

    def rows(self, db, project: str, job, **options) -> list:
        """Its training rows (the one function its runner and the preview both call)."""
        return load(self.training_rows)(db, project, job, **options)

    def run(self, ctx):
        return load(self.runner)(ctx)


def steps_per_pass(train_rows: int, per_device: int, accumulation: int) -> int:
    """Optimizer steps in one pass over `train_rows`, as transformers' Trainer counts them: ceil(rows / per-device
    batch) batches, one step per `accumulation` of them (at least 1)."""
    return max(1, math.ceil(math.ceil(train_rows / per_device) / accumulation))


def row_key(row) -> str:
    """The key a run splits its rows on: the prompt itself (prompts are unique per project), as canonical JSON."""
    return json.dumps(row["prompt"], sort_keys=True, ensure_ascii=False)
