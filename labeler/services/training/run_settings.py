"""A run's settings resolved once, checked once: `resolve_run(db, project, stage, typed) -> ResolvedRun`.

Every caller that needs a run's settings calls it: `rlhf-studio train` (and `--dry-run`), the Train tab's form,
its preview and Launch (run_preview, jobs.create_run). The override order is nanoGPT's one order: the config
classes' defaults, then the app's defaults for the stage, then the project (its answer length), then the recipe,
then what the person typed (kept even when it equals a default); train_configs.resolve_settings applies it and
says where each value came from (train_configs.SOURCES). The runner builds its trainer config from the stored
settings only (train_configs.trainer_config), so the preview, the stored config and the trainer agree.

Checks come first and are cheap (`check_settings`): they read the settings as typed, the registry and the local
Hub cache, and import no torch, so a bad value or a model that is not here is refused in a moment, the same way
by a dry run, the preview and a launch.
"""
from __future__ import annotations

import ast
import importlib.machinery
import os
import shlex
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labeler import forms
from labeler.field_words import field_label
from labeler.services.serving import models
from labeler.services.settings import reward_spec, training_stages
from labeler.services.execution import run_judgements
from labeler.services.training import train_configs
from labeler.errors import InputError
from labeler.services.settings.job_settings import JobConfig
from labeler.services.data.projects import get_project
from labeler.services.settings.run_secrets import refuse_secrets
from labeler.services.training.stages import split_for_training
from labeler.services.settings.training_stages.base import MIN_TRAINING_ROWS, row_key, steps_per_pass
from rlhf.configs import check_learning_rate
from rlhf.loading import SHORT_NAMES


@dataclass(frozen=True)
class ResolvedRun:
    """A run's settings as it will store and run them."""

    stage: str
    project: str
    config: dict  # what the run stores: {"job": {...}, "trainer": {...}}
    sources: dict[str, str] = field(default_factory=dict)  # each stored setting -> train_configs.SOURCES
    typed: dict[str, Any] = field(default_factory=dict)  # the settings as given

    @property
    def job(self) -> JobConfig:
        return forms.build_config(JobConfig, self.config["job"])

    def source(self, name: str) -> str:
        """Where the value of setting `name` comes from ("class default" when nothing set it)."""
        return self.sources.get(name, "class default")

    def value(self, name: str) -> Any:
        """The value the run uses for setting `name` (a job setting or a trainer setting)."""
        if name in self.config["trainer"]:
            return self.config["trainer"][name]
        if name in self.config["job"]:
            return self.config["job"][name]
        return self.values()[name]

    def values(self) -> dict[str, Any]:
        """Every setting's value as the run uses it: the trainer config's fields, then the job's (which win)."""
        if "_values" not in self.__dict__:
            object.__setattr__(self, "_values", {**forms.to_dict(self.trainer_config()), **forms.to_dict(self.job)})
        return self.__dict__["_values"]

    def trainer_config(self, output_dir: str = "unused"):
        """The trainer config the run trains with (the runner builds the same one)."""
        return train_configs.trainer_config(self.stage, self.job, self.config["trainer"], output_dir)

    def command(self) -> str:
        """The `rlhf-studio train ...` command that queues the same run (bf16 only where it was typed: its
        default is the machine's)."""
        settings = {**self.config["job"], **self.config["trainer"]}
        if self.source("bf16") != "typed":
            settings.pop("bf16", None)
        parts = ["rlhf-studio", "train", self.stage, "--project", self.project]
        for name, value in settings.items():
            text = ("null" if value is None else str(value).lower() if isinstance(value, bool)
                    else format(value, "g") if isinstance(value, float) else str(value))
            parts += ["--set", f"{name}={text}"]
        return shlex.join(parts)

    def described(self, names: list[str] | tuple[str, ...]) -> str:
        """Each of `names` as the Train form words it, with its value and where it came from ("KL horizon
        (rollouts): 8 (app default); Answer length (new tokens): 128 (project)"), as the preview lists them. A
        person reads the form's labels, not the fields' names (those are the CLI's: `command`). A setting the
        trainer takes from the job's (GRPO's max_completion_length is max_new_tokens) reads the same: said once."""
        shown = [f"{field_label(name)}: {value_words(self.value(name))} ({self.source(name)})" for name in names]
        return "; ".join(dict.fromkeys(shown))


