"""Chat with a model: a small cache of loaded models, streamed and plain replies, best-of-N, rating.

A conversation is a list of {"role": "user" | "assistant", "content": str} messages ending with the
user's turn; the system prompt is passed apart. A rated answer is stored like any other label (prompt,
response, rating item, rating), so chatting produces training data.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

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
# One web request's estimated compute at most, in seconds at the model's measured speed: half for reading the
# conversation, half for writing the answer(s). A 256-token answer once cost 83 s of server CPU, a 95k-character
# history 79 s and 900 MB, and 1,024 tokens did not finish in 900 s.
MAX_REQUEST_S = 60.0
MIN_ANSWER_TOKENS = 16  # the bounds never go below these, however slow the model measured
MIN_PROMPT_TOKENS = 256


@dataclass(frozen=True)
class ModelSpeed:
    """How fast a loaded model reads a prompt and writes an answer on this server, measured once when first
    used (measure_speed)."""
    prefill_tokens_per_s: float
    decode_tokens_per_s: float

    def limits(self, budget_s: float, answers: int = 1) -> tuple[int, int]:
        """(most new tokens per answer, most prompt tokens) that keep a request within `budget_s`: half of it
        for reading the prompt, half for writing `answers` answers."""
        new = max(MIN_ANSWER_TOKENS, int(self.decode_tokens_per_s * budget_s / 2 / max(answers, 1)))
        prompt = max(MIN_PROMPT_TOKENS, int(self.prefill_tokens_per_s * budget_s / 2))
        return new, prompt


def measure_speed(model, tokenizer, prompt_tokens: int = 128, new_tokens: int = 8) -> ModelSpeed:
    """Time one forward pass over `prompt_tokens` and `new_tokens` greedy tokens (wall time: what the server's
    other users wait for). ~1 s for the 135M default model on 2 busy cores."""
    import torch

    device = next(model.parameters()).device
    token = (tokenizer(" the", add_special_tokens=False)["input_ids"] or [0])[0]
    ids = torch.full((1, prompt_tokens), token, dtype=torch.long, device=device)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    with torch.no_grad():
        model(ids[:, :4])  # first call: lazy initialisation, not speed
        start = time.perf_counter()
        model(ids)
        prefill_s = time.perf_counter() - start
        start = time.perf_counter()
        model.generate(ids[:, :1], attention_mask=torch.ones_like(ids[:, :1]), max_new_tokens=new_tokens,
                       min_new_tokens=new_tokens, do_sample=False, pad_token_id=pad)
        decode_s = time.perf_counter() - start
    return ModelSpeed(prompt_tokens / max(prefill_s, 1e-6), new_tokens / max(decode_s, 1e-6))


class RunningChats:
    """Who has an answer being written: one at a time per user, so that one person cannot hold every chat slot
    of the server. Thread-safe."""

    def __init__(self):
        self._users: set[str] = set()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def hold(self, username: str | None) -> Iterator[None]:
        if username is None:  # a caller without users (the command line)
            yield
            return
        with self._lock:
            if username in self._users:
                raise InputError("you already have an answer being written (one at a time per user): wait for it "
                                 "to finish or press Stop", field="message")
            self._users.add(username)
        try:
            yield
        finally:
            with self._lock:
                self._users.discard(username)


@dataclass(frozen=True)
class Bounds:
    """What one request may cost: its settings (max_new_tokens capped), the prompt's tokens at most, and the
    sentence telling the user when the answer length was capped (None when nothing was)."""
    settings: GenerationSettings
    prompt_tokens: int | None
    note: str | None


def request_bounds(cache: "ModelCache", model_name_or_path: str, settings: GenerationSettings,
                   budget_s: float | None, answers: int = 1) -> Bounds:
    """The bounds of one request at the model's measured speed (no bounds when budget_s is None)."""
    if budget_s is None:
        return Bounds(settings, None, None)
    speed = cache.speed(model_name_or_path)
    max_new, max_prompt = speed.limits(budget_s, answers)
    if settings.max_new_tokens <= max_new:
        return Bounds(settings, max_prompt, None)
    note = (f"Answers are capped at {max_new} tokens here (asked: {settings.max_new_tokens}): this model writes "
            f"about {speed.decode_tokens_per_s:.0f} tokens/s on this server, and one request may take about "
            f"{budget_s:.0f} s.")
    return Bounds(dataclasses.replace(settings, max_new_tokens=max_new), max_prompt, note)


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
        self.running = RunningChats()
        self._speeds: dict[str, ModelSpeed] = {}
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
                    (evicted, _), _ = self._models.popitem(last=False)
                    self._speeds.pop(evicted, None)
                return loaded

    def speed(self, name_or_path: str) -> ModelSpeed:
        """The causal model's speed on this server, measured once while it stays loaded."""
        with self._lock:
            known = self._speeds.get(str(name_or_path))
        if known is not None:
            return known
        measured = measure_speed(*self.get(name_or_path))
        with self._lock:
            self._speeds[str(name_or_path)] = measured
        return measured

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
                chat_template: bool | None = None, max_prompt_tokens: int | None = None):
    """The prompt's token ids, dropping the oldest turns when it would not fit the model's context.

    At most three tokenizer passes whatever the length: the whole prompt, then (only when it does not fit)
    every message's tokens counted in one batch to choose how many old turns go, then the kept turns. Dropping
    one turn and tokenizing again, turn by turn, cost the square of the conversation's length.
    `chat_template` is build_prompt_ids's use_chat_template: the project's prompt format (Project.chat_template).
    `max_prompt_tokens` (request_bounds) lowers the budget below the context: old turns go the same way.
    """
    from rlhf.generation import build_prompt_ids  # imports torch

    def build(messages: Messages):
        return build_prompt_ids(tokenizer, messages, system_prompt=system_prompt or None, use_chat_template=chat_template)

    limit = getattr(model.config, "max_position_embeddings", None) or 2048
    budget = max(limit - max_new_tokens, 1)
    if max_prompt_tokens is not None:
        budget = min(budget, max_prompt_tokens)
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
    budget_s: float | None = None,
    username: str | None = None,
    notify: Callable[[str], None] | None = None,
) -> Iterator[str]:
    """Yield the answer piece by piece as it is generated (transformers' TextIteratorStreamer + a thread).

    The pieces joined are the text `reply` returns for the same settings (greedy decoding, or the same seed).
    Closing the generator early (the user pressed Stop, the browser went away: Gradio calls close()) stops
    the generation thread at its next token instead of letting it run to max_new_tokens.
    A web request passes `budget_s` (request_bounds: the answer and the conversation bounded by the model's
    speed; `notify` gets the sentence when the answer length was capped) and `username` (one answer being
    written per user at a time).
    """
    messages = check_history(history, system_prompt)
    with cache.running.hold(username):
        yield from _stream(cache, model_name_or_path, messages, system_prompt, settings, chat_template, budget_s,
                           notify)


