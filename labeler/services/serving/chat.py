"""Chat with a model: streamed and plain replies bounded in elapsed time, best-of-N, rating.

The models come from the server's one ModelCache (labeler/services/serving/inference.py), which also gives each person
one answer at a time across Chat, Arena and best-of-N, and the server a cap on generations at once with a queue.

A conversation is a list of {"role": "user" | "assistant", "content": str} messages ending with the
user's turn; the system prompt is passed apart. A rated answer is stored like any other label (prompt,
response, rating item, rating), so chatting produces training data.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
from dataclasses import dataclass
from typing import Iterator, Sequence

import sqlite_utils

from labeler.services.data import label_kinds, labeling
from labeler.services.data.accounts import require_user
from labeler.errors import InputError
# ModelCache, GeneratedAnswers and ModelSpeed live with the cache; chat.ModelCache is the name callers knew.
from labeler.services.serving.inference import GeneratedAnswers, ModelCache, ModelSpeed, Notify, place_words  # noqa: F401
from labeler.services.data.projects import get_project
from labeler.services.data.prompts import TYPED_SPLIT, PromptRecord, insert_prompt
from labeler.services.data.responses import insert_response
from rlhf.configs import GenerationSettings
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
# One web request's elapsed time at most once its turn comes, in seconds: the answer(s) stop there (the tokens
# written so far are the answer), and the conversation and the answer length are cut at the model's speed to fit,
# half for reading the conversation, half for writing. A 256-token answer once cost 83 s of server CPU, a
# 95k-character history 79 s and 900 MB, and 1,024 tokens did not finish in 900 s.
MAX_REQUEST_S = 60.0
MIN_ANSWER_TOKENS = 16  # the bounds never go below these, however slow the model measured
MIN_PROMPT_TOKENS = 256


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
    speed = cache.speed(model_name_or_path, measure_speed)
    max_new, max_prompt = speed.limits(budget_s, answers, MIN_ANSWER_TOKENS, MIN_PROMPT_TOKENS)
    if settings.max_new_tokens <= max_new:
        return Bounds(settings, max_prompt, None)
    note = (f"Answers are capped at {max_new} tokens here (asked: {settings.max_new_tokens}): this model writes "
            f"about {speed.decode_tokens_per_s:.0f} tokens/s on this server now, and one request stops after "
            f"{budget_s:.0f} s.")
    return Bounds(dataclasses.replace(settings, max_new_tokens=max_new), max_prompt, note)


def bound_words(cache: ModelCache, model_name_or_path: str | None, budget_s: float | None) -> str:
    """What a person may expect of an answer before asking, in words (Markdown): the time bound, about how many
    tokens that is at the model's speed measured now (never loading a model to say it), a run holding the
    device, and the answers waiting for a turn."""
    if budget_s is None:
        return "Answers here are not bounded in time."
    words = f"⏱ An answer here stops after **{budget_s:.0f} s** once it starts being written"
    speed = cache.known_speed(model_name_or_path) if model_name_or_path else None
    if speed is not None:
        tokens = speed.limits(budget_s, 1, MIN_ANSWER_TOKENS, MIN_PROMPT_TOKENS)[0]
        words += (f": about **{tokens} tokens** at this model's speed on this server now "
                  f"({speed.decode_tokens_per_s:.1f} tokens/s, followed from every answer).")
    else:
        words += "; how many tokens that is follows this model's speed, measured on its first answer."
    notice = cache.run_notice()
    if notice:
        words += f" {notice[0].upper()}{notice[1:]}"
    running, waiting = cache.turns.counts()
    if waiting:
        words += f" {running + waiting} answers are being written or waiting now; yours would wait its turn."
    return words


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


@dataclass(frozen=True)
class Waiting:
    """stream_events' word that the answer waits for its turn: `ahead` answers are before it."""
    ahead: int

    @property
    def words(self) -> str:
        return place_words(self.ahead)


@dataclass(frozen=True)
class ChatRequest:
    """One streamed answer asked for: the model, the conversation (ending with the user's turn; the system prompt
    apart) and how it is generated. A web request sets `budget_s` (the answer stops after that many seconds, the
    tokens written so far being the answer; the answer length and the conversation are cut to what fits at the
    model's speed now: request_bounds) and `username` (one answer per person at a time, across Chat, Arena and
    best-of-N; the server's cap on answers at once queues the others). `notify` gets, in words, the queue's place
    while waiting, when the answer length was capped, when the answer stopped at the bound, and when the model had
    been unloaded for a training run. `chat_template` is the project's prompt format (Project.chat_template)."""
    model_name_or_path: str
    history: Sequence[dict]
    system_prompt: str | None = None
    settings: GenerationSettings = CHAT_SETTINGS
    chat_template: bool | None = None
    budget_s: float | None = None
    username: str | None = None
    notify: Notify | None = None


