"""The model registry (table `models`): every model a user can generate, chat or battle with, by name.

A row is a name for a path: a local safetensors folder (a trained policy, reward model or PEFT adapter),
a hub id, or 'default' (the embedded SmolLM2-135M-Instruct, found by rlhf.loading). Training runs
register what they save (`register_model`, with run id, config, metrics and the data snapshot they
were trained on) so a model can always be traced back to its labels. The 'default' base model is
registered on first use, so a fresh database already lists one model.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import sqlite_utils

from labeler.errors import InputError
from rlhf.loading import DEFAULT_POLICY, SHORT_NAMES, load_causal_lm, load_tokenizer, resolve_model_path
from storage import write_transaction

KINDS = ("base", "policy", "reward", "adapter")
CHAT_KINDS = ("base", "policy", "adapter")  # kinds that write answers; a reward model only scores them
# owner/name, as the hub spells repository ids.
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
NAME = re.compile(r"^[\w.:@+-][\w .:@+/-]{0,99}$")


def _check_name(name: str) -> str:
    name = (name or "").strip()
    if not NAME.match(name):
        raise InputError(f"bad model name {name!r}: 1-100 letters, digits, spaces or . _ - : @ + /", field="name")
    return name


def _row_to_dict(row: dict) -> dict:
    model = dict(row)
    model["config"] = json.loads(model.pop("config_json") or "{}")
    model["metrics"] = json.loads(model.pop("metrics_json") or "{}")
    return model


def _check_path(path: str, field: str = "path") -> str:
    """A path the loaders accept: 'default', an existing local folder (made absolute), or a hub id."""
    path = str(path).strip()
    if path == DEFAULT_POLICY:
        return path
    local = Path(path).expanduser()
    if local.is_dir():
        has_weights = any(local.glob("*.safetensors")) or (local / "adapter_config.json").exists()
        if not has_weights:
            raise InputError(f"{path}: no *.safetensors weights in this folder (only safetensors are loaded)", field=field)
        return str(local.resolve())
    if local.exists():
        raise InputError(f"{path}: is a file; give the model's folder", field=field)
    if HUB_ID.match(path) and not path.startswith((".", "/", "~")):
        return path
    raise InputError(f"{path}: no such folder, and not a hub id (owner/name)", field=field)


def _ensure_default(db: sqlite_utils.Database) -> None:
    if db.execute("SELECT 1 FROM models WHERE name = ?", [DEFAULT_POLICY]).fetchone():
        return
    with write_transaction(db):
        db.execute(
            "INSERT OR IGNORE INTO models (name, path, kind, config_json) VALUES (?, ?, 'base', ?)",
            [DEFAULT_POLICY, DEFAULT_POLICY, json.dumps({"description": "SmolLM2-135M-Instruct (embedded)"})],
        )


def register_model(
    db: sqlite_utils.Database,
    name: str,
    path: str,
    kind: str,
    base_model: str | None = None,
    run_id: int | None = None,
    config: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
    data_snapshot: str = "",
) -> dict:
    """Add a model under a new, unique name. InputError for a taken name, unknown kind or bad path."""
    name = _check_name(name)
    if kind not in KINDS:
        raise InputError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}", field="kind")
    path = _check_path(path)
    if name == DEFAULT_POLICY:
        raise InputError(f"'{DEFAULT_POLICY}' is reserved for the embedded model", field="name")
    _ensure_default(db)  # so the embedded model is always listed first
    with write_transaction(db):
        if db.execute("SELECT 1 FROM models WHERE name = ?", [name]).fetchone():
            raise InputError(f"a model named {name!r} is already registered", field="name")
        db.execute(
            "INSERT INTO models (name, path, kind, base_model, run_id, config_json, metrics_json, data_snapshot)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                name,
                path,
                kind,
                base_model,
                run_id,
                json.dumps(config or {}, sort_keys=True),
                json.dumps(metrics or {}, sort_keys=True),
                data_snapshot,
            ],
        )
    return get_model(db, name)  # its caller writes the model card (hub.write_registered_model_card)


def register_policy_from_web(db: sqlite_utils.Database, name: str, folder: str, base_model: str | None = None) -> dict:
    """An admin registers a chat model from the web app (Admin > Models): a policy, from a local folder only.

    Narrower than `rlhf-studio models add`: no hub ids (the server runs offline, and a web form must not make it
    reach the network), no reward models or other kinds (those come from training runs or the CLI), and the
    folder must hold a causal LM (checked from its config before anything is loaded). `base_model`, if given,
    must be a registered model: evaluation measures the policy's KL against it.
    """
    folder = str(folder or "").strip()
    if not folder:
        raise InputError("enter the model's folder on the server", field="path")
    local = Path(folder).expanduser()
    if not local.is_dir():
        raise InputError(f"{folder}: no such folder on the server (hub ids are for `rlhf-studio models add`)", field="path")
    base_model = (base_model or "").strip() or None
    if base_model is not None:
        get_model(db, base_model)
    path = _check_path(str(local), field="path")
    check_generates_text(path, name)
    row = register_model(db, name, path, "policy", base_model=base_model, config={"registered_from": "web"})
    return row


def list_models(db: sqlite_utils.Database, kind: str | None = None) -> list[dict]:
    """All registered models, oldest first ('default' always among them); `kind` filters."""
    _ensure_default(db)
    if kind is not None and kind not in KINDS:
        raise InputError(f"unknown kind {kind!r}; one of {', '.join(KINDS)}", field="kind")
    sql = "SELECT * FROM models" + (" WHERE kind = ?" if kind else "") + " ORDER BY id"
    return [_row_to_dict(dict(row)) for row in db.execute(sql, [kind] if kind else []).fetchall()]


def chat_model_names(db: sqlite_utils.Database) -> list[str]:
    """Names of the models that can answer (everything but reward models)."""
    return [m["name"] for m in list_models(db) if m["kind"] in CHAT_KINDS]


def check_generates_text(path: str, name: str | None = None) -> None:
    """InputError unless the model at `path` is a causal LM (or an adapter for one).

    Reads config.json / adapter_config.json only; a hub id or a folder without them is left to the loader.
    An encoder (a reward model's backbone, BERT, MiniLM) loaded as a causal LM gets a random LM head and
    answers gibberish, so it is refused before loading.
    """
    folder = Path(path)
    label = name or path
    adapter = folder / "adapter_config.json"
    if adapter.is_file():
        try:
            task = json.loads(adapter.read_text(encoding="utf-8")).get("task_type")
        except (OSError, ValueError):
            task = None
        if task not in (None, "CAUSAL_LM"):
            raise InputError(f"{label!r} is a {task} adapter, not a chat model", field="model")
        return
    config_file = folder / "config.json"
    if not config_file.is_file():
        return
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise InputError(f"{label!r}: its config.json is not valid JSON", field="model") from None
    architectures = config.get("architectures") or []
    if any(a.endswith(("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")) for a in architectures):
        return
    if not architectures:
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        if config.get("model_type") in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            return
    kind = ", ".join(architectures) or config.get("model_type") or "unknown architecture"
    raise InputError(f"{label!r} is not a chat model ({kind}): it cannot write answers", field="model")


def resolve_chat_model(db: sqlite_utils.Database, name: str, server_models: tuple[str, ...] = ()) -> str:
    """The path to load for a chat or arena model chosen in the web app: registered names only.

    Paths and hub ids are for the CLI (`models add`), so a web user cannot make the server open a folder or
    reach the network; `server_models` are the ones an admin chose on the command line (`serve --model`).
    The error for an unknown name is the same whatever the name is, so it tells nothing about the
    server's files.
    """
    name = str(name or "").strip()
    if name == DEFAULT_POLICY:
        _ensure_default(db)
    row = db.execute("SELECT path, kind FROM models WHERE name = ?", [name]).fetchone()
    if row is None and name not in server_models:
        raise InputError(
            f"no registered chat model named {name[:100]!r}; an admin adds models with `rlhf-studio models add`",
            field="model",
        )
    if row is not None and row["kind"] not in CHAT_KINDS:
        raise InputError(f"{name!r} is a {row['kind']} model: it scores answers but cannot write them", field="model")
    path = resolve_model_path(row["path"] if row is not None else name)
    check_generates_text(path, name)
    return path


def resolve_reward_model(db: sqlite_utils.Database, name: str) -> str:
    """The path of a registered reward model (web: best-of-N); the same refusal as resolve_chat_model."""
    name = str(name or "").strip()
    row = db.execute("SELECT path, kind FROM models WHERE name = ?", [name]).fetchone()
    if row is None or row["kind"] != "reward":
        raise InputError(f"no registered reward model named {name[:100]!r}", field="reward_model")
    return resolve_model_path(row["path"])


def get_model(db: sqlite_utils.Database, name: str) -> dict:
    """The registry row of `name` as a dict (config and metrics parsed). InputError if unknown."""
    if name == DEFAULT_POLICY:
        _ensure_default(db)
    row = db.execute("SELECT * FROM models WHERE name = ?", [name]).fetchone()
    if row is None:
        raise InputError(f"no model named {name!r}; see `rlhf-studio models list`", field="model")
    return _row_to_dict(dict(row))


def model_exists(db: sqlite_utils.Database, name: str) -> bool:
    return db.execute("SELECT 1 FROM models WHERE name = ?", [name]).fetchone() is not None


def model_name_at(db: sqlite_utils.Database, folder: str) -> str | None:
    """The name of the (oldest) model registered with this folder as its path, or None."""
    row = db.execute("SELECT name FROM models WHERE path = ? ORDER BY id LIMIT 1", [str(folder)]).fetchone()
    return None if row is None else row[0]


def model_of_run(db: sqlite_utils.Database, run_id: int) -> dict | None:
    """{"name", "path"} of the model a training run registered, or None when it registered none (yet)."""
    row = db.execute("SELECT name, path FROM models WHERE run_id = ?", [int(run_id)]).fetchone()
    return None if row is None else {"name": row["name"], "path": row["path"]}


def resolve(db: sqlite_utils.Database, name: str) -> str:
    """What the loaders open for `name`: a registry name, a short name ('default', 'default-encoder'), a local
    folder or a hub id. The one resolver of the training stages, evaluation, the demo and the CLI."""
    name = str(name).strip()
    if name == DEFAULT_POLICY:
        _ensure_default(db)
    if name in SHORT_NAMES:
        return resolve_model_path(name)
    row = db.execute("SELECT path FROM models WHERE name = ?", [name]).fetchone()
    if row is not None:
        return resolve_model_path(row["path"])
    return resolve_model_path(_check_path(name, field="model"))


def newest(db: sqlite_utils.Database, kind: str) -> str:
    """The name of the most recently registered model of `kind` (e.g. the reward model PPO uses by default)."""
    name = newest_or_blank(db, kind)
    if not name:
        hint = "train one (stage rm) or set reward_model" if kind == "reward" else "register one (models add)"
        raise InputError(f"no {kind} model registered: {hint}", field="reward_model" if kind == "reward" else "model")
    return name


def newest_or_blank(db: sqlite_utils.Database, kind: str) -> str:
    """The name of the most recently registered model of `kind`, or "" when there is none."""
    row = db.execute("SELECT name FROM models WHERE kind = ? ORDER BY id DESC LIMIT 1", [kind]).fetchone()
    return "" if row is None else row[0]


def newest_of_project(db: sqlite_utils.Database, kind: str, project_id: int, before: str | None = None) -> str | None:
    """The newest model of `kind` trained by a run of the project (registered before `before`, an ISO time, when
    given), or None."""
    sql = ("SELECT m.name FROM models m JOIN runs r ON r.id = m.run_id WHERE m.kind = ? AND r.project_id = ?"
           + (" AND m.created_at < ?" if before else "") + " ORDER BY m.id DESC LIMIT 1")
    row = db.execute(sql, [kind, project_id, *([before] if before else [])]).fetchone()
    return None if row is None else row[0]


def merge_adapter_model(db: sqlite_utils.Database, name: str, output_name: str | None = None,
                        out_dir: str | None = None) -> dict:
    """Merge the registered LoRA adapter `name` (kind 'adapter') into its base weights and register the result.

    Writes a full safetensors folder that a plain `AutoModelForCausalLM.from_pretrained` loads (no peft needed),
    with the tokenizer (and a PPO value head, if the adapter folder has one), at `out_dir` (default: beside the
    adapter, `<adapter folder>-merged`), then registers it as a policy named `output_name` (default
    `<name>-merged`) with the adapter's base model, run, metrics and data snapshot. Everything is checked before
    the merge starts; the folder is written under a temporary name and renamed when complete, so a failed merge
    leaves no folder and no registry row.
    """
    adapter = get_model(db, name)
    if adapter["kind"] != "adapter":
        raise InputError(f"{name!r} is a {adapter['kind']} model, not a LoRA adapter: nothing to merge", field="name")
    folder = Path(adapter["path"])
    config_file = folder / "adapter_config.json"
    if not config_file.is_file():
        raise InputError(f"{name!r}: {folder} has no adapter_config.json (a LoRA adapter folder has one)", field="name")
    task = json.loads(config_file.read_text(encoding="utf-8")).get("task_type")
    if task not in (None, "CAUSAL_LM"):
        raise InputError(f"{name!r} is a {task} adapter; only causal-LM adapters are merged here", field="name")
    output_name = _check_name(output_name or f"{name}-merged")
    if db.execute("SELECT 1 FROM models WHERE name = ?", [output_name]).fetchone() or output_name == DEFAULT_POLICY:
        raise InputError(f"a model named {output_name!r} is already registered (choose another with --name)", field="name")
    out = Path(out_dir).expanduser() if out_dir else folder.with_name(folder.name + "-merged")
    if out.exists():
        raise InputError(f"{out}: already exists; choose another folder with --out", field="out")

    from rlhf.value_head import VALUE_HEAD_FILE  # rlhf.value_head imports torch

    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    try:
        # dtype "auto": the base's saved precision (a bf16 base stays bf16, not doubled to fp32).
        load_causal_lm(folder, dtype="auto").merge_and_unload().save_pretrained(partial)
        base = json.loads(config_file.read_text(encoding="utf-8")).get("base_model_name_or_path")
        has_tokenizer = (folder / "tokenizer_config.json").exists()
        load_tokenizer(folder if has_tokenizer else base, padding_side="left").save_pretrained(partial)
        if (folder / VALUE_HEAD_FILE).exists():
            shutil.copy(folder / VALUE_HEAD_FILE, partial / VALUE_HEAD_FILE)
        os.replace(partial, out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    config = {"merged_from": name, "adapter_path": str(folder), **{k: v for k, v in adapter["config"].items()
                                                                   if k not in ("merged_from", "adapter_path")}}
    row = register_model(db, output_name, str(out), "policy", base_model=adapter["base_model"],
                         run_id=adapter["run_id"], config=config, metrics=adapter["metrics"],
                         data_snapshot=adapter["data_snapshot"] or "")
    return row
