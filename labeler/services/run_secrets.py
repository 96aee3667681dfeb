"""Credentials kept out of a run's settings. A run's config is a database row (`runs.config_json`), shown by
`runs show` and in the app, so a secret is refused wherever settings are read: `train`, `train --dry-run`, the
Train tab's preview and launch (train_configs.resolve_run_config calls refuse_secrets first). The libraries read
credentials from the environment instead: HF_TOKEN (huggingface_hub, for hub_token), WANDB_API_KEY,
MLFLOW_TRACKING_PASSWORD, ...
"""
from __future__ import annotations

import json
import re
from typing import Any

from labeler.services.errors import InputError

SECRET_SETTINGS = ("hub_token",)
# A key that names a credential, at any depth of a mapping (tracker_kwargs, accelerator_kwargs, project_kwargs):
# {"wandb": {"key": ...}}, {"mlflow": {"pwd": ...}}, private_key and passphrase were stored before.
SECRET_KEY = re.compile(
    r"(token|secret|passw|passphrase|pwd|api[_-]?key|private|credential|auth|cookie|bearer|signature|"
    r"(^|[_\-.])key($|[_\-.]))", re.IGNORECASE)


def secret_paths(settings: dict[str, Any]) -> list[str]:
    """Where `settings` hold a secret: a SECRET_SETTINGS key with a value, or a key that looks like a credential
    (SECRET_KEY) with a value, at the top or inside a mapping, also one given as JSON text."""
    found = [key for key in SECRET_SETTINGS if settings.get(key) not in (None, "", "null", "None")]

    def walk(value: Any, path: str) -> None:
        if isinstance(value, str) and value.strip().startswith(("{", "[")):
            try:
                value = json.loads(value)  # --set tracker_kwargs='{"wandb": {"api_key": ...}}' arrives as text
            except (ValueError, RecursionError):
                return
        if isinstance(value, dict):
            for key, item in value.items():
                where = f"{path}.{key}" if path else str(key)
                if SECRET_KEY.search(str(key)) and item not in (None, "", "null", "None"):
                    found.append(where)
                else:
                    walk(item, where)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, f"{path}[{index}]")

    walk({key: value for key, value in settings.items() if key not in SECRET_SETTINGS}, "")
    return found


def refuse_secrets(settings: dict[str, Any], source: str | None = None) -> None:
    """InputError naming every secret among raw run settings (and the config file they came from)."""
    found = secret_paths(settings)
    if found:
        raise InputError("a secret is never stored with a run: set it in the environment of the server or the "
                         "command instead (HF_TOKEN for the hub, WANDB_API_KEY, ...)", file=source,
                         field=", ".join(found))
