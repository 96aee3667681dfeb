"""README.md cards for saved models and exported datasets, in the Hub's format (YAML front matter, then Markdown).

Plain text rendering only: the caller says what trained the model on which data with which settings, and what it
scored; nothing here reads a database or the network. The front matter is written as JSON values, which YAML
reads unchanged, so a prompt or model name with a colon or quote cannot break it.
"""
from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

CARD_FILE = "README.md"


HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# The embedded default policy is SmolLM2-135M-Instruct (rlhf.loading), converted from its GGUF file.
KNOWN_BASES = {"default": "HuggingFaceTB/SmolLM2-135M-Instruct"}


def hub_base_model(base_model: str | None) -> str | None:
    """The Hub id to put in `base_model:` (the Hub refuses a card whose base_model is not a model id), or None
    for a local folder; the card's text names the base either way."""
    base_model = KNOWN_BASES.get(base_model or "", base_model)
    if not base_model or not HUB_ID.match(base_model) or Path(base_model).exists():
        return None
    return base_model


def _front_matter(meta: Mapping[str, object]) -> str:
    lines = [f"{key}: {json.dumps(value)}" for key, value in meta.items() if value not in (None, [], "")]
    return "---\n" + "\n".join(lines) + "\n---\n"


def _cell(value: object) -> str:
    if isinstance(value, float):
        value = "nan" if math.isnan(value) else f"{value:.6g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(rows: Sequence[Mapping[str, object]]) -> str:
    """A Markdown table with the union of the rows' keys as columns, in first-seen order."""
    if not rows:
        return "_none_\n"
    columns = list(dict.fromkeys(key for row in rows for key in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def key_values(values: Mapping[str, object]) -> str:
    """A two-column Markdown table, one setting or metric per row, sorted by name."""
    return table([{"name": k, "value": v} for k, v in sorted(values.items())])


def model_card(
    title: str,
    trained_with: str,
    base_model: str | None = None,
    datasets: Sequence[str] = (),
    data: str | None = None,
    settings: Mapping[str, object] | None = None,
    metrics: Mapping[str, object] | None = None,
    evaluation: Sequence[Mapping[str, object]] = (),
    tags: Sequence[str] = (),
    value_head: bool = False,
) -> str:
    """A model card: what trained it (`trained_with`, e.g. "PPO (rlhf.PPOTrainer, TRL 0.11 API)"), from which base
    model, on what data, with which settings, its last training metrics and an evaluation table."""
    meta = {"library_name": "transformers", "base_model": hub_base_model(base_model), "datasets": list(datasets),
            "tags": ["rlhf-studio", "trl", *tags]}
    parts = [_front_matter(meta), f"# {title}\n",
             f"Trained with {trained_with} in RLHF Studio "
             f"(`rlhf`, a TRL-compatible library){f', starting from `{base_model}`' if base_model else ''}.\n"]
    parts += ["## Training data\n", (data or ("Datasets: " + ", ".join(f"`{d}`" for d in datasets) if datasets
                                               else "_not recorded_")) + "\n"]
    parts += ["## Settings\n", key_values(settings or {})]
    parts += ["## Training metrics\n", key_values(metrics or {})]
    parts += ["## Evaluation\n", table(list(evaluation))]
    load = ("from rlhf.model import AutoModelForCausalLMWithValueHead  # or trl 0.11's, same layout\n"
            "model = AutoModelForCausalLMWithValueHead.from_pretrained(FOLDER_OR_REPO)  # policy + value head\n"
            if value_head else "")
    parts += ["## Usage\n", "```python\nfrom transformers import AutoModelForCausalLM\n"
              "model = AutoModelForCausalLM.from_pretrained(FOLDER_OR_REPO)\n" + load + "```\n"]
    return "\n".join(parts)


def dataset_card(
    title: str,
    summary: str,
    columns: Mapping[str, str],
    splits: Mapping[str, int],
    sections: Mapping[str, Mapping[str, object] | Sequence[Mapping[str, object]] | str] | None = None,
    tags: Sequence[str] = (),
) -> str:
    """A dataset card: a summary, the columns (name -> meaning), the split sizes and further sections (a mapping
    becomes a name/value table, a list of rows a table, a string a paragraph)."""
    meta = {"tags": ["rlhf-studio", "trl", *tags]}
    parts = [_front_matter(meta), f"# {title}\n", summary.rstrip() + "\n",
             "## Columns\n", table([{"column": k, "meaning": v} for k, v in columns.items()]),
             "## Splits\n", table([{"split": k, "rows": v} for k, v in splits.items()])]
    for heading, body in (sections or {}).items():
        if isinstance(body, str):
            rendered = body.rstrip() + "\n"
        elif isinstance(body, Mapping):
            rendered = key_values(body)
        else:
            rendered = table(list(body))
        parts += [f"## {heading}\n", rendered]
    return "\n".join(parts)


def write_card(folder: str | os.PathLike, text: str) -> Path:
    """Write `text` as folder/README.md (replacing one that is there) and return its path."""
    path = Path(folder) / CARD_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path
