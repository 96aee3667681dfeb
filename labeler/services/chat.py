"""Chat with a model: a small cache of loaded models, streamed and plain replies, best-of-N, rating.

A conversation is a list of {"role": "user" | "assistant", "content": str} messages ending with the
user's turn; the system prompt is passed apart. A rated answer is stored like any other label (prompt,
response, rating item, rating), so chatting produces training data.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import sqlite_utils

from labeler.services import label_kinds, labeling
from labeler.services.accounts import require_user
from labeler.services.errors import InputError
from labeler.services.models import check_generates_text
from labeler.services.projects import get_project
from labeler.services.prompts import TYPED_SPLIT, PromptRecord, insert_prompt
from labeler.services.responses import insert_response
from rlhf.configs import GenerationSettings
from rlhf.loading import load_causal_lm, load_tokenizer, resolve_model_path
from storage import write_transaction

Messages = list[dict]
CHAT_SETTINGS = GenerationSettings(max_new_tokens=256, temperature=0.7, top_p=0.9, batch_size=1)
STREAM_TIMEOUT_S = 300.0  # a generation thread silent this long has died
# Longest message and conversation accepted: a chat turn is typed by a person, and whatever is stored
# (a rated answer's prompt) ends up in exports and training data. 5 MB comments were once stored.
MAX_MESSAGE_CHARS = 20_000
MAX_MESSAGES = 200
# The whole conversation (and the system prompt) at most: the cost of a request grows with it (templating,
# tokenizing, storing a rated prompt), and 200 messages of 20k characters took minutes of CPU.
# 100k characters is ~25k tokens, more than the default model's context: a longer chat loses nothing it uses.
MAX_HISTORY_CHARS = 100_000


class GeneratedAnswers:
    """Digests of the answers this server generated, newest `max_entries` kept. Thread-safe.

    A chat's rating arrives with the conversation and the answer as the browser holds them, so a client can
    send any text as "the model's answer". rate_answer marks a response server_generated only when its
    (model, conversation, answer) is one recorded here; exports leave unmarked chat rows out of training data.
    Kept in memory: after a restart, answers from before it are stored unmarked (safe, not exported).
    """

    def __init__(self, max_entries: int = 10_000):
        self.max_entries = max_entries
        self._digests: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def digest(model: str, history: Sequence[dict], answer: str) -> str:
        # System turns are left out (the system prompt travels apart and is not part of the stored prompt);
        # surrounding whitespace too, which the chat widget may trim.
        turns = [[m["role"], m["content"].strip()] for m in history if m["role"] != "system"]
        payload = json.dumps([str(model), turns, answer.strip()], ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    def add(self, model: str, history: Sequence[dict], answer: str) -> None:
        if not answer.strip():
            return
        key = self.digest(model, history, answer)
        with self._lock:
            self._digests[key] = None
            self._digests.move_to_end(key)
            while len(self._digests) > self.max_entries:
                self._digests.popitem(last=False)

    def contains(self, model: str, history: Sequence[dict], answer: str) -> bool:
        with self._lock:
            return self.digest(model, history, answer) in self._digests


class ModelCache:
    """The last `max_models` loaded models, least recently used evicted first. Thread-safe.

    Owned by its caller (a UI tab's build(), a CLI command); never a module global, so two apps in one
    process do not share memory they did not ask to share. Keys are (path, kind). `generated` records every
    answer generated through it (see GeneratedAnswers).
    """

    def __init__(self, max_models: int = 2):
        if max_models < 1:
            raise ValueError(f"max_models={max_models!r}: must be at least 1")
        self.max_models = max_models
        self.generated = GeneratedAnswers()
        self._models: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._lock = threading.Lock()  # guards the two dicts, never held while loading
        self._loading: dict[tuple[str, str], threading.Lock] = {}

    def get(self, name_or_path: str, kind: str = "causal") -> Any:
        """(model, tokenizer) for kind 'causal'; a RewardScorer for kind 'reward'."""
        key = (str(name_or_path), kind)
        with self._lock:
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key]
            loading = self._loading.setdefault(key, threading.Lock())
        # One lock per model being loaded: two requests for the same new model load it once, and a slow
        # load (a big model, a cold disk) does not hold up chats with models already loaded.
        with loading:
            with self._lock:
                if key in self._models:
                    self._models.move_to_end(key)
                    return self._models[key]
            try:
                loaded = _load(*key)
            except BaseException:
                with self._lock:
                    self._loading.pop(key, None)
                raise
            with self._lock:
                self._models[key] = loaded
                self._loading.pop(key, None)
                while len(self._models) > self.max_models:
                    self._models.popitem(last=False)
                return loaded

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._models

    def __len__(self) -> int:
        return len(self._models)


def _load(name_or_path: str, kind: str) -> Any:
    import torch

    if kind == "reward":
        from rlhf.reward import RewardScorer  # torch and transformers

        return RewardScorer(name_or_path)
    if kind != "causal":
        raise ValueError(f"kind={kind!r}: 'causal' or 'reward'")

    check_generates_text(resolve_model_path(name_or_path))  # an encoder would answer from a random head
    model = load_causal_lm(name_or_path).eval()
    if torch.cuda.is_available():
        model = model.to("cuda")
    return model, load_tokenizer(name_or_path, padding_side="left")


def check_length(text: str, field: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    if isinstance(text, str) and len(text) > limit:
        raise InputError(f"{len(text):,} characters: at most {limit:,}", field=field)
    return text


def check_history(history: Sequence[dict], system_prompt: str | None = None) -> Messages:
    """Plain {"role", "content"} messages ending with a non-empty user turn, MAX_HISTORY_CHARS in all (with the
    system prompt). Refused before any work: this check costs one pass over the characters."""
    if not isinstance(history, (list, tuple)) or len(history) > MAX_MESSAGES:
        count = len(history) if isinstance(history, (list, tuple)) else "not a list of"
        raise InputError(f"{count} messages: at most {MAX_MESSAGES}; clear the chat", field="history")
    check_length(system_prompt or "", "system prompt")
    messages, total = [], len(system_prompt or "")
    for number, message in enumerate(history, start=1):
        role, content = (message.get("role"), message.get("content")) if isinstance(message, dict) else (None, None)
        if role not in ("user", "assistant", "system") or not isinstance(content, str):
            raise InputError(f"message {number}: needs a role (user/assistant/system) and text content", field="history")
        check_length(content, f"message {number}")
        total += len(content)
        if total > MAX_HISTORY_CHARS:
            raise InputError(f"the conversation is over {MAX_HISTORY_CHARS:,} characters at message {number}; "
                             "clear the chat (or shorten the system prompt)", field="history")
        messages.append({"role": role, "content": content})
    if not messages or messages[-1]["role"] != "user" or not messages[-1]["content"].strip():
        raise InputError("the conversation must end with a non-empty user message", field="history")
    return messages


def _prompt_ids(model, tokenizer, history: Messages, system_prompt: str | None, max_new_tokens: int,
                chat_template: bool | None = None):
    """The prompt's token ids, dropping the oldest turns when it would not fit the model's context.

    At most three tokenizer passes whatever the length: the whole prompt, then (only when it does not fit)
    every message's tokens counted in one batch to choose how many old turns go, then the kept turns. Dropping
    one turn and tokenizing again, turn by turn, cost the square of the conversation's length.
    `chat_template` is build_prompt_ids's use_chat_template: the project's prompt format (Project.chat_template).
    """
    from rlhf.generation import build_prompt_ids  # imports torch

    def build(messages: Messages):
        return build_prompt_ids(tokenizer, messages, system_prompt=system_prompt or None, use_chat_template=chat_template)

    limit = getattr(model.config, "max_position_embeddings", None) or 2048
    budget = max(limit - max_new_tokens, 1)
    history = list(history)
    ids = build(history)
    if len(ids) <= budget or len(history) == 1:
        return ids[-budget:]
    counts = [len(row) for row in tokenizer([m["content"] for m in history], add_special_tokens=False)["input_ids"]]
    # What the template adds around each turn (role markers), on average: the messages' own tokens alone would
    # drop too few turns, and the left cut below would then eat into the newest one.
    per_turn = max(0.0, (len(ids) - sum(counts)) / len(history))
    total, drop = float(len(ids)), 0
    while drop < len(history) - 1 and total > budget:
        total -= counts[drop] + per_turn
        drop += 1
    return build(history[drop:])[-budget:]


def stream_reply(
    cache: ModelCache,
    model_name_or_path: str,
    history: Sequence[dict],
    system_prompt: str | None = None,
    settings: GenerationSettings = CHAT_SETTINGS,
    chat_template: bool | None = None,
) -> Iterator[str]:
    """Yield the answer piece by piece as it is generated (transformers' TextIteratorStreamer + a thread).

    The pieces joined are the text `reply` returns for the same settings (greedy decoding, or the same seed).
    Closing the generator early (the user pressed Stop, the browser went away: Gradio calls close()) stops
    the generation thread at its next token instead of letting it run to max_new_tokens.
    """
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer

    from rlhf.generation import autocast_context, eos_token_ids, generation_kwargs  # imports torch

    messages = check_history(history, system_prompt)
    model, tokenizer = cache.get(model_name_or_path)
    ids = _prompt_ids(model, tokenizer, messages, system_prompt, settings.max_new_tokens, chat_template)
    device = next(model.parameters()).device
    eos_ids = eos_token_ids(model, tokenizer)
    streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=STREAM_TIMEOUT_S)
    failure: list[BaseException] = []
    stop = threading.Event()

    class StopWhenClosed(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.full((input_ids.shape[0],), stop.is_set(), dtype=torch.bool, device=input_ids.device)

    def run() -> None:
        try:
            # Seeded like generate_batch; fork_rng keeps the caller's RNG as it was.
            with torch.no_grad(), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                torch.manual_seed(settings.seed)
                with autocast_context(model, settings.autocast):
                    model.generate(
                        input_ids=ids[None].to(device),
                        attention_mask=torch.ones_like(ids)[None].to(device),
                        streamer=streamer,
                        stopping_criteria=StoppingCriteriaList([StopWhenClosed()]),
                        **generation_kwargs(settings, eos_ids, tokenizer.pad_token_id),
                    )
        except BaseException as error:  # re-raised in the caller's thread below
            failure.append(error)
            streamer.end()

    thread = threading.Thread(target=run, daemon=True, name="chat-generate")
    thread.start()
    answer = []
    try:
        for piece in streamer:
            if piece:
                answer.append(piece)
                yield piece
    finally:
        stop.set()  # a no-op after a normal end; after close() it ends the generation at the next token
        # A stopped answer is still the model's text, and may be rated as it stands.
        cache.generated.add(model_name_or_path, messages, "".join(answer))
    thread.join()
    if failure:
        raise failure[0]


def reply(
    cache: ModelCache,
    model_name_or_path: str,
    history: Sequence[dict],
    system_prompt: str | None = None,
    settings: GenerationSettings = CHAT_SETTINGS,
    chat_template: bool | None = None,
) -> str:
    """The whole answer at once."""
    from rlhf.generation import decode_responses, generate_batch  # imports torch

    messages = check_history(history, system_prompt)
    model, tokenizer = cache.get(model_name_or_path)
    ids = _prompt_ids(model, tokenizer, messages, system_prompt, settings.max_new_tokens, chat_template)
    answer = decode_responses(tokenizer, generate_batch(model, tokenizer, [ids], settings))[0]
    cache.generated.add(model_name_or_path, messages, answer)
    return answer


def reward_prompt(history: Messages) -> str | Messages:
    """The prompt as stored and as a reward model is trained on it: a single user turn is plain text
    (see prompts.PromptRecord), a longer conversation stays a message list."""
    turns = [m for m in history if m["role"] != "system"]
    return turns[0]["content"] if len(turns) == 1 else turns


def best_of_n(
    cache: ModelCache,
    model: str,
    reward_model: str,
    history: Sequence[dict],
    n: int,
    settings: GenerationSettings = CHAT_SETTINGS,
    system_prompt: str | None = None,
    chat_template: bool | None = None,
) -> tuple[str, list[tuple[str, float]]]:
    """Sample n answers, score each with the reward model, return (best, [(answer, score), ...]).

    Sampling is forced on (n greedy answers would be identical). The answers come back in sampling
    order; ties go to the earliest.
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 64:
        raise InputError(f"must be between 1 and 64, got {n!r}", field="n")
    from rlhf.generation import decode_responses, generate_batch  # imports torch

    messages = check_history(history, system_prompt)
    lm, tokenizer = cache.get(model)
    ids = _prompt_ids(lm, tokenizer, messages, system_prompt, settings.max_new_tokens, chat_template)
    sampling = dataclasses.replace(settings, do_sample=True, batch_size=n)
    answers = decode_responses(tokenizer, generate_batch(lm, tokenizer, [ids] * n, sampling))
    for answer in answers:  # any of them may end up in the chat (the winner does) and be rated
        cache.generated.add(model, messages, answer)
    scorer = cache.get(reward_model, kind="reward")
    prompt = reward_prompt(messages)
    if isinstance(prompt, str):
        scores = scorer.score([prompt] * n, answers)
    else:
        scores = scorer.score([prompt] * n, [[{"role": "assistant", "content": a}] for a in answers])
    scored = list(zip(answers, [float(s) for s in scores]))
    best = max(range(n), key=lambda i: (scored[i][1], -i))
    return scored[best][0], scored


@dataclass(frozen=True)
class RatedAnswer:
    prompt_id: int
    response_id: int
    item_id: int
    rating_id: int


def _prompt_record(prompt: str | Sequence[dict]) -> PromptRecord:
    if isinstance(prompt, str):
        if not prompt.strip():
            raise InputError("is empty", field="prompt")
        check_length(prompt, "prompt")
        return PromptRecord(prompt, None)
    turns = [m for m in check_history(prompt) if m["role"] != "system"]
    # Stored the way prompts.py stores conversations, so the same chat is the same prompt.
    return PromptRecord(turns[-1]["content"], None if len(turns) == 1 else turns)


def rate_answer(
    db: sqlite_utils.Database,
    project: str,
    username: str,
    prompt: str | Sequence[dict],
    answer: str,
    model: str,
    score: float,
    settings: GenerationSettings | None = None,
    source: str = "chat",
    generated: GeneratedAnswers | None = None,
    generated_by: str | None = None,
) -> RatedAnswer:
    """Store a chat answer and the user's Likert score for it, as prompt, response, rating item and rating.

    Everything is checked before the first write. The item goes through labeling (create_items and
    submit_rating with claim=True), so queues, overlap and exports treat it like any other label.
    The response is marked server_generated only when `generated` (the server's ModelCache.generated) holds
    this answer to this conversation from `generated_by` (the model path it was generated with; default
    `model`); otherwise it is stored but left out of training exports, since its text came from the client.
    """
    proj = get_project(db, project)
    require_user(db, username)
    score = label_kinds.validate_score(score, proj.likert_min, proj.likert_max)
    record = _prompt_record(prompt)
    if not isinstance(answer, str) or not answer.strip():
        raise InputError("is empty: nothing to rate", field="answer")
    check_length(answer, "answer", limit=4 * MAX_MESSAGE_CHARS)  # an answer may be longer than a typed turn
    settings_json = json.dumps(dataclasses.asdict(settings), sort_keys=True) if settings else "{}"
    history = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    server_generated = generated is not None and generated.contains(generated_by or model, history, answer)
    with write_transaction(db):
        # Typed by the user: kept apart from the training prompts until an admin promotes it (prompts.TYPED_SPLIT).
        prompt_id, _ = insert_prompt(db, proj.id, record, source, split=TYPED_SPLIT)
        response_id = insert_response(db, prompt_id, answer, model=model, source=source, settings_json=settings_json,
                                      server_generated=server_generated)
    labeling.create_items(db, project, [response_id], kinds=("rating",))
    item_id = labeling.find_item(db, proj.id, "rating", [response_id])
    result = labeling.submit_rating(db, project, username, item_id, score, claim=True)
    return RatedAnswer(prompt_id, response_id, item_id, result.label_id)
