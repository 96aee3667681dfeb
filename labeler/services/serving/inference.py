"""Models loaded to answer (Chat, Arena, best-of-N, Data > Generate, `rlhf-studio generate`, the automatic evaluation):
one loader that picks their dtype and device, and the server's one cache of them.

The loader (`load_policy`, `load_reward`): on a GPU the checkpoint's own dtype ("auto": bf16 for a bf16 checkpoint,
half the memory of fp32); on a CPU bf16 only where it has native bf16 (AVX-512 BF16 or AMX), else fp32: there torch
emulates bf16 through fp32 conversions, slower than fp32 itself (`inference_dtype`, bench/generation_precision.py).
A LoRA adapter is merged into its base (a plain model samples faster).

The cache (`ModelCache`), one per server (the UI's context holds it; a CLI command makes its own):
- a memory budget in bytes, least recently used out first (before a load, by the checkpoint's size on disk, so
  two models never overlap past the budget; after it, by the bytes the model really holds);
- runs: a run trains on this host's GPUs when it has any, else on its CPU, the device the cache loads on too (the
  runs table names no device: the server and its workers share one host). When a run starts, the cache empties
  itself. While a run trains on the GPU, models load on the CPU, leaving the GPU's memory to the run; on a
  CPU-only host, where "the same device" is the host's memory, the cache holds one model at a time until the run
  ends. The person whose model was unloaded is told in words (`ModelCache.get`'s notify);
- turns (`Turns`): one generation per person across Chat, Arena and best-of-N, at most `generation_slots()` at
  once on the server, the others waiting in order and told their place;
- each model's speed (`ModelSpeed`), measured when it is first used and followed from every finished answer.
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import re
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from labeler.services.execution import runs
from labeler.errors import InputError
from labeler.services.execution.launch import usable_cores
from labeler.services.serving.models import check_generates_text
from rlhf.hardware import BF16_CPU_FLAGS, cpu_flags
from rlhf.loading import load_causal_lm, load_tokenizer, resolve_model_path
from storage import open_db

Notify = Callable[[str], None]
# The cache's share of the device's memory when no budget is given: on a GPU half (a run's own memory is handed
# back when it starts), on a CPU a quarter of the host's (the server, its workers and the OS live there too).
GPU_BUDGET_SHARE = 0.5
CPU_BUDGET_SHARE = 0.25
# How often (seconds) the cache reads the runs table for a run that started: one small query per request at most.
RUNS_CHECK_S = 2.0
# The speed estimate: each finished answer moves it this far towards the speed that answer measured.
SPEED_FOLLOW = 0.5
MIN_TOKENS_PER_S = 0.5  # an estimate never goes below this (a stalled answer once measured 0 and capped every answer)
MIN_MEASURED_TOKENS = 4  # shorter answers measure their overhead more than the model's speed: not counted


# ---- precision and device ------------------------------------------------------------------------------------

def inference_dtype(device_type: str, flags: frozenset[str] | set[str] = frozenset()) -> str:
    """The dtype a model answers in: 'auto' (its checkpoint's own) on a GPU; on a CPU 'bfloat16' when `flags` (the
    CPU's, rlhf.hardware.cpu_flags) include native bf16 (avx512_bf16 or amx_bf16), else 'float32'."""
    if device_type == "cuda":
        return "auto"
    return "bfloat16" if set(flags) & BF16_CPU_FLAGS else "float32"


def host_device() -> str:
    """'cuda' when this host has a GPU (where runs train too), else 'cpu'."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _torch_dtype(name: str):
    import torch

    return name if name == "auto" else getattr(torch, name)


def _tokenizer_dir(path: str) -> str:
    """An adapter folder without a tokenizer of its own uses its base model's."""
    adapter = Path(path) / "adapter_config.json"
    if adapter.exists() and not (Path(path) / "tokenizer_config.json").exists():
        return json.loads(adapter.read_text())["base_model_name_or_path"]
    return path


def load_policy(name_or_path: str, device: str | None = None) -> tuple[Any, Any]:
    """(model, left-padding tokenizer) to generate with: in eval mode, without gradients, a LoRA adapter merged into
    its base, on `device` (default: host_device()) in inference_dtype's dtype. An encoder is refused (InputError)."""
    path = resolve_model_path(name_or_path)
    check_generates_text(path)  # an encoder would answer from a random head
    device = device or host_device()
    dtype = inference_dtype(device.split(":")[0], cpu_flags())
    model = load_causal_lm(path, dtype=_torch_dtype(dtype))
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    model = model.eval().requires_grad_(False).to(device)
    return model, load_tokenizer(_tokenizer_dir(path), padding_side="left")


def load_reward(name_or_path: str, device: str | None = None):
    """A RewardScorer on `device` (default: host_device()): the checkpoint's own dtype on a GPU, bf16 on a CPU with
    native bf16, fp32 else."""
    from rlhf.reward import RewardScorer  # torch and transformers

    device = device or host_device()
    dtype = inference_dtype(device.split(":")[0], cpu_flags())
    return RewardScorer(name_or_path, device=device, dtype=None if dtype == "float32" else _torch_dtype(dtype))


def load(name_or_path: str, kind: str, device: str | None = None) -> Any:
    if kind == "causal":
        return load_policy(name_or_path, device)
    if kind == "reward":
        return load_reward(name_or_path, device)
    raise ValueError(f"kind={kind!r}: 'causal' or 'reward'")


def held_bytes(loaded: Any) -> int:
    """Bytes of the weights and buffers a loaded entry holds: (model, tokenizer) or a RewardScorer."""
    model = loaded[0] if isinstance(loaded, tuple) else getattr(loaded, "model", loaded)
    tensors = [*model.parameters(), *model.buffers()]
    seen, total = set(), 0
    for tensor in tensors:  # tied weights (embeddings and head) count once
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            total += tensor.numel() * tensor.element_size()
    return total


def estimated_bytes(name_or_path: str, device_type: str, flags: frozenset[str] | set[str] = frozenset()) -> int:
    """What loading will take, before loading: the safetensors files' size, doubled when a half-precision checkpoint
    is loaded in fp32; an adapter folder (LoRA) adds its base model's. 0 for a hub id not in a folder (then only the
    measured size counts)."""
    folder = Path(resolve_model_path(name_or_path))
    if not folder.is_dir():
        return 0
    on_disk = sum(f.stat().st_size for f in folder.glob("*.safetensors"))
    adapter = folder / "adapter_config.json"
    if adapter.is_file():  # a LoRA reward model or policy: loaded on its base, then merged (the app-loop check)
        try:
            base = json.loads(adapter.read_text())["base_model_name_or_path"]
        except (OSError, ValueError, KeyError):
            return on_disk
        return on_disk + estimated_bytes(base, device_type, flags)
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    stored = str(config.get("dtype") or config.get("torch_dtype") or "float32")
    if inference_dtype(device_type, flags) == "float32" and stored in ("bfloat16", "float16"):
        return on_disk * 2
    return on_disk


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_bytes(text: str, field: str = "model_memory") -> int:
    """'8GiB', '500mb', '1.5 GB' or a plain number of bytes as bytes; InputError naming `field` otherwise."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = match and match.group(2).lower()
    if not match or unit not in _UNITS or float(match.group(1)) * _UNITS[unit] < 1:
        raise InputError(f"{text!r}: a size such as 8GiB, 500MB or a number of bytes", field=field)
    return int(float(match.group(1)) * _UNITS[unit])


def release_gpu_memory() -> None:
    """Hand the GPU memory of unloaded models back to the driver, where another process (a run) can use it: torch's
    caching allocator otherwise keeps it reserved for this one. A model still answering a request is freed when
    that request ends (it holds its own reference) and given back at the next release."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def default_budget_bytes(device: str) -> int:
    """GPU_BUDGET_SHARE of the GPU's memory, or CPU_BUDGET_SHARE of the host's."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.get_device_properties(0).total_memory * GPU_BUDGET_SHARE)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * CPU_BUDGET_SHARE)


# ---- turns: one generation per person, a cap, a queue ------------------------------------------------------

def generation_slots(cores: int) -> int:
    """Generations at once on a server with `cores` cores: one per two cores, at least one. A batch-1 answer
    keeps about two cores busy; four at once on two cores each took four times as long."""
    return max(1, cores // 2)


class Ticket:
    """A place in Turns' queue; `wait` until admitted, `ahead` for the place."""

    def __init__(self, turns: "Turns", username: str | None):
        self.turns, self.username, self.admitted = turns, username, False

    def ahead(self) -> int:
        """Answers before this one: those being written and those queued earlier (0 once admitted)."""
        return self.turns._ahead(self)

    def wait(self, timeout: float | None = None) -> bool:
        return self.turns._wait(self, timeout)

    def leave(self) -> None:
        self.turns._leave(self)


class Turns:
    """One generation per person (waiting or running) and at most `slots` running at once, admitted in the order
    asked. Thread-safe."""

    def __init__(self, slots: int | None = None):
        self.slots = generation_slots(usable_cores()) if slots is None else slots
        if self.slots < 1:
            raise ValueError(f"slots={self.slots!r}: must be at least 1")
        self._cond = threading.Condition()
        self._queue: deque[Ticket] = deque()
        self._running = 0
        self._people: set[str] = set()

    def join(self, username: str | None) -> Ticket:
        """A ticket in the queue; InputError when `username` already has an answer waiting or being written
        (None: a caller without users, the command line, which still takes its slot)."""
        with self._cond:
            if username is not None:
                if username in self._people:
                    raise InputError("you already have an answer being written (one at a time per user, across "
                                     "Chat, Arena and best-of-N): wait for it to finish or press Stop", field="message")
                self._people.add(username)
            ticket = Ticket(self, username)
            self._queue.append(ticket)
            self._cond.notify_all()
            return ticket

    def _ahead(self, ticket: Ticket) -> int:
        with self._cond:
            if ticket.admitted or ticket not in self._queue:
                return 0
            return self._running + self._queue.index(ticket)

    def _wait(self, ticket: Ticket, timeout: float | None) -> bool:
        with self._cond:
            if ticket.admitted:
                return True
            ready = self._cond.wait_for(lambda: self._queue[0] is ticket and self._running < self.slots, timeout)
            if ready:
                self._queue.popleft()
                self._running += 1
                ticket.admitted = True
                self._cond.notify_all()
            return ready

    def _leave(self, ticket: Ticket) -> None:
        with self._cond:
            if ticket.admitted:
                self._running -= 1
                ticket.admitted = False
            elif ticket in self._queue:
                self._queue.remove(ticket)
            else:
                return
            if ticket.username is not None:
                self._people.discard(ticket.username)
            self._cond.notify_all()

    def people(self) -> set[str]:
        with self._cond:
            return set(self._people)

    def counts(self) -> tuple[int, int]:
        """(answers being written, answers waiting)."""
        with self._cond:
            return self._running, len(self._queue)

    @contextlib.contextmanager
    def turn(self, username: str | None, waiting: Notify | None = None, poll_s: float = 0.5) -> Iterator[None]:
        """Wait for a turn (`waiting` told the place in words whenever it changes), hold it inside the block."""
        ticket = self.join(username)
        try:
            told = None
            while not ticket.wait(poll_s):
                ahead = ticket.ahead()
                if waiting is not None and ahead != told:
                    waiting(place_words(ahead))
                    told = ahead
            yield
        finally:
            ticket.leave()


def place_words(ahead: int) -> str:
    return f"{ahead} answer{'s' if ahead != 1 else ''} ahead of yours: it starts when {'they finish' if ahead != 1 else 'it finishes'}."


# ---- speed ------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelSpeed:
    """How fast a loaded model reads a prompt and writes an answer on this server now: measured when first used
    (chat.measure_speed), the writing speed then followed from every finished answer (ModelCache.observe_answer)."""
    prefill_tokens_per_s: float
    decode_tokens_per_s: float

    def limits(self, budget_s: float, answers: int = 1, min_answer: int = 16, min_prompt: int = 256) -> tuple[int, int]:
        """(most new tokens per answer, most prompt tokens) that keep a request within `budget_s`: half of it
        for reading the prompt, half for writing `answers` answers."""
        new = max(min_answer, int(self.decode_tokens_per_s * budget_s / 2 / max(answers, 1)))
        prompt = max(min_prompt, int(self.prefill_tokens_per_s * budget_s / 2))
        return new, prompt

    def followed(self, tokens: int, seconds: float, weight: float = SPEED_FOLLOW) -> "ModelSpeed":
        """The estimate after an answer of `tokens` new tokens written in `seconds` (wall time, what the people
        waiting see): moved `weight` of the way to it, never below MIN_TOKENS_PER_S; unchanged for answers too short
        to measure."""
        if tokens < MIN_MEASURED_TOKENS or seconds <= 0:
            return self
        measured = tokens / seconds
        decode = (1 - weight) * self.decode_tokens_per_s + weight * measured
        return ModelSpeed(self.prefill_tokens_per_s, max(MIN_TOKENS_PER_S, decode))


# ---- what the cache generated ----

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


# ---- the cache --------------------------------------------------------------------------------------------------

@dataclass
class _Entry:
    value: Any
    bytes: int
    device: str


class ModelCache:
    """The server's loaded models, least recently used out first within `budget_bytes`. Thread-safe.

    Owned by its caller (the UI's context, a CLI command); never a module global. Keys are (path, kind).
    `running_runs() -> [run ids]` (running_runs_of(db_path)) tells it which runs are training on this host.
    `generated` records every answer generated through it (GeneratedAnswers).
    An entry evicted while a request still uses it is freed when that request ends (it holds its own reference).
    """

    def __init__(self, budget_bytes: int | None = None, device: str | None = None,
                 running_runs: Callable[[], list[int]] | None = None, slots: int | None = None,
                 loader: Callable[[str, str, str], Any] = load, runs_check_s: float = RUNS_CHECK_S):
        if budget_bytes is not None and (isinstance(budget_bytes, bool) or budget_bytes < 1):
            raise ValueError(f"budget_bytes={budget_bytes!r}: must be a positive number of bytes")
        self._budget = budget_bytes
        self._device = device
        self._running_runs = running_runs
        self._loader = loader
        self._runs_check_s = runs_check_s
        self.turns = Turns(slots)
        self.generated = GeneratedAnswers()
        self._models: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._speeds: dict[str, ModelSpeed] = {}
        self._lock = threading.Lock()  # guards the dicts, never held while loading
        self._loading: dict[tuple[str, str], threading.Lock] = {}
        self._runs: list[int] = []  # running runs last seen
        self._runs_checked = float("-inf")
        self._unloaded: dict[tuple[str, str], int] = {}  # key -> the run it was unloaded for

    # -- where and how much
    @property
    def device(self) -> str:
        """Where models are loaded when no run holds it: the GPU when the host has one, else the CPU."""
        if self._device is None:
            self._device = host_device()
        return self._device

    @property
    def budget_bytes(self) -> int:
        if self._budget is None:
            self._budget = default_budget_bytes(self.device)
        return self._budget

    def device_words(self) -> str:
        return "GPU" if self.device.startswith("cuda") else "CPU"

    def load_device(self) -> str:
        """Where the next model loads: the CPU while a run trains on the cache's GPU, else the cache's device."""
        with self._lock:
            busy = bool(self._runs)
        return "cpu" if busy and self.device.startswith("cuda") else self.device

    # -- runs
    def follow_runs(self, force: bool = False) -> list[int]:
        """Read the running runs (every RUNS_CHECK_S at most); a run not seen before empties the cache's device.
        Returns the running runs."""
        if self._running_runs is None:
            return []
        now = time.monotonic()
        with self._lock:
            if not force and now - self._runs_checked < self._runs_check_s:
                return list(self._runs)
            self._runs_checked = now
        running = sorted(self._running_runs())
        with self._lock:
            started = [run for run in running if run not in self._runs]
            ended = bool(self._runs) and not running
            self._runs = running
            if started:
                for key in [k for k, e in self._models.items() if e.device == self.device]:
                    self._models.pop(key)
                    self._unloaded[key] = started[-1]
                    self._speeds.pop(key[0], None)
            if ended and self.device.startswith("cuda"):
                # The run gave the GPU back: models loaded on the CPU meanwhile load on the GPU again when next asked.
                for key in [k for k, e in self._models.items() if e.device != self.device]:
                    self._models.pop(key)
                    self._speeds.pop(key[0], None)
            if not running:
                self._unloaded.clear()
        if started and self.device.startswith("cuda"):
            release_gpu_memory()
        return running

    def run_notice(self) -> str | None:
        """What a run training on the cache's device means for answers now, in words; None when no run is."""
        with self._lock:
            runs = list(self._runs)
        if not runs:
            return None
        which = f"run {runs[-1]}" if len(runs) == 1 else "runs " + ", ".join(map(str, runs))
        if self.device.startswith("cuda"):
            return f"{which} trains on this GPU: models answer from the CPU until it ends (slower)."
        return f"{which} trains on this CPU: one model is kept loaded at a time until it ends."

    # -- models
    def get(self, name_or_path: str, kind: str = "causal", notify: Notify | None = None,
            purpose: str = "chat") -> Any:
        """(model, tokenizer) for kind 'causal'; a RewardScorer for kind 'reward'. `notify` is told when the model
        had been unloaded for a run (in words naming the run and the device)."""
        self.follow_runs()
        key = (str(name_or_path), kind)
        with self._lock:
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key].value
            loading = self._loading.setdefault(key, threading.Lock())
        # One lock per model being loaded: two requests for the same new model load it once, and a slow
        # load (a big model, a cold disk) does not hold up answers from models already loaded.
        with loading:
            with self._lock:
                if key in self._models:
                    self._models.move_to_end(key)
                    return self._models[key].value
            device = self.load_device()
            try:
                self._make_room(estimated_bytes(key[0], device.split(":")[0], cpu_flags()) if kind == "causal" else 0)
                loaded = self._loader(key[0], kind, device)
            finally:
                with self._lock:
                    self._loading.pop(key, None)
            with self._lock:
                self._models[key] = _Entry(loaded, held_bytes(loaded), device)
                self._evict(keep=key)
                run = self._unloaded.pop(key, None)
        if run is not None and notify is not None:
            where = ("this GPU; it answers from the CPU until the run ends" if self.device.startswith("cuda")
                     else "this CPU; it was loaded again for this answer")
            notify(f"the {purpose} model was unloaded while run {run} trains on {where}.")
        return loaded

    def _make_room(self, incoming: int) -> None:
        with self._lock:
            while self._models and self._total() + incoming > self._room():
                self._pop_oldest()

    def _room(self) -> int:
        # While a run trains on a CPU-only host, one model at a time (room for nothing beside the newest).
        return 0 if self._runs and not self.device.startswith("cuda") else self.budget_bytes

    def _evict(self, keep: tuple[str, str]) -> None:
        while self._total() > self._room() and any(k != keep for k in self._models):
            self._pop_oldest()

    def _pop_oldest(self) -> None:
        (path, _), _ = self._models.popitem(last=False)
        self._speeds.pop(path, None)

    def _total(self) -> int:
        return sum(entry.bytes for entry in self._models.values())

    def held_bytes(self) -> int:
        with self._lock:
            return self._total()

    def keys(self) -> list[tuple[str, str]]:
        """The loaded (path, kind) pairs, least recently used first."""
        with self._lock:
            return list(self._models)

    def __contains__(self, key: tuple[str, str]) -> bool:
        with self._lock:
            return key in self._models

    def __len__(self) -> int:
        with self._lock:
            return len(self._models)

    # -- speed
    def known_speed(self, name_or_path: str) -> ModelSpeed | None:
        with self._lock:
            return self._speeds.get(str(name_or_path))

    def speed(self, name_or_path: str, measure: Callable[..., ModelSpeed]) -> ModelSpeed:
        """The causal model's speed now: measured with `measure(model, tokenizer)` when first used, then followed."""
        known = self.known_speed(name_or_path)
        if known is not None:
            return known
        measured = measure(*self.get(name_or_path))
        with self._lock:
            return self._speeds.setdefault(str(name_or_path), measured)

    def observe_answer(self, name_or_path: str, tokens: int, seconds: float) -> None:
        """A finished answer's new tokens and wall seconds move the model's speed estimate (ModelSpeed.followed)."""
        with self._lock:
            known = self._speeds.get(str(name_or_path))
            if known is not None:
                self._speeds[str(name_or_path)] = known.followed(tokens, seconds)


def running_runs_of(db_path: str) -> Callable[[], list[int]]:
    """ModelCache's `running_runs` for a server's database: the ids of its runs with status 'running'."""
    def running() -> list[int]:
        db = open_db(db_path, migrate=False, create=False)
        try:
            return sorted(run.id for run in runs.list_runs(db, status="running", limit=10_000))
        finally:
            db.conn.close()

    return running
