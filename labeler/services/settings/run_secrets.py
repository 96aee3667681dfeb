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

from labeler.errors import InputError

SECRET_SETTINGS = ("hub_token",)
# Words of a key that names a credential, inside a mapping (tracker_kwargs, accelerator_kwargs, project_kwargs):
# {"wandb": {"key": ...}}, {"mlflow": {"pwd": ...}}, private_key and passphrase were stored before.
SECRET_WORDS = frozenset({
    "token", "secret", "password", "passwd", "pwd", "pass", "passphrase", "key", "apikey", "private",
    "credential", "credentials", "auth", "authorization", "cookie", "bearer", "signature",
})
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def is_secret_key(key: str) -> bool:
    """Whether a mapping's key names a credential: one of its words (split at _ - . and camelCase) is in
    SECRET_WORDS. Words, not substrings: max_new_tokens and keyboard are not secrets."""
    return any(word.lower() in SECRET_WORDS for word in _WORD.findall(str(key)))


def secret_paths(settings: dict[str, Any]) -> list[str]:
    """Where `settings` hold a secret: a SECRET_SETTINGS key with a value, or a text value under a key that names
    a credential (is_secret_key) inside a mapping, also one given as JSON text. Top-level keys are the declared
    settings (an unknown one is refused by its name anyway); numbers and switches are never secrets."""
    found = [key for key in SECRET_SETTINGS if settings.get(key) not in (None, "", "null", "None")]

    def walk(value: Any, path: str) -> None:
        if isinstance(value, str) and value.strip().startswith(("{", "[")):
            try:
                value = json.loads(value)  # --set tracker_kwargs='{"wandb": {"api_key": ...}}' arrives as text
            except (ValueError, RecursionError):
                return
        if isinstance(value, dict):
            for key, item in value.items():
                where = f"{path}.{key}"
                if is_secret_key(key) and isinstance(item, str) and item.strip() not in ("", "null", "None"):
                    found.append(where)
                else:
                    walk(item, where)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, f"{path}[{index}]")

    for key, value in settings.items():
        if key not in SECRET_SETTINGS:
            walk(value, key)
    return found


def refuse_secrets(settings: dict[str, Any], source: str | None = None) -> None:
    """InputError naming every secret among raw run settings (and the config file they came from)."""
    found = secret_paths(settings)
    if found:
        raise InputError("a secret is never stored with a run: set it in the environment of the server or the "
                         "command instead (HF_TOKEN for the hub, WANDB_API_KEY, ...)", file=source,
                         field=", ".join(found))