def value_words(value: Any) -> str:
    """A setting's value as the form shows it: on/off for a switch, "automatic" for a blank one."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "automatic"
    return format(value, "g") if isinstance(value, float) else str(value)


def resolve_run(db, project: str, stage: str, typed: dict[str, Any], source: str | None = None) -> ResolvedRun:
    """The run of `stage` in `project` with the settings `typed` (--set, a --config file or the Train form):
    checked (check_settings, before anything heavy is imported), then resolved, stored values and sources."""
    typed = dict(typed)
    check_settings(db, stage, typed, source)
    config, sources = train_configs.resolve_settings(
        stage, typed, source, warm_start=models.newest_or_blank(db, "reward"),
        answer_tokens=get_project(db, project).answer_tokens)
    passes = training_stages.get(stage).default_passes
    if passes is not None and "steps" not in config["job"]:
        passes = float(config["trainer"].get("num_train_epochs", passes))
        steps = steps_for_passes(db, project, stage, config, passes)
        if steps is not None:
            config["job"]["steps"], sources["steps"] = steps, "app default"
    return ResolvedRun(stage, project, config, sources, typed)


def steps_for_passes(db, project: str, stage: str, config: dict, passes: float) -> int | None:
    """Optimizer steps for `passes` over the stage's training rows (its runner's rows and split, its trainer's
    batch), or None when it has fewer rows than it trains on (the run is refused, or stops, for want of data).
    For a stage that trains on labels in passes (rm, dpo: Stage.default_passes): a fixed 40 steps read a third
    of 480 pairs for DPO."""
    job = forms.build_config(JobConfig, config["job"])
    rows = training_stages.get(stage).rows(db, project, job)
    if len(rows) < MIN_TRAINING_ROWS:
        return None
    train, _ = split_for_training([(row_key(row), row) for row in rows], job.test_size, job.seed)
    trainer = train_configs.trainer_config(stage, job, config["trainer"])
    per_pass = steps_per_pass(len(train), trainer.per_device_train_batch_size, trainer.gradient_accumulation_steps)
    return max(1, round(passes * per_pass))


# ---- the checks: cheap, before any model, dataset or torch is loaded ------------------------------------------

def check_settings(db, stage: str, typed: dict[str, Any], source: str | None = None) -> None:
    """What can be refused from the settings as given, without importing torch: secrets, the stage, the recipe,
    the job's settings, a learning rate, the base model (registered, a local folder, or in the local Hub cache),
    the reward model and a module:function reward or runner. InputError naming the field."""
    refuse_secrets(typed, source)
    facts = training_stages.get(stage)
    values = {**train_configs.recipe_settings(stage, str(typed.get("recipe") or "")), **typed}
    job_names = {spec.name for spec in forms.field_specs(JobConfig)}
    job_values = {k: v for k, v in values.items() if k in job_names}
    try:
        job_values = reward_spec.job_settings(job_values)
    except InputError as error:
        raise InputError(error.message, file=source, field=error.field) from None
    # bf16's default asks the hardware (torch): a value is given for the check, the run's own is resolved later
    job = forms.build_config(JobConfig, {"bf16": False, **job_values}, source)
    if "learning_rate" in values:
        try:
            check_learning_rate(forms.parse_value(forms.FieldSpec("learning_rate", "float", lambda: None, ""),
                                                  values["learning_rate"], source))
        except ValueError as error:
            raise InputError(str(error), file=source, field="learning_rate") from None
    if not job.runner:  # a runner of one's own reads `model` its own way
        check_model(db, job.base_model(stage), "model", source)
    if facts.samples and job.reward == "rm" and reward_spec.is_combined(job.reward_model) and stage != "ppo":
        raise InputError(f"reward={job.reward_model}: a sum or a constraint of criteria trains with ppo (its runner "
                         "builds it: criteria_reward); use one reward here", file=source, field="reward")
    if facts.samples and job.reward in ("rm", "mix") and job.reward_model:
        for name in reward_spec.reward_models(job.reward_model):  # a sum or a constraint names several
            check_model(db, name, "reward_model", source, kind="reward")
    for key in ("reward_function", "runner"):
        spec = str(getattr(job, key) or "")
        if ":" in spec and (key == "runner" or facts.samples):
            check_function(spec, key, source)
    if "judge" in values:  # online DPO's judge: people (or mix) need someone to ask, refused now, not at the first step
        try:
            run_judgements.require_annotators(db, str(values["judge"]))
        except InputError as error:
            raise InputError(error.message, file=source, field=error.field) from None


def check_model(db, name: str, field_name: str, source: str | None = None, kind: str | None = None) -> None:
    """A model the run can load: a short name, a registered one, a local folder with weights, or a hub id in the
    local Hub cache (or fetched by the worker where the Hub can be reached). InputError naming the ones there are."""
    name = str(name).strip()
    if name in SHORT_NAMES or is_registered(db, name):
        return
    local = Path(name).expanduser()
    registered = [m["name"] for m in models.list_models(db, kind=kind)] if kind else []
    there = f" Registered {kind} models: {', '.join(registered)}." if registered else (
        f" No {kind} model is registered yet." if kind else "")
    if local.is_absolute() or name.startswith((".", "~")) or local.exists() or not models.HUB_ID.match(name):
        try:
            models.resolve(db, name)  # a folder: its own errors (no such folder, no weights, a file)
        except InputError as error:
            raise InputError(error.message.rstrip(".") + "." + there, file=source, field=field_name) from None
        return
    if hub_cached(name) or hub_reachable():
        return
    raise InputError(f"{name!r} is not a registered model, not a local folder and not in the local Hub cache "
                     f"({hub_cache_dir()}), and the Hub cannot be reached (HF_HUB_OFFLINE or no network): fetch it "
                     f"first with `hf download {name}` (or `huggingface-cli download {name}`), or register a "
                     f"local copy (rlhf-studio models add).{there}", file=source, field=field_name)


def is_registered(db, name: str) -> bool:
    try:
        models.get_model(db, name)
    except InputError:
        return False
    return True


def hub_cache_dir() -> str:
    from huggingface_hub import constants  # the Hub client: only where a hub id is named

    return os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE


def hub_cached(repo_id: str) -> bool:
    """The model's config is in the local Hub cache (huggingface_hub's own lookup; nothing is downloaded)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=hub_cache_dir())
    except ValueError:  # not a valid repo id
        return False
    return isinstance(found, str)


