"""README.md cards for saved models and exported datasets, in the Hub's format (YAML front matter, then Markdown).

Plain text rendering only: the caller says what trained the model on which data with which settings, and what it
scored; nothing here reads a database or the network. The front matter is written as JSON values, which YAML
reads unchanged, so a prompt or model name with a colon or quote cannot break it.

The front matter holds what the Hub reads (https://huggingface.co/docs/hub/model-cards#model-card-metadata and
.../datasets-cards), as TRL's cards do: license, base_model, library_name, pipeline_tag, datasets, tags, model_name;
pretty_name, task_categories, size_categories for datasets. Only what is known goes in: a model's license is its
base model's, read offline (the embedded models', a local base folder's card, or a Hub card already in the local
cache); an unknown license is left out rather than guessed.
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
# The embedded models (rlhf.loading): the default policy is SmolLM2-135M-Instruct, converted from its GGUF file;
# the default reward-model backbone ('default-encoder') is all-MiniLM-L6-v2.
KNOWN_BASES = {"default": "HuggingFaceTB/SmolLM2-135M-Instruct",
               "default-encoder": "sentence-transformers/all-MiniLM-L6-v2"}
# Their licenses, from their Hub cards (both Apache 2.0), so a card is complete without the network.
KNOWN_LICENSES = {"HuggingFaceTB/SmolLM2-135M-Instruct": "apache-2.0",
                  "sentence-transformers/all-MiniLM-L6-v2": "apache-2.0"}
# Keys of a base model's card that say its license; "other" comes with license_name and license_link (its URL).
LICENSE_KEYS = ("license", "license_name", "license_link")
TRL_URL = "https://github.com/huggingface/trl"
DATASET_FORMATS_URL = "https://huggingface.co/docs/trl/dataset_formats"


def hub_dataset_id(name: str) -> bool:
    """Whether `name` reads as a Hub dataset id (owner/name) rather than a local path."""
    return bool(HUB_ID.match(name)) and not Path(name).exists()


def hub_base_model(base_model: str | None) -> str | None:
    """The Hub id to put in `base_model:` (the Hub refuses a card whose base_model is not a model id), or None
    for a local folder; the card's text names the base either way."""
    base_model = KNOWN_BASES.get(base_model or "", base_model)
    if not base_model or not HUB_ID.match(base_model) or Path(base_model).exists():
        return None
    return base_model


def hub_url(repo_id: str, repo_type: str = "model") -> str:
    return f"https://huggingface.co/{'datasets/' if repo_type == 'dataset' else ''}{repo_id}"


def base_license(base_model: str | None) -> dict[str, str]:
    """The base model's license keys (LICENSE_KEYS) where they can be known offline, else {}: the embedded
    models', a local base folder's README.md, or the Hub card of a hub id already in the local Hugging Face cache.
    A fine-tuned model is bound by its base model's license, so the card repeats it."""
    import yaml
    from huggingface_hub import metadata_load, try_to_load_from_cache

    base_model = KNOWN_BASES.get(base_model or "", base_model)
    if not base_model:
        return {}
    if base_model in KNOWN_LICENSES:
        return {"license": KNOWN_LICENSES[base_model]}
    card = Path(base_model) / CARD_FILE
    if not card.is_file() and HUB_ID.match(base_model):
        cached = try_to_load_from_cache(base_model, CARD_FILE)  # a path, or None / a not-found marker
        card = Path(cached) if isinstance(cached, str) else card
    try:
        meta = metadata_load(card) if card.is_file() else None
    except (OSError, ValueError, yaml.YAMLError):  # unreadable, or front matter that is not YAML: nothing known
        meta = None
    return {k: str(meta[k]) for k in LICENSE_KEYS if isinstance(meta, dict) and meta.get(k)}


