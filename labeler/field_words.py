"""The words a person reads for a setting or a form's field: the Train form's labels, the other forms', and any
other field's name in words. On the ground floor (it imports only labeler.forms) so that the services can say a
setting as the form does (the run preview's list of settings the app gave: "KL horizon (rollouts): 8 (app
default)", not "horizon=8") and the UI labels its widgets and toasts with the same words (ui/field_labels.py).

The CLI keeps the field names: they are what its `--set name=value` takes.
"""
from __future__ import annotations

from typing import Mapping

from labeler import forms

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
    # Settings the app, the project or a recipe gives a run, which the preview lists (run_settings.described)
    "horizon": "KL horizon (rollouts)", "kl_coef_min": "Lowest KL weight",
    "gradient_accumulation_steps": "Mini-batches per optimizer step",
    "gradient_checkpointing": "Recompute activations (saves memory)", "num_generations": "Answers per prompt",
    "max_completion_length": "Answer length (new tokens)", "steps_per_generation": "Steps per generation batch",
    "reward_model": "Reward model",
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


def field_label(field: str, labels: Mapping[str, str] | None = None) -> str:
    """The words the form shows for `field`: `labels` (the form's own), then FIELD_LABELS, else its name in
    words ("warmup_steps" -> "Warmup steps", "--session-days" -> "Session days")."""
    found = (labels or {}).get(field) or FIELD_LABELS.get(field)
    if found:
        return found
    words = field.strip("-").replace("_", " ").replace("-", " ").strip()
    return words[:1].upper() + words[1:] if words else field
