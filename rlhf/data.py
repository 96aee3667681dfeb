"""From TRL-format rows to token ids, and collators that pad them.

Row formats (the app's exports use them unchanged):
- preference: `prompt`, `chosen`, `rejected` [+ `margin`]; each a string (standard) or a list of
  {"role", "content"} messages (conversational: the chat template is applied). Without a `prompt`
  column, a conversational pair's prompt is everything before the last message of `chosen`.
- SFT: `prompt` + `completion`, or `messages`, or `text`.

Conventions: `[chosen; rejected]` concatenated on dim 0; right padding for scoring and
training; masks are built from lengths, never from the pad id, because the default model's pad token
is its EOS token.
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch

from rlhf.core import pad_sequences

Messages = list[dict[str, str]]


# ---- rendering rows to text --------------------------------------------------------------------------
def is_conversational(example: dict[str, Any]) -> bool:
    """True when the row's text fields are lists of {"role", "content"} messages."""
    for key in ("prompt", "chosen", "rejected", "completion", "messages"):
        value = example.get(key)
        if isinstance(value, list) and value and isinstance(value[0], dict) and "role" in value[0]:
            return True
    return False


def _plain_messages(messages: Messages) -> str:
    # Tokenizers without a chat template (encoders such as MiniLM) get a readable transcript instead.
    return "\n".join(f"{m['role']}: {m['content']}" for m in messages)


def render_prompt_completion(tokenizer, prompt: str | Messages, completion: str | Messages) -> tuple[str, str]:
    """(prompt text, completion text) whose concatenation is what the model reads.

    Conversational turns go through the chat template; the completion is the rendered conversation
    minus the rendered prompt (with the generation prompt), as TRL does, so the template's end-of-turn
    token is part of the completion and is learned.
    """
    if isinstance(prompt, str) and isinstance(completion, str):
        return prompt, completion
    if isinstance(prompt, str) or isinstance(completion, str):
        raise ValueError("prompt and completion must both be strings or both be lists of messages")
    if getattr(tokenizer, "chat_template", None) is None:
        return _plain_messages(prompt), "\n".join(m["content"] for m in completion)
    prompt_text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    full_text = tokenizer.apply_chat_template(prompt + completion, tokenize=False)
    if not full_text.startswith(prompt_text):
        # A template that renders the prompt differently once an answer follows (rare): fall back to
        # the prompt without a generation prompt, which is always a prefix of the conversation.
        prompt_text = tokenizer.apply_chat_template(prompt, tokenize=False)
    return prompt_text, full_text[len(prompt_text) :]