def size_category(rows: int) -> str:
    """The Hub's size_categories bucket for a dataset of `rows` rows."""
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                        (10_000_000, "1M<n<10M")):
        if rows < limit:
            return name
    return "10M<n<100M"


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
    license: str | None = None,
    pipeline_tag: str | None = None,
    library_name: str = "transformers",
) -> str:
    """A model card: what trained it (`trained_with`, e.g. "PPO (rlhf.PPOTrainer, TRL 0.11 API)"), from which base
    model, on what data, with which settings, its last training metrics and an evaluation table.

    `license` defaults to the base model's (base_license); `pipeline_tag` is e.g. "text-generation" for a policy,
    "text-classification" for a reward model; `library_name` "peft" for an adapter. Only Hub ids of `datasets` go
    into the front matter (the Hub links them); every name is in the text."""
    hub_base = hub_base_model(base_model)
    licensing = {"license": license} if license else base_license(base_model)
    meta = {**licensing, "library_name": library_name, "pipeline_tag": pipeline_tag, "base_model": hub_base,
            "model_name": title, "datasets": [d for d in datasets if hub_dataset_id(d)],
            "tags": ["rlhf-studio", "trl", *tags]}
    shown_base = f"[`{hub_base}`]({hub_url(hub_base)})" if hub_base else f"`{base_model}`"
    parts = [_front_matter(meta), f"# {title}\n",
             f"Trained with {trained_with} in RLHF Studio (`rlhf`, a [TRL]({TRL_URL})-compatible library)"
             f"{f', starting from {shown_base}' if base_model else ''}.\n"]
    if licensing.get("license"):
        link = f" ({licensing['license_link']})" if licensing.get("license_link") else ""
        source = "" if license else ", as its base model's"
        parts += [f"License: `{licensing.get('license_name') or licensing['license']}`{link}{source}.\n"]
    named = [f"[`{d}`]({hub_url(d, 'dataset')})" if hub_dataset_id(d) else f"`{d}`" for d in datasets]
    data = data or ("Datasets: " + ", ".join(named) if datasets else "_not recorded_")
    parts += ["## Training data\n", data + "\n"]
    parts += ["## Settings\n", key_values(settings or {})]
    parts += ["## Training metrics\n", key_values(metrics or {})]
    parts += ["## Evaluation\n", table(list(evaluation))]
    load = ("from rlhf.model import AutoModelForCausalLMWithValueHead  # or trl 0.11's, same layout\n"
            "model = AutoModelForCausalLMWithValueHead.from_pretrained(FOLDER_OR_REPO)  # policy + value head\n"
            if value_head else "")
    # A reward model is a sequence classifier (one score); an adapter loads its base through peft.
    module, loader = (("peft", "AutoPeftModelForCausalLM") if library_name == "peft" else
                      ("transformers", "AutoModelForSequenceClassification") if pipeline_tag == "text-classification"
                      else ("transformers", "AutoModelForCausalLM"))
    parts += ["## Usage\n", f"```python\nfrom {module} import {loader}\n"
              f"model = {loader}.from_pretrained(FOLDER_OR_REPO)\n" + load + "```\n"]
    return "\n".join(parts)


def dataset_card(
    title: str,
    summary: str,
    columns: Mapping[str, str],
    splits: Mapping[str, int],
    sections: Mapping[str, Mapping[str, object] | Sequence[Mapping[str, object]] | str] | None = None,
    tags: Sequence[str] = (),
    license: str | None = None,
    task_categories: Sequence[str] = (),
) -> str:
    """A dataset card: a summary, the columns (name -> meaning), the split sizes and further sections (a mapping
    becomes a name/value table, a list of rows a table, a string a paragraph).

    `license` is the data owner's choice, so it is written only when given; size_categories comes from the split
    sizes."""
    meta = {"license": license, "pretty_name": title, "task_categories": list(task_categories),
            "size_categories": [size_category(sum(splits.values()))], "tags": ["rlhf-studio", "trl", *tags]}
    parts = [_front_matter(meta), f"# {title}\n", summary.rstrip() + "\n",
             f"The columns follow [TRL's dataset formats]({DATASET_FORMATS_URL}).\n",
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