def hub_reachable(timeout: float = 2.0) -> bool:
    """Whether the worker could download from the Hub: not with HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE), nor
    without a connection to its endpoint."""
    if any(os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
           for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return False
    host = (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").split("://")[-1].split("/")[0]
    try:
        socket.create_connection((host.split(":")[0], 443), timeout=timeout).close()
    except OSError:
        return False
    return True


def check_function(spec: str, field_name: str, source: str | None = None) -> None:
    """A module:function the worker will import: the module found where the worker looks (never imported here),
    and, when its source can be read, the function defined in it. InputError with the names there are."""
    module_name, _, function = spec.partition(":")
    module_name, function = module_name.strip(), function.strip()
    path = [os.getcwd(), *os.environ.get("PYTHONPATH", "").split(os.pathsep), *sys.path]
    found = None
    if module_name:
        found = importlib.machinery.PathFinder.find_spec(module_name.split(".")[0], [p for p in path if p])
    if found is None and module_name.split(".")[0] not in sys.builtin_module_names:
        raise InputError(f"{spec!r}: no module {module_name.split('.')[0]!r} in this folder or on the Python path "
                         "(PYTHONPATH) the training worker will have", file=source, field=field_name)
    if "." in module_name or not found or not str(found.origin or "").endswith(".py"):
        return  # a submodule or a compiled module: the worker's import says more
    names = top_level_names(Path(found.origin))
    if names is not None and function not in names:
        listed = ", ".join(sorted(n for n in names if not n.startswith("_"))) or "none"
        raise InputError(f"{spec!r}: module {module_name!r} ({found.origin}) has no {function!r}; it defines: "
                         f"{listed}", file=source, field=field_name)


def top_level_names(path: Path) -> set[str] | None:
    """The functions, classes and names a module's source defines at its top level (read, not imported); None
    when the source cannot say (unreadable, or a `from x import *`)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    if any(isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names) for node in ast.walk(tree)):
        return None  # names it cannot list
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names