def _bounded_request(cache, model_name_or_path, messages, system_prompt, settings, chat_template, budget_s, notify):
    """(model, tokenizer, settings, prompt ids) of one request held to its cost bound (request_bounds): the answer
    length and the conversation cut to what the budget allows at the model's speed, the user told when cut."""
    model, tokenizer = cache.get(model_name_or_path)
    bounds = request_bounds(cache, model_name_or_path, settings, budget_s)
    if bounds.note and notify:
        notify(bounds.note)
    ids = _prompt_ids(model, tokenizer, messages, system_prompt, bounds.settings.max_new_tokens, chat_template,
                      bounds.prompt_tokens)
    return model, tokenizer, bounds.settings, ids


def _stream(cache, model_name_or_path, messages, system_prompt, settings, chat_template, budget_s, notify):
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer

    from rlhf.generation import autocast_context, eos_token_ids, generation_kwargs  # imports torch

    model, tokenizer, settings, ids = _bounded_request(cache, model_name_or_path, messages, system_prompt, settings,
                                                        chat_template, budget_s, notify)
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
    budget_s: float | None = None,
    notify: Callable[[str], None] | None = None,
) -> str:
    """The whole answer at once; `budget_s` and `notify` as for stream_reply."""
    from rlhf.generation import decode_responses, generate_batch  # imports torch

    messages = check_history(history, system_prompt)
    model, tokenizer, settings, ids = _bounded_request(cache, model_name_or_path, messages, system_prompt, settings,
                                                        chat_template, budget_s, notify)
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
    budget_s: float | None = None,
    username: str | None = None,
    notify: Callable[[str], None] | None = None,
) -> tuple[str, list[tuple[str, float]]]:
    """Sample n answers, score each with the reward model, return (best, [(answer, score), ...]).

    Sampling is forced on (n greedy answers would be identical). The answers come back in sampling
    order; ties go to the earliest. `budget_s`, `username` and `notify` as for stream_reply (the n answers
    share the budget).
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 64:
        raise InputError(f"must be between 1 and 64, got {n!r}", field="n")
    messages = check_history(history, system_prompt)
    with cache.running.hold(username):
        return _best_of_n(cache, model, reward_model, messages, n, settings, system_prompt, chat_template,
                          budget_s, notify)


def _best_of_n(cache, model, reward_model, messages, n, settings, system_prompt, chat_template, budget_s, notify):
    from rlhf.generation import decode_responses, generate_batch  # imports torch

    lm, tokenizer = cache.get(model)
    bounds = request_bounds(cache, model, settings, budget_s, answers=n)
    if bounds.note and notify:
        notify(bounds.note)
    settings = bounds.settings
    ids = _prompt_ids(lm, tokenizer, messages, system_prompt, settings.max_new_tokens, chat_template,
                      bounds.prompt_tokens)
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
