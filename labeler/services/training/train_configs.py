"""What a training run is configured with: the job's own settings (JobConfig, in sections: job_settings.py) plus
the stage trainer's config.

A run's `config_json` is `{"job": {...changed JobConfig fields...}, "trainer": {...changed trainer fields...}}`.
`--set key=value` (CLI), a `--config FILE.json` and the Train tab's form all go through run_settings.resolve_run,
which checks them and calls `resolve_settings` here: it looks each key up in JobConfig first, then in the stage's
trainer config (labeler/forms.py does the parsing), so the same typo fails the same way everywhere, and applies the
one override order (SOURCES). `trainer_config` builds a run's trainer config from its stored settings: the runners,
the preview and the resolution all call it. A `reward=` spec (reward_spec.py's grammar, as
`rlhf-studio eval --reward` takes it) is spelled out into JobConfig's reward fields there too.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from labeler import forms
from labeler.services.settings import reward_spec, training_stages
from labeler.errors import InputError
from labeler.services.settings.job_settings import JobConfig, load_job_config  # noqa: F401 - callers import it here
from labeler.services.data.readers import MAX_JSON_DEPTH, check_depth, decode_text, load_json
from labeler.services.settings.run_secrets import refuse_secrets
from labeler.services.settings.training_stages.base import load

# The trainer config class of each stage ("module:Class", imported on demand: torch/transformers are slow to
# import) and the trainer fields the Train tab shows (every other field is still settable with --set or a JSON
# file; steps, seed and bf16 are job settings, passed on to the trainer: max_steps, seed, bf16): each stage's own
# module in training_stages/ says them.
STAGES = tuple(training_stages.STAGES)
STAGE_CONFIG_CLASSES = {name: stage.config_class for name, stage in training_stages.STAGES.items()}
FORM_FIELDS = {name: list(stage.form_fields) for name, stage in training_stages.STAGES.items()}


# ---- recipes: settings by model size ------------------------------------------------------------------------
# The defaults above are the 2-core CPU's with the embedded 135M model (16-token answers, PPO lr 6e-5). A recipe sets
# what changes with the model's size on a GPU (docs/GPU.md): answer length, learning rate per stage (full
# fine-tuning: TRL's and its papers' usual values at this size; LoRA: about 10x, as its adapters start at zero),
# the mini-batch (smaller, with gradient accumulation keeping the batch) and gradient checkpointing where the
# activations would not fit; LoRA on from 3B (full fine-tuning of 3B in fp32 with Adam needs 48 GB before any
# activation). Settings given explicitly win over the recipe's. `train --dry-run` says which recipe a model's
# parameter count suggests and how much memory the run will take. The learning rates and the batch shape of each
# stage are its own (training_stages/: full_lr, lora_lr, recipe_batch).
RECIPES: dict[str, dict[str, Any]] = {
    # size: job settings, then per-stage batch shape; mini-batch x accumulation keeps PPO's 64 and GRPO's 64 answers
    "0.5b": {"lora": False, "max_new_tokens": 64, "gradient_checkpointing": False, "mini": 16, "accumulation": 1},
    "1.5b": {"lora": False, "max_new_tokens": 128, "gradient_checkpointing": True, "mini": 8, "accumulation": 2},
    "3b": {"lora": True, "max_new_tokens": 128, "gradient_checkpointing": True, "mini": 8, "accumulation": 2},
    "8b": {"lora": True, "max_new_tokens": 128, "gradient_checkpointing": True, "mini": 4, "accumulation": 4},
}
RECIPE_CHOICES = ("", *RECIPES)


def recipe_for_parameters(parameters: int) -> str:
    """The recipe a model of this many parameters takes (the nearest size at or above it; tiny models: none)."""
    if parameters < 300e6:
        return ""
    for name, limit in (("0.5b", 1e9), ("1.5b", 2.5e9), ("3b", 5e9)):
        if parameters < limit:
            return name
    return "8b"


def recipe_settings(stage: str, recipe: str) -> dict[str, Any]:
    """The settings `recipe` gives a run of `stage` (job and trainer fields together, as --set takes them)."""
    if not recipe:
        return {}
    if recipe not in RECIPES:
        raise InputError(f"recipe={recipe!r}: choose one of {', '.join(RECIPES)} (or blank for the CPU defaults)",
                         field="recipe")
    r = RECIPES[recipe]
    stage_facts = training_stages.get(stage)
    out: dict[str, Any] = {"lora": r["lora"], "max_new_tokens": r["max_new_tokens"],
                           "learning_rate": stage_facts.lora_lr if r["lora"] else stage_facts.full_lr,
                           "gradient_checkpointing": r["gradient_checkpointing"]}
    out.update(stage_facts.recipe_batch(r["mini"], r["accumulation"]))
    return out


def stage_config_class(stage: str):
    """The stage's trainer config class (the one way to it: the form, the flags, the resolution and the runners)."""
    training_stages.get(stage)  # an unknown stage: InputError naming the choices
    # Imported on demand (the trainers pull in torch); a broken trainer module fails here, loudly.
    return load(STAGE_CONFIG_CLASSES[stage])


