"""The words a person reads for a field, on the form and in a refusal's toast; and data text shown as typed
inside the app's own Markdown (`literal`).

The services name a field as the code and the CLI do (`InputError(..., field="heldout_share")`): the CLI prints
that name, which its flags and `--set` take. A toast said "field 'measure'" and "field 'order'" beside forms that
read "Measure" and "Corrected value"; `toast_text` names the field as its form labels it.
"""
from __future__ import annotations

import re
from typing import Mapping

from labeler import forms
from labeler.services.errors import InputError

# The Train form's settings in words (its widgets' labels); any other field reads as its name in words.
TRAIN_LABELS = {
    "steps": "How long (training steps)", "checkpoint_every": "Save a checkpoint every N steps",
    "lora": "LoRA adapters (train a small add-on)", "bf16": "bfloat16 (faster on recent CPUs)",
    "num_processes": "Processes (CPU cores or GPUs)", "annotators": "Only these annotators' labels",
    "min_annotators": "Labelled by at least N people", "min_agreement": "Minimum agreement between annotators",
    "include_rating_pairs": "Also turn ratings into preference pairs", "test_size": "Share held out for testing",
    "reward": "Reward",
    "subtract_query_score": "Score the answer alone (subtract the prompt's score)", "w_human": "Weight of people's ratings",
    "w_rm": "Weight of the reward model", "human_timeout": "Wait for people at most (seconds)",
    "timeout_policy": "When nobody answers in time",
    "human_overlap": "People label the next batch while the model trains", "max_new_tokens": "Answer length (new tokens)",
    "output_name": "Name of the trained model", "time_budget": "Time budget (e.g. 20m)", "lora_r": "LoRA rank",
    "lora_alpha": "LoRA alpha", "seed": "Random seed", "eval_samples": "Answers per held-out prompt in the final check",
    "sft_min_score": "Lowest mean score kept (SFT)", "rm_score_std": "Spread of reward-model scores (std)",
    "human_label": "People judge by", "human_share": "Share of answers people judge",
    "online_rm": "Reward model learns during the run", "rm_refit_every": "Refit the reward model every N labels",
    "heldout_every": "Check held-out prompts every N steps", "answers_per_prompt": "Answers per prompt",
    "samples_per_step": "Samples kept per step", "learning_rate": "Learning rate",
    "per_device_train_batch_size": "Batch size", "batch_size": "Answers per step", "mini_batch_size": "Mini-batch size",
    "max_length": "Longest example (tokens)", "beta": "Stay close to the starting model (beta)",
    "init_kl_coef": "Stay close to the starting model (KL weight)", "adap_kl_ctrl": "Adapt the KL weight",
    "target": "Target KL", "ppo_epochs": "Passes over each batch", "loss_type": "Loss",
    "completion_only_loss": "Learn the answers only (not the prompts)", "packing": "Pack short examples together",
    "center_rewards_coefficient": "Keep rewards centred (weight)", "num_iterations": "Passes over each batch",
    "scale_rewards": "Scale rewards", "epsilon": "Clipping range", "normalize_advantages": "Normalise advantages",
    "desirable_weight": "Weight of good answers", "undesirable_weight": "Weight of bad answers",
}

