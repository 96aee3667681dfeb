"""README cards for registered models, and pushing models and exported datasets to the Hugging Face Hub.

Cards are written offline, always: a registered model's folder gets one with its base model, the run's stage and
settings, its training metrics, the data snapshot and its evaluations. Whoever registers or evaluates a model
writes its card afterwards (the worker, the CLI commands, the demo): `models.register_model` and the evaluation
service only store rows, so this module reads them at import time and they never import it. (An `export --format
hf` folder's own card is labeler/services/labels/dataset_card.py's, written by the export.)
A folder that already has someone else's README.md (a model downloaded from the Hub) keeps it.

Pushing needs the network and a token (`HF_TOKEN` or `huggingface-cli login`); every Hub call goes through one
`HfApi` (passed in, so tests give a fake) and datasets' own `push_to_hub`.
"""
from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path

import sqlite_utils

from labeler.services.execution import runs
from labeler.services.settings import training_stages
from labeler.errors import InputError
from labeler.services.evals.evaluation import comparison_rows, list_evaluations
from labeler.services.serving.models import HUB_ID, get_model, list_models
from rlhf.cards import CARD_FILE, model_card, write_card

CARD_TAG = "rlhf-studio"  # in the front matter of every card written here: ours to overwrite
# Model kind -> the Hub's pipeline_tag (a reward model scores a text: a one-label sequence classifier).
PIPELINES = {"base": "text-generation", "policy": "text-generation", "adapter": "text-generation",
             "reward": "text-classification"}
# What each stage's card says it was trained with (training_stages/: Stage.card).
STAGES = {name: stage.card for name, stage in training_stages.STAGES.items()}


def check_repo_id(repo_id: str) -> str:
    repo_id = (repo_id or "").strip()
    if not HUB_ID.match(repo_id):
        raise InputError(f"bad Hub repository id {repo_id!r}: owner/name", field="repo_id")
    return repo_id


def _is_ours(folder: Path) -> bool:
    card = folder / CARD_FILE
    if not card.exists():
        return True
    head = card.read_text(encoding="utf-8", errors="replace").split("---", 2)[1:2]
    return bool(head) and CARD_TAG in head[0]


# ---- datasets ---------------------------------------------------------------------------------------------

def push_export(folder: str | Path, repo_id: str, private: bool = False, token: str | None = None, api=None) -> str:
    """Push an `export --format hf` folder: its card first, then the splits with datasets' push_to_hub, which
    keeps the card's text and adds its own metadata. Returns the dataset's URL."""
    import datasets
    from huggingface_hub import HfApi  # only pushing needs the Hub client

    repo_id, folder = check_repo_id(repo_id), Path(folder)
    if not (folder / "dataset_dict.json").exists():
        raise InputError("not a saved dataset folder: push needs --format hf", file=str(folder))
    api = api or HfApi(token=token)
    api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    if (folder / CARD_FILE).exists():
        api.upload_file(path_or_fileobj=str(folder / CARD_FILE), path_in_repo=CARD_FILE, repo_id=repo_id,
                        repo_type="dataset", commit_message="Dataset card (RLHF Studio)")
    datasets.load_from_disk(str(folder)).push_to_hub(repo_id, private=private, token=token)
    return f"https://huggingface.co/datasets/{repo_id}"


# ---- models -----------------------------------------------------------------------------------------------

def registered_model_card(db: sqlite_utils.Database, name: str) -> str:
    """A registered model's card from the registry, its run and its stored evaluations."""
    model = get_model(db, name)
    run = runs.find_run(db, model["run_id"]) if model["run_id"] else None
    trained_with = STAGES.get(run.stage, run.stage) if run else f"nothing recorded here (a {model['kind']} model)"
    settings = {k: v for k, v in (run.config if run else model["config"]).items()
                if isinstance(v, (int, float, str, bool)) or v is None}
    data = []
    if run:
        data.append(f"Run {run.id} ({run.name or run.stage}) in project `{run.project}`, "
                    f"{run.status}, {run.started_at or run.created_at} to {run.ended_at or '-'}.")
    if model["data_snapshot"]:
        kind, rows, digest = (model["data_snapshot"].split(":") + ["", ""])[:3]
        data.append(f"Data snapshot: {rows} {kind} rows (hash `{digest}`); the same labels give the same hash.")
    evaluations = list_evaluations(db, model=name, limit=10)
    base = model["base_model"]
    if base and evaluations:  # the base's evaluation with the same settings, for a before/after table
        same = [e for e in list_evaluations(db, model=base, limit=50) if e.settings == evaluations[0].settings]
        evaluations = [*evaluations[:1], *same[:1], *evaluations[1:]]
    if base:  # a registered name stands for its path: 'default', a hub id or a folder (rlhf.cards decides)
        try:
            base = get_model(db, base)["path"]
        except InputError:
            pass
    return model_card(name, trained_with, base_model=base, data=" ".join(data) or None, settings=settings,
                      metrics=model["metrics"], evaluation=comparison_rows(evaluations),
                      tags=[model["kind"], *([run.stage] if run else [])],
                      value_head=run is not None and run.stage in training_stages.names(value_head=True), pipeline_tag=PIPELINES.get(model["kind"]),
                      library_name="peft" if model["kind"] == "adapter" else "transformers")


def write_registered_model_card(db: sqlite_utils.Database, name: str) -> Path | None:
    """Write the card into the model's folder; None for hub ids, 'default', or a folder with a README.md not
    written here. A read-only folder warns instead of failing the registration or evaluation that asked for it."""
    folder = Path(get_model(db, name)["path"])
    if not folder.is_dir() or not _is_ours(folder):
        return None
    try:
        return write_card(folder, registered_model_card(db, name))
    except OSError as error:
        warnings.warn(f"{folder}: model card not written ({error})", stacklevel=2)
        return None


def write_model_cards(db: sqlite_utils.Database, names: Iterable[str]) -> list[Path]:
    """write_registered_model_card for each registered model among `names` (after an evaluation: its table gains
    the new rows); a folder or hub id evaluated without being registered has no card here."""
    registered = {model["name"] for model in list_models(db)}
    written = (write_registered_model_card(db, name) for name in dict.fromkeys(names) if name in registered)
    return [path for path in written if path is not None]


# Files a trained folder holds that are not the model: trainer state, pickles, intermediate checkpoints, logs.
MODEL_IGNORE = ["*.pt", "*.bin", "*.pth", "*.pkl", "*.tmp", "checkpoint-*/**", "runs/**", "*.log"]


def push_model(db: sqlite_utils.Database, name: str, repo_id: str, private: bool = False, token: str | None = None,
               api=None) -> str:
    """Push a registered model's folder as it is on disk (safetensors weights or adapter, value head, tokenizer,
    the refreshed card). transformers' push_to_hub would reload the weights, save them to a temporary folder
    and upload that, leaving out value_head.safetensors and replacing the card with its own; uploading the
    saved folder sends the same weights without either loss. Returns the model's URL."""
    from huggingface_hub import HfApi  # only pushing needs the Hub client

    repo_id = check_repo_id(repo_id)
    folder = Path(get_model(db, name)["path"])
    if not folder.is_dir():
        raise InputError(f"model {name!r} is {folder}, not a local folder: nothing to push", field="name")
    write_registered_model_card(db, name)
    api = api or HfApi(token=token)
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model", ignore_patterns=MODEL_IGNORE,
                      commit_message=f"Upload {name} (RLHF Studio)")
    return f"https://huggingface.co/{repo_id}"