def form_fields(stage: str) -> list[str]:
    names = {spec.name for spec in forms.field_specs(stage_config_class(stage))}
    return [name for name in FORM_FIELDS[stage] if name in names]


# What the web Train form (and its "More settings" box) may set: an allowlist, as anyone with a login can post
# it. Numbers, switches and choices of the training math and the job, nothing that names a file, a folder, code
# to import, a tracker or the hub. A field added to a config later stays command-line only (rlhf-studio train
# --set) until it is listed here.
WEB_JOB_SETTINGS = (
    "model", "recipe", "output_name", "steps", "time_budget", "checkpoint_every", "keep_checkpoints", "bf16", "lora",
    "lora_r", "lora_alpha",
    "annotators", "min_annotators", "min_agreement", "include_rating_pairs", "sft_min_score", "test_size",
    "reward", "reward_model", "reward_function", "subtract_query_score", "rm_score_std", "w_human", "w_rm",
    "human_timeout", "timeout_policy", "human_label", "human_share", "online_rm", "rm_refit_every", "heldout_every",
    "human_overlap", "max_new_tokens", "answers_per_prompt", "samples_per_step", "seed", "eval_samples",
    "num_processes", "constraint_lr",
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
    # online DPO's judge (the Train tab's Judge picker): one that names code (module:function) is refused by
    # reward_spec.names_code, as a reward that does
    "judge",
    # PPO
    "batch_size", "mini_batch_size", "ppo_epochs", "init_kl_coef", "adap_kl_ctrl", "target", "horizon", "kl_coef_min", "gamma",
    "lam", "cliprange", "cliprange_value", "vf_coef", "kl_penalty", "whiten_rewards", "early_stopping",
    "target_kl", "ratio_threshold", "use_score_scaling", "use_score_norm", "score_clip", "entropy_coef",
    # GRPO / RLOO sampling and clipping
    "num_iterations", "num_generations", "epsilon", "epsilon_high", "scale_rewards", "normalize_advantages",
    "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "mask_truncated_completions",
    "steps_per_generation", "generation_batch_size",
    # precision and memory (rlhf/precision.py): choices and switches, nothing that names a file
    "dtype", "load_in_4bit", "attn_implementation",
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
    path = Path(path)
    if not path.exists() or path.is_dir():
        raise InputError("config file not found" if not path.exists() else "is a folder, not a config file",
                         file=str(path))
    # Strict UTF-8, NUL bytes refused, a FIFO or a device refused by name: errors name the line, never a traceback.
    text = decode_text(path)
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml  # only for .yaml files

        try:
            # An alias (*name) repeats a node without its text: nested ones (a "billion laughs" file) made the
            # checks below walk an exponential tree (34 s and 547 MB before the refusal). Settings need none.
            for event in yaml.parse(text, Loader=yaml.SafeLoader):
                if isinstance(event, yaml.AliasEvent):
                    raise InputError("YAML aliases (*name) are not accepted in a config file: write the values "
                                     "out", file=str(path), line=event.start_mark.line + 1)
            data = check_depth(yaml.safe_load(text), lambda message: InputError(message, file=str(path)))
        except RecursionError:  # deeply nested input: one line, not a traceback
            raise InputError(f"nested more than {MAX_JSON_DEPTH} levels deep", file=str(path)) from None
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            raise InputError(f"not valid YAML: {getattr(error, 'problem', error)}", file=str(path),
                             line=mark.line + 1 if mark else None) from None
    else:
        try:
            data = load_json(text, lambda message: InputError(message, file=str(path)))  # depth capped
        except json.JSONDecodeError as error:
            raise InputError(f"not valid JSON: {error.msg}", file=str(path), line=error.lineno) from None
    if not isinstance(data, dict):
        raise InputError("expected a mapping of settings (key: value)", file=str(path))
    if set(data) <= {"job", "trainer"} and all(isinstance(v, dict) for v in data.values()):
        return {**data.get("job", {}), **data.get("trainer", {})}
    return data


# Where a resolved setting came from, most binding last (nanoGPT's one override order): the config class's default,
# the app's default for the stage (training_stages: app_defaults, a mix run's warm start, steps for passes), the
# project (its answer length), the recipe, and what the person typed (kept even when it equals a default).
SOURCES = ("class default", "app default", "project", "recipe", "typed")


def resolve_run_config(stage: str, values: dict[str, Any], source: str | None = None,
                       warm_start: str = "", answer_tokens: int | None = None) -> dict[str, dict]:
    """Validate settings for a stage; returns the run's config_json content {"job": ..., "trainer": ...}
    (run_settings.resolve_run adds where each value came from, and what the database says)."""
    return resolve_settings(stage, values, source, warm_start, answer_tokens)[0]


def resolve_settings(stage: str, values: dict[str, Any], source: str | None = None, warm_start: str = "",
                     answer_tokens: int | None = None) -> tuple[dict[str, dict], dict[str, str]]:
    """(the run's config_json content {"job": ..., "trainer": ...}, where each stored value came from: SOURCES).

    Typed `values` win over the recipe's, the recipe's over the project's answer length (`answer_tokens`), that
    over the app's defaults for the stage, those over the config classes' defaults. Every value typed or given by
    a recipe, the project or the app is stored, also when it equals a class default, so the stored config is
    what runs (the runner reads nothing else: trainer_config).

    `warm_start`: the reward model a reward=mix run that names none starts from (the newest registered, which the
    runner would take): stored as the run's reward_model, so its config says so and its learning rate follows.

    Trainer settings are validated by building the trainer config once here (not only in the worker), so a
    bad value is refused before a run is queued.
    """
    refuse_secrets(values, source)  # before anything else: a dry run or a preview refuses them as a launch does
    recipe = recipe_settings(stage, str(values.get("recipe") or ""))
    job_values, trainer_values = split_settings(stage, {**recipe, **values}, source)  # explicit settings win
    try:
        job_values = reward_spec.job_settings(job_values)  # reward=rm:NAME, vader, ... as reward, reward_model, ...
    except InputError as error:
        raise InputError(error.message, file=source, field=error.field) from None
    typed = set(values) | ({"reward", "reward_model", "reward_function"} & set(job_values) if "reward" in values
                           else set())
    sources = {name: "typed" if name in typed else "recipe" for name in {**job_values, **trainer_values}}
    stage_facts = training_stages.get(stage)
    if warm_start and job_values.get("reward") == "mix" and not job_values.get("reward_model"):
        job_values["reward_model"], sources["reward_model"] = warm_start, "app default"
    if answer_tokens is not None and stage_facts.answers and "max_new_tokens" not in job_values:
        job_values["max_new_tokens"], sources["max_new_tokens"] = answer_tokens, "project"
    job = forms.build_config(JobConfig, job_values, source)
    # The app's defaults for the stage's trainer (PPO's KL controller, its learning rate under people's rankings;
    # GRPO's and RLOO's group size and answer length from the job's) are stored with the run, so its config shows
    # what it runs with.
    # They read the answer length as the project sets it unless typed, also for a stage that writes no answers (the
    # reward model's max_length fits the project's answers it scores).
    answered = job if answer_tokens is None or "max_new_tokens" in job_values else dataclasses.replace(
        job, max_new_tokens=answer_tokens)
    given = stage_facts.app_defaults(trainer_values, answered)
    sources.update({name: "app default" for name in given})
    for name, job_name in stage_facts.from_job.items():
        if name not in trainer_values:
            given[name] = getattr(job, job_name)
            sources[name] = sources.get(job_name, "class default")
    trainer_values = {**given, **trainer_values}
    trainer_config_ = trainer_config(stage, job, trainer_values, source=source)
    trainer = {k: v for k, v in forms.to_dict(trainer_config_).items() if k in trainer_values}
    if getattr(trainer_config_, "load_in_4bit", False) and not job.lora:
        raise InputError("load_in_4bit=true (QLoRA) trains LoRA adapters on the 4-bit base: set lora=true too",
                         file=source, field="load_in_4bit")
    if stage_facts.check is not None:
        try:
            stage_facts.check(job, trainer_config_)  # e.g. PPO's rollout rule, checked by the library
        except InputError as error:
            raise InputError(error.message, file=source, field=error.field) from None
    # bf16 is stored even at its default: the default depends on the machine, the run must not.
    job_stored = forms.to_dict(job)
    kept = {name: job_stored[name] for name in job_values}
    sources.setdefault("bf16", "app default")
    return {"job": {**forms.changed(job), **kept, "bf16": job.bf16}, "trainer": trainer}, sources


# What a run's trainer config is given besides its stored settings: the job's own fields as transformers' Trainer
# takes them (its steps, seed, bf16, checkpoints), and where it writes. Stored settings win.
def trainer_config(stage: str, job, trainer_settings: dict[str, Any], output_dir: str = "unused",
                   source: str | None = None):
    """The trainer config a run of `stage` trains with: built from its JobConfig and stored trainer settings
    only (the one build: the runners, the preview, the step count of jobs and the resolution all call it)."""
    cls = stage_config_class(stage)
    names = {spec.name for spec in forms.field_specs(cls)}
    if "output_dir" in names:  # transformers.TrainingArguments
        every = job.checkpoint_every
        values: dict[str, Any] = {
            "output_dir": str(output_dir), "report_to": "none", "max_steps": job.steps,
            "logging_steps": 1,  # every step in the live plot
            "save_strategy": "steps" if every else "no", "save_steps": every or 500, "save_total_limit": 2,
            "bf16": job.bf16, "seed": job.seed, "data_seed": job.seed, "disable_tqdm": False,
        }
        if "num_iterations" in names and "max_steps" not in trainer_settings:
            # `steps` counts generation batches (GRPO, RLOO; online DPO's judged batches): each is
            # steps_per_generation mini-batches (online DPO: its accumulation's), num_iterations times
            probe = forms.build_config(cls, {**values, **trainer_settings}, source)
            micro_batches = getattr(probe, "steps_per_generation", probe.gradient_accumulation_steps)
            values["max_steps"] = (job.steps * micro_batches * probe.num_iterations
                                   // probe.gradient_accumulation_steps)
    else:  # PPOConfig: its own loop
        values = {"seed": job.seed, "bf16": job.bf16}
    return forms.build_config(cls, {**values, **trainer_settings}, source)