def stream_events(cache: ModelCache, request: ChatRequest, poll_s: float = 0.5) -> Iterator[str | Waiting]:
    """stream_reply's pieces, preceded by a Waiting whenever the answer's place in the server's queue changes
    (the Chat tab shows it where the answer will be)."""
    messages = check_history(request.history, request.system_prompt)
    ticket = cache.turns.join(request.username)  # one answer per person, waiting or being written
    try:
        told = None
        while not ticket.wait(poll_s):
            ahead = ticket.ahead()
            if ahead != told:
                yield Waiting(ahead)
                told = ahead
        yield from _stream(cache, request, messages)
    finally:
        ticket.leave()


def stream_reply(cache: ModelCache, request: ChatRequest) -> Iterator[str]:
    """Yield the answer piece by piece as it is generated (transformers' TextIteratorStreamer + a thread); the
    queue's place while waiting goes to request.notify.

    The pieces joined are the text `reply` returns for the same settings (greedy decoding, or the same seed).
    Closing the generator early (the user pressed Stop, the browser went away: Gradio calls close()) stops
    the generation thread at its next token instead of letting it run to max_new_tokens.
    """
    with contextlib.closing(stream_events(cache, request)) as events:
        for event in events:
            if isinstance(event, Waiting):
                if request.notify is not None:
                    request.notify(event.words)
            else:
                yield event


def _bounded_request(cache, model_name_or_path, messages, system_prompt, settings, chat_template, budget_s, notify,
                     answers: int = 1):
    """(model, tokenizer, settings, prompt ids) of one request held to its cost bound (request_bounds): the answer
    length and the conversation cut to what the budget allows at the model's speed, the user told when cut."""
    model, tokenizer = cache.get(model_name_or_path, notify=notify)
    bounds = request_bounds(cache, model_name_or_path, settings, budget_s, answers)
    if bounds.note and notify:
        notify(bounds.note)
    ids = _prompt_ids(model, tokenizer, messages, system_prompt, bounds.settings.max_new_tokens, chat_template,
                      bounds.prompt_tokens)
    return model, tokenizer, bounds.settings, ids


def wall_clock_stop(prompt_length: int, budget_s: float | None, stop: threading.Event | None = None):
    """A transformers StoppingCriteria that ends generation once `budget_s` seconds have passed since it was made
    (or `stop` is set). It keeps what the speed estimate needs: the new tokens written (`tokens`) and the seconds
    they took (`seconds`), and whether the time bound ended the answer (`timed_out`)."""
    import torch
    from transformers import StoppingCriteria

    class WallClockStop(StoppingCriteria):
        def __init__(self):
            self.start = time.monotonic()
            self.deadline = None if budget_s is None else self.start + budget_s
            self.tokens, self.seconds, self.timed_out = 0, 0.0, False

        def __call__(self, input_ids, scores, **kwargs):  # after each new token
            now = time.monotonic()
            self.tokens, self.seconds = input_ids.shape[1] - prompt_length, now - self.start
            late = self.deadline is not None and now >= self.deadline
            self.timed_out = self.timed_out or late
            done = late or (stop is not None and stop.is_set())
            return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)

    return WallClockStop()


def _finished(cache: ModelCache, model_name_or_path: str, clock, budget_s: float | None, notify: Notify | None,
              answers: int = 1) -> None:
    """After an answer (or `answers` written in one batch): the tokens written a second move the model's speed
    estimate; the person is told when the time bound ended it."""
    cache.observe_answer(model_name_or_path, clock.tokens * answers, clock.seconds)
    if clock.timed_out and notify is not None:
        notify(f"The answer stopped at this server's bound of {budget_s:.0f} s ({clock.tokens} tokens written); "
               "what was written is kept.")


def _stream(cache: ModelCache, request: ChatRequest, messages: Messages) -> Iterator[str]:
    import torch
    from transformers import StoppingCriteriaList, TextIteratorStreamer

    from rlhf.generation import autocast_context, eos_token_ids, generation_kwargs  # imports torch

    model_name_or_path, budget_s, notify = request.model_name_or_path, request.budget_s, request.notify
    model, tokenizer, settings, ids = _bounded_request(cache, model_name_or_path, messages, request.system_prompt,
                                                        request.settings, request.chat_template, budget_s, notify)
    device = next(model.parameters()).device
    eos_ids = eos_token_ids(model, tokenizer)
    streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True, timeout=STREAM_TIMEOUT_S)
    failure: list[BaseException] = []
    stop = threading.Event()
    clock = wall_clock_stop(len(ids), budget_s, stop)

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
                        stopping_criteria=StoppingCriteriaList([clock]),
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
    _finished(cache, model_name_or_path, clock, budget_s, notify)