# The fields the other forms refuse, as those forms label them (Admin, Data, Records, Rate, Rank, Chat, Arena).
FORM_LABELS = {
    "name": "Name", "measure": "Measure", "heldout_share": "Held-out share", "held-out share": "Held-out share",
    "answer_tokens": "Answer length (tokens)", "prompt_format": "Prompt format", "overlap": "Annotators per item",
    "order": "Ranking", "value": "Corrected value", "score": "Score", "scores": "Score", "rank": "Rank",
    "comment": "Comment", "item_id": "Item number", "item id": "Item id (from the record)",
    "label_id": "Label id (from the record)", "label id": "Label id (from the record)",
    "record id": "Record (prompt) id", "prompt_id": "Prompt number",
    "prompt number": "Prompt number", "prompt": "Prompt", "prompts": "Prompts", "prompt file": "Prompt file",
    "preference file": "Preference file", "username": "Username", "password": "Password", "role": "Role",
    "new password": "New password", "repeat new password": "Repeat new password",
    "current password": "Current password", "project": "Project", "kind": "Kind", "format": "Format",
    "license": "License", "guideline": "Guidelines", "n_per_prompt": "Answers per prompt",
    "limit": "Prompts", "which prompts": "Which prompts", "history": "Conversation", "message": "Message",
    "battle_id": "Battle", "winner": "Winner", "model_b": "Model 2", "reward model": "Reward model",
    "likert_max": "Highest score", "likert_min": "Lowest score", "scale_max": "Highest score",
    "min_score": "Lowest score",
    "gold": "Gold answer", "gold.score": "Gold answer", "gold.order": "Gold answer", "label_state": "Label state",
    "annotator": "Annotator", "page": "Page", "page_size": "Page size", "response_id": "Answer",
    "response_ids": "Answers", "answer": "Answer", "answers": "Answers", "path": "Folder on the server",
    "criterion": "Question", "selection": "Queue order", "ranking_size": "Answers per ranking",
    "stage": "What to train", "model": "Model", "reward_model": "Reward model", "run": "Run", "run_id": "Run",
    "recipe": "Recipe", "load_in_4bit": "4-bit model (QLoRA)", "judge": "Judge",
}

# Every field a toast may name. The Train form's words win where two forms share a field name; a form whose
# widgets read otherwise (Data > Generate's sampling: batch_size is "Prompts per batch") passes its own labels.
FIELD_LABELS: Mapping[str, str] = {**forms.READABLE_LABELS, **FORM_LABELS, **TRAIN_LABELS}

# "max_new_tokens=5000: must be ..." (rlhf.configs' _check, a dataclass's __post_init__): the value and why.
NAMED_VALUE = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)=(?P<value>.*?): (?P<why>.*)$", re.S)


def field_label(field: str, labels: Mapping[str, str] | None = None) -> str:
    """The words the form shows for `field`: `labels` (the form's own), then FIELD_LABELS, else its name in
    words ("warmup_steps" -> "Warmup steps", "--session-days" -> "Session days")."""
    found = (labels or {}).get(field) or FIELD_LABELS.get(field)
    if found:
        return found
    words = field.strip("-").replace("_", " ").replace("-", " ").strip()
    return words[:1].upper() + words[1:] if words else field


def toast_text(error: InputError, labels: Mapping[str, str] | None = None) -> str:
    """An InputError as a toast says it: the file and line as they are, the field in the form's words, and a
    message that names the field again as `name=value` said as the value and why."""
    if not isinstance(error, InputError):
        return str(error)
    where = [str(error.file)] if error.file is not None else []
    if error.line is not None:
        where.append(f"line {error.line}")
    message = error.message
    if error.field is not None:
        named = NAMED_VALUE.match(message)
        if named and named.group("name") == error.field:
            message = f"{named.group('why')} (got {named.group('value')})"
        where.append(field_label(error.field, labels))
    return ": ".join([", ".join(where), message]) if where else message


# Markdown's ASCII punctuation: each escaped with a backslash shows as itself (CommonMark, "Backslash escapes").
MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()#+\-.!|~<>])")


def literal(text: object, limit: int | None = None) -> str:
    """Text from the data (a prompt, an answer, a comment) shown as typed inside our own Markdown: on one line,
    cut to `limit` characters before escaping (a cut never splits an escape), every Markdown character escaped. An
    answer's own **bold** cut at 400 characters left a lone "**" that paired with the next bold of the page, and
    its newlines broke the list it sat in."""
    flat = " ".join(str(text).split())
    if limit is not None and len(flat) > limit:
        flat = flat[:limit - 1] + "…"
    return MARKDOWN_SPECIALS.sub(r"\\\1", flat)