def split_preference(example: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(prompt, chosen, rejected), taking the prompt out of `chosen` when there is no prompt column."""
    chosen, rejected = example["chosen"], example["rejected"]
    prompt = example.get("prompt")
    if prompt is None:
        if not isinstance(chosen, list):
            raise ValueError("a standard (text) preference row needs a 'prompt' column")
        prompt, chosen, rejected = chosen[:-1], chosen[-1:], rejected[-1:]
    return prompt, chosen, rejected


# ---- checking rows ------------------------------------------------------------------------------------
class DataError(ValueError):
    """A bad row or column. `row` is 0-based; the services turn this into InputError(line=row + 1, field=field)."""

    def __init__(self, message: str, row: int | None = None, field: str | None = None):
        self.message, self.row, self.field = message, row, field
        where = ", ".join(p for p in (f"row {row}" if row is not None else "", f"field '{field}'" if field else "") if p)
        super().__init__(f"{where}: {message}" if where else message)


def check_text(value: Any, row: int, field: str) -> str:
    """'text' or 'messages' for a valid cell; raises DataError otherwise."""
    if isinstance(value, str):
        if not value.strip() and field != "prompt":
            raise DataError("is empty", row, field)
        return "text"
    if isinstance(value, list) and value:
        for message in value:
            if not (isinstance(message, dict) and isinstance(message.get("role"), str) and isinstance(message.get("content"), str)):
                raise DataError('messages must be {"role": str, "content": str} objects', row, field)
        return "messages"
    raise DataError(f"must be a string or a non-empty list of messages, got {type(value).__name__}", row, field)


def check_preference_rows(dataset) -> None:
    """Raise DataError for the first bad row of a prompt/chosen/rejected[/margin] dataset."""
    columns = set(dataset.column_names)
    for name in ("chosen", "rejected"):
        if name not in columns:
            raise DataError(f"preference data needs columns prompt, chosen, rejected; got {sorted(columns)}", field=name)
    for i, row in enumerate(dataset):
        kinds = {check_text(row[k], i, k) for k in ("chosen", "rejected")}
        if row.get("prompt") is not None:
            kinds.add(check_text(row["prompt"], i, "prompt"))
        elif kinds != {"messages"}:
            raise DataError("is missing (text pairs need a prompt)", i, "prompt")
        if len(kinds) > 1:
            raise DataError("prompt, chosen and rejected must all be text or all be message lists", i, "chosen")
        if "margin" in row:
            try:
                margin = float(row["margin"])
            except (TypeError, ValueError):
                raise DataError(f"must be a number, got {row['margin']!r}", i, "margin") from None
            if margin != margin or margin in (float("inf"), float("-inf")):
                raise DataError(f"must be finite, got {margin}", i, "margin")


def check_sft_rows(dataset) -> None:
    """Raise DataError for the first bad row of a prompt/completion, messages or text dataset."""
    columns = set(dataset.column_names)
    if {"prompt", "completion"} <= columns:
        fields = ("prompt", "completion")
    elif "messages" in columns:
        fields = ("messages",)
    elif "text" in columns:
        fields = ("text",)
    else:
        raise DataError(f"SFT data needs columns prompt+completion, messages or text; got {sorted(columns)}")
    for i, row in enumerate(dataset):
        kinds = {check_text(row[k], i, k) for k in fields}
        if len(kinds) > 1:
            raise DataError("prompt and completion must both be text or both be message lists", i, "completion")
        if fields == ("text",) and kinds != {"text"}:
            raise DataError("must be a string", i, "text")


# ---- tokenising ---------------------------------------------------------------------------------------
def tokenize_pair(tokenizer, prompt_text: str, completion_text: str, conversational: bool) -> tuple[list, list]:
    """Prompt ids (with the tokenizer's own special tokens unless a template already wrote them) and
    completion ids, ending with EOS for plain text (a chat template ends the turn itself)."""
    prompt_ids = tokenizer(prompt_text, add_special_tokens=not conversational)["input_ids"]
    completion_ids = tokenizer(completion_text, add_special_tokens=False)["input_ids"]
    if not conversational and tokenizer.eos_token_id is not None:
        completion_ids = completion_ids + [tokenizer.eos_token_id]
    return prompt_ids, completion_ids


def tokenize_preference_causal(
    example: dict[str, Any], tokenizer, max_length: int | None, max_prompt_length: int | None
) -> dict[str, list[int]]:
    """A preference row -> prompt_input_ids, chosen_input_ids, rejected_input_ids (for DPO).

    The prompt keeps its last `max_prompt_length` tokens (the end is what the answer follows);
    then completions are cut at the end so prompt + completion fits `max_length`.
    """
    conversational = is_conversational(example)
    prompt, chosen, rejected = split_preference(example)
    prompt_text, chosen_text = render_prompt_completion(tokenizer, prompt, chosen)
    _, rejected_text = render_prompt_completion(tokenizer, prompt, rejected)
    prompt_ids, chosen_ids = tokenize_pair(tokenizer, prompt_text, chosen_text, conversational)
    _, rejected_ids = tokenize_pair(tokenizer, prompt_text, rejected_text, conversational)
    if max_prompt_length is not None:
        prompt_ids = prompt_ids[-max_prompt_length:]
    if max_length is not None:
        room = max(max_length - len(prompt_ids), 1)
        chosen_ids, rejected_ids = chosen_ids[:room], rejected_ids[:room]
    return {"prompt_input_ids": prompt_ids, "chosen_input_ids": chosen_ids, "rejected_input_ids": rejected_ids}


def uses_text_pairs(tokenizer) -> bool:
    """Encoders (no EOS token, e.g. BERT/MiniLM) read prompt and response as a text pair:
    [CLS] prompt [SEP] response [SEP], scored from [CLS]."""
    return tokenizer.eos_token_id is None and tokenizer.sep_token_id is not None


def tokenize_for_reward(tokenizer, prompt_text: str, response_text: str, max_length: int | None) -> dict[str, list[int]]:
    """One (prompt, response) for a sequence-classification reward model; used in training and scoring.

    Decoders read prompt + response (+ EOS) and are scored on their last non-pad token, so a too-long
    input keeps its end (the response) and loses the start of the prompt.
    """
    if uses_text_pairs(tokenizer):
        return dict(tokenizer(prompt_text, response_text, truncation=True, max_length=max_length))
    ids = tokenizer(prompt_text + response_text)["input_ids"]
    if tokenizer.eos_token_id is not None and (not ids or ids[-1] != tokenizer.eos_token_id):
        ids = ids + [tokenizer.eos_token_id]
    if max_length is not None:
        ids = ids[-max_length:]
    return {"input_ids": ids, "attention_mask": [1] * len(ids)}


def tokenize_preference_reward(example: dict[str, Any], tokenizer, max_length: int | None) -> dict[str, list[int]]:
    """A preference row -> {input_ids,attention_mask[,token_type_ids]}_{chosen,rejected}."""
    prompt, chosen, rejected = split_preference(example)
    out = {}
    for name, response in (("chosen", chosen), ("rejected", rejected)):
        prompt_text, response_text = render_prompt_completion(tokenizer, prompt, response)
        for key, value in tokenize_for_reward(tokenizer, prompt_text, response_text, max_length).items():
            out[f"{key}_{name}"] = value
    return out


def tokenize_sft(example: dict[str, Any], tokenizer, max_length: int | None) -> dict[str, list[int]]:
    """An SFT row -> input_ids and completion_mask (1 on tokens the loss is taken on when
    completion_only_loss is on). `messages` rows treat their last assistant turn as the completion."""
    if "text" in example and example["text"] is not None and "prompt" not in example and "messages" not in example:
        ids = tokenizer(example["text"])["input_ids"]
        if tokenizer.eos_token_id is not None:
            ids = ids + [tokenizer.eos_token_id]
        prompt_ids, completion_ids = [], ids
    else:
        if "messages" in example and example.get("messages") is not None:
            messages = example["messages"]
            if messages[-1]["role"] == "assistant":
                prompt, completion = messages[:-1], messages[-1:]
            else:
                prompt, completion = [], messages
        elif "prompt" in example and "completion" in example:
            prompt, completion = example["prompt"], example["completion"]
        else:
            raise ValueError(f"an SFT row needs 'prompt'+'completion', 'messages' or 'text'; got {sorted(example)}")
        conversational = isinstance(completion, list)
        prompt_text, completion_text = render_prompt_completion(tokenizer, prompt, completion)
        prompt_ids, completion_ids = tokenize_pair(tokenizer, prompt_text, completion_text, conversational)
    input_ids = prompt_ids + completion_ids
    completion_mask = [0] * len(prompt_ids) + [1] * len(completion_ids)
    if max_length is not None:
        input_ids, completion_mask = input_ids[:max_length], completion_mask[:max_length]
    return {"input_ids": input_ids, "completion_mask": completion_mask}


def pack_examples(batch: dict[str, list[list[int]]], max_length: int) -> dict[str, list[list[int]]]:
    """Concatenate tokenised examples and cut them into blocks of `max_length` (a batched map).

    This is "wrapped" packing: an example may span two blocks and attends to the one before it in its
    block; that is cheap and standard for short SFT data, and no padding is spent.
    """
    ids = [t for seq in batch["input_ids"] for t in seq]
    mask = [m for seq in batch["completion_mask"] for m in seq]
    starts = range(0, len(ids), max_length)
    return {"input_ids": [ids[i : i + max_length] for i in starts], "completion_mask": [mask[i : i + max_length] for i in starts]}


# ---- collators ----------------------------------------------------------------------------------------
def pad_token_lists(seqs: Sequence[Sequence[int]], value: int) -> torch.Tensor:
    return pad_sequences([torch.tensor(s, dtype=torch.long) for s in seqs], value, side="right")


class PreferenceCollator:
    """DPO batches: `[chosen; rejected]` prompt+completion sequences on dim 0, right padded.

    Returns input_ids and attention_mask (2B, T) and completion_mask (2B, T), 1 on completion tokens
    only, so log-probs sum over the answer and never over the prompt or padding.
    Cached reference log-probs, when the rows have them, come along as (B,) tensors.
    """

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        seqs, masks = [], []
        for key in ("chosen_input_ids", "rejected_input_ids"):
            for ex in examples:
                seqs.append(list(ex["prompt_input_ids"]) + list(ex[key]))
                masks.append([0] * len(ex["prompt_input_ids"]) + [1] * len(ex[key]))
        batch = {
            "input_ids": pad_token_lists(seqs, self.pad_token_id),  # (2B, T)
            "attention_mask": pad_token_lists([[1] * len(s) for s in seqs], 0),
            "completion_mask": pad_token_lists(masks, 0),
        }
        for key in ("ref_chosen_logps", "ref_rejected_logps"):
            if key in examples[0]:
                batch[key] = torch.tensor([ex[key] for ex in examples], dtype=torch.float32)
        return batch


class RewardCollator:
    """Reward-model batches: `[chosen; rejected]` on dim 0, right padded, plus `margin` (B,) if present."""

    def __init__(self, pad_token_id: int):
        self.pad_token_id = pad_token_id

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = {}
        for key in ("input_ids", "attention_mask", "token_type_ids"):
            if f"{key}_chosen" not in examples[0]:
                continue
            seqs = [ex[f"{key}_chosen"] for ex in examples] + [ex[f"{key}_rejected"] for ex in examples]
            batch[key] = pad_token_lists(seqs, self.pad_token_id if key == "input_ids" else 0)  # (2B, T)
        if "margin" in examples[0]:
            batch["margin"] = torch.tensor([float(ex["margin"]) for ex in examples], dtype=torch.float32)
        return batch


class SFTCollator:
    """SFT batches: input_ids, attention_mask and labels (B, T); labels are -100 on padding and, with
    completion_only_loss, on prompt tokens, so the causal-LM loss counts completion tokens only."""

    def __init__(self, pad_token_id: int, completion_only_loss: bool = True):
        self.pad_token_id, self.completion_only_loss = pad_token_id, completion_only_loss

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        input_ids = pad_token_lists([ex["input_ids"] for ex in examples], self.pad_token_id)  # (B, T)
        attention_mask = pad_token_lists([[1] * len(ex["input_ids"]) for ex in examples], 0)
        keep = pad_token_lists([ex["completion_mask"] for ex in examples], 0) if self.completion_only_loss else attention_mask
        labels = input_ids.masked_fill(keep == 0, -100)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def tokenizer_alias(processing_class, tokenizer, trainer: str):
    """TRL 0.11's `tokenizer=` is current TRL's (and transformers') `processing_class=`."""
    if tokenizer is None:
        return processing_class
    if processing_class is not None and processing_class is not tokenizer:
        raise ValueError(f"{trainer}: pass the tokenizer once, as processing_class= (tokenizer= is its old name)")
    warnings.warn(f"{trainer}: tokenizer= is deprecated (TRL 0.11), use processing_class=", FutureWarning, stacklevel=3)
    return tokenizer