def _generate(model, tokenizer, ids, settings: GenerationSettings, count: int, clock) -> list[str]:
    """`count` answers to one prompt in one batch (sampled with settings.seed), stopped by `clock`
    (wall_clock_stop); as generate_batch does it for one batch, with the stopping criterion it does not take."""
    import torch
    from transformers import StoppingCriteriaList

    from rlhf.generation import (  # imports torch
        autocast_context, decode_responses, eos_token_ids, generation_kwargs, truncate_after_eos,
    )

    device = next(model.parameters()).device
    eos_ids = eos_token_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
    input_ids = ids[None].repeat(count, 1).to(device)  # (n, T): the same prompt, no padding
    with torch.no_grad(), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(settings.seed)
        with autocast_context(model, settings.autocast):
            output = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                    stopping_criteria=StoppingCriteriaList([clock]),
                                    **generation_kwargs(settings, eos_ids, pad_id))  # (n, T + new)
    new_tokens = output[:, input_ids.shape[1]:].cpu()  # (n, new)
    return decode_responses(tokenizer, [truncate_after_eos(row, eos_ids) for row in new_tokens])


def reply(
    cache: ModelCache,
    model_name_or_path: str,
    history: Sequence[dict],
    system_prompt: str | None = None,
    settings: GenerationSettings = CHAT_SETTINGS,
    chat_template: bool | None = None,
    budget_s: float | None = None,
    notify: Notify | None = None,
) -> str:
    """The whole answer at once; `budget_s` and `notify` as for a ChatRequest. Takes no turn itself: its callers
    (the Arena, the command line) hold one."""
    messages = check_history(history, system_prompt)
    model, tokenizer, settings, ids = _bounded_request(cache, model_name_or_path, messages, system_prompt, settings,
                                                        chat_template, budget_s, notify)
    clock = wall_clock_stop(len(ids), budget_s)
    answer = _generate(model, tokenizer, ids, settings, 1, clock)[0]
    cache.generated.add(model_name_or_path, messages, answer)
    _finished(cache, model_name_or_path, clock, budget_s, notify)
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
    notify: Notify | None = None,
) -> tuple[str, list[tuple[str, float]]]:
    """Sample n answers, score each with the reward model, return (best, [(answer, score), ...]).

    Sampling is forced on (n greedy answers would be identical). The answers come back in sampling
    order; ties go to the earliest. `budget_s`, `username` and `notify` as for a ChatRequest (the n answers
    share the budget and are written in one batch, stopped together at the bound).
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 64:
        raise InputError(f"must be between 1 and 64, got {n!r}", field="n")
    messages = check_history(history, system_prompt)
    with cache.turns.turn(username, waiting=notify):
        return _best_of_n(cache, model, reward_model, messages, n, settings, system_prompt, chat_template,
                          budget_s, notify)


def _best_of_n(cache, model, reward_model, messages, n, settings, system_prompt, chat_template, budget_s, notify):
    lm, tokenizer, settings, ids = _bounded_request(cache, model, messages, system_prompt, settings, chat_template,
                                                    budget_s, notify, answers=n)
    sampling = dataclasses.replace(settings, do_sample=True, batch_size=n)
    clock = wall_clock_stop(len(ids), budget_s)
    answers = _generate(lm, tokenizer, ids, sampling, n, clock)
    # The batch wrote n tokens a step: counted as such, the speed request_bounds shares between n answers.
    _finished(cache, model, clock, budget_s, notify, answers=n)
    for answer in answers:  # any of them may end up in the chat (the winner does) and be rated
        cache.generated.add(model, messages, answer)
    scorer = cache.get(reward_model, kind="reward", notify=notify)
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
        if db.execute("SELECT split FROM prompts WHERE id = ?", [prompt_id]).fetchone()[0] == "test":
            # The same text as a held-out prompt: kept for judging runs, so no label on it (nothing is written).
            raise InputError("this is one of the project's held-out prompts, kept for judging runs: its answers are "
                             "not rated", field="prompt")
        response_id = insert_response(db, prompt_id, answer, model=model, source=source, settings_json=settings_json,
                                      server_generated=server_generated)
    labeling.create_items(db, project, [response_id], kinds=("rating",))
    item_id = labeling.find_item(db, proj.id, "rating", [response_id])
    result = labeling.submit_rating(db, project, username, item_id, score, claim=True)
    return RatedAnswer(prompt_id, response_id, item_id, result.label_id)
