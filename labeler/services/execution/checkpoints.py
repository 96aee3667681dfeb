"""Atomic, resumable checkpoints.

A checkpoint is a folder `checkpoint-<step>` holding whatever the trainer writes plus `manifest.json`, written
last, that lists every file with its size. Our own checkpoints are written under a temporary name and renamed
into place, so a crash (even SIGKILL) leaves either the previous checkpoint or the new one, never half of one.
Folders written by transformers.Trainer (which writes in place) get their manifest from `ManifestCallback`
once Trainer has finished writing them; a folder without a complete manifest is ignored on resume.
"""
from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

PREFIX = "checkpoint-"
MANIFEST = "manifest.json"
TMP_PREFIX = ".tmp-"
# Test hook: seconds to sleep after the files are written and before the manifest ("3", or "3@4" for the
# checkpoint of step 4 only), so a test can SIGKILL a worker in the middle of writing a checkpoint.
SLEEP_ENV = "RLHF_STUDIO_CHECKPOINT_SLEEP"


def _test_delay(step: int) -> None:
    value = os.environ.get(SLEEP_ENV, "")
    if not value:
        return
    seconds, _, only_step = value.partition("@")
    if not only_step or int(only_step) == int(step):
        time.sleep(float(seconds))


def checkpoint_step(folder: Path) -> int | None:
    name = Path(folder).name
    if not name.startswith(PREFIX):
        return None
    try:
        return int(name[len(PREFIX):])
    except ValueError:
        return None


def write_manifest(folder: str | Path, step: int, meta: dict[str, Any] | None = None) -> Path:
    """List every file in `folder` (size) in manifest.json, written through a temp file + rename + fsync."""
    folder = Path(folder)
    files = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name != MANIFEST and not path.name.startswith(TMP_PREFIX):
            files[str(path.relative_to(folder))] = path.stat().st_size
    manifest = {"step": int(step), "files": files, "meta": meta or {}, "written_at": time.time()}
    tmp = folder / f"{TMP_PREFIX}{MANIFEST}"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, folder / MANIFEST)
    return folder / MANIFEST


def read_manifest(folder: str | Path) -> dict[str, Any] | None:
    """The manifest when the folder is complete (manifest present, every listed file there with its size)."""
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    for name, size in manifest.get("files", {}).items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != size:
            return None
    return manifest


def save_checkpoint(root: str | Path, step: int, write: Callable[[Path], None], meta: dict | None = None,
                    keep: int | None = 2) -> Path:
    """Write a checkpoint atomically: `write(tmp_folder)` fills a temporary folder, then the manifest is written
    last and the folder renamed to `checkpoint-<step>`. Keeps the newest `keep` complete checkpoints."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f"{TMP_PREFIX}{PREFIX}{step}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    write(tmp)
    _test_delay(step)
    write_manifest(tmp, step, meta)
    target = root / f"{PREFIX}{step}"
    if target.exists():  # the same step saved again after a resume: replace it
        shutil.rmtree(target)
    os.replace(tmp, target)
    _fsync_dir(root)
    if keep:
        for old in complete_checkpoints(root)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return target


class WeightsPacer:
    """When a people-rewarded PPO run writes its weights and optimizer state (its steps are journalled every step,
    labeler/services/execution/step_journal.py): once the time since the last write ended is at least (1/share - 1)
    times what that write took, so writing takes at most `share` of the run's time, whatever the model's size, the
    disk's speed or how long people take to label a step. Measured, not guessed: a 135M policy's checkpoint (1.6 GB) and
    a 1.5B one's (18 GB) differ tenfold, and so do a laptop's disk and a GPU server's. The first write comes after
    the first step (nothing measured yet); `share` 0: every step."""

    def __init__(self, share: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 <= share < 1:
            raise ValueError(f"checkpoint_share={share!r}: must be in [0, 1)")
        self.share, self.clock = share, clock
        self.ended: float | None = None  # when the last write ended
        self.took: float | None = None  # seconds it took

    def due(self) -> bool:
        if self.share == 0 or self.took is None:
            return True
        return self.clock() - self.ended >= self.took * (1 / self.share - 1)

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Time a write (the block) for the next `due`."""
        start = self.clock()
        yield
        self.ended = self.clock()
        self.took = self.ended - start


# How long a cancel waits for a checkpoint being written to complete (StageContext.save_checkpoint lets the
# write finish before the worker handles SIGTERM): a 135M PPO checkpoint (1.6 GB) took 20 s on a loaded 2-core
# machine, where the cancel's usual grace is 10 s.
WRITE_GRACE_SECONDS = 120.0


def writing(root: str | Path) -> bool:
    """Whether a checkpoint is being written under `root` (its temporary folder is there; a crash's leftover is
    removed when the run starts again, so in a running run's folder it is the current write)."""
    root = Path(root)
    return root.is_dir() and any(p.name.startswith(f"{TMP_PREFIX}{PREFIX}") for p in root.iterdir())


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def complete_checkpoints(root: str | Path) -> list[Path]:
    """Complete checkpoint folders under `root`, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and checkpoint_step(p) is not None and read_manifest(p)]
    return sorted(found, key=checkpoint_step)


def latest_checkpoint(root: str | Path) -> Path | None:
    """The newest checkpoint whose manifest is complete, or None."""
    found = complete_checkpoints(root)
    return found[-1] if found else None


def remove_all(root: str | Path) -> int:
    """Delete every checkpoint under `root` (complete or not) and the folder itself; the bytes freed. The models
    kept from a checkpoint (export_model) hard-link its weights, so they keep them."""
    root = Path(root)
    if not root.is_dir():
        return 0
    freed = sum(path.stat().st_size for path in root.rglob("*") if path.is_file())
    shutil.rmtree(root, ignore_errors=True)
    return freed


def remove_incomplete(root: str | Path) -> list[Path]:
    """Delete temporary folders and checkpoints without a complete manifest (left by a crash)."""
    root = Path(root)
    removed = []
    if not root.is_dir():
        return removed
    for path in root.iterdir():
        if path.is_dir() and (path.name.startswith(TMP_PREFIX) or (checkpoint_step(path) is not None and not read_manifest(path))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


@contextlib.contextmanager
def signal_deferred(signum: int = signal.SIGTERM) -> Iterator[None]:
    """Run the block to its end before the Python handler of `signum` sees a signal that arrives meanwhile.

    The worker's SIGTERM handler raises Cancelled wherever the main thread is; inside a checkpoint write that
    left the newest completed step without a checkpoint (the temporary folder is thrown away), so a cancel
    kept the step before. A signal that arrives in the block is handed to the handler when the block ends.
    Only the main thread can install handlers: elsewhere, and for a handler that is not a Python function
    (default, ignore), the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.getsignal(signum)
    if not callable(handler):
        yield
        return
    pending: list[tuple[int, Any]] = []
    signal.signal(signum, lambda number, frame: pending.append((number, frame)))
    try:
        yield
    finally:
        signal.signal(signum, handler)
    if pending:
        handler(*pending[0])


# A PPO run's reward state (a constraint's Lagrange multiplier: runners/ppo.py write_reward_state).
REWARD_STATE_FILE = "reward_state.json"
# A checkpoint's files that belong to training, not to the model: optimizer, scheduler, RNG and trainer state
# (ours: trainer_state.pt, training_state.pt, job_state.json, reward_state.json; transformers.Trainer's:
# optimizer.pt, scheduler.pt, rng_state*.pth, trainer_state.json, training_args.bin, scaler.pt), and the manifest.
TRAINING_STATE_FILES = ("trainer_state.pt", "training_state.pt", "job_state.json", REWARD_STATE_FILE, "optimizer.pt",
                        "scheduler.pt", "scaler.pt", "rng_state*.pth", "trainer_state.json", "training_args.bin",
                        MANIFEST)


def model_files(checkpoint: str | Path) -> list[Path]:
    """The files of a checkpoint folder that make up its model (weights, config, tokenizer, value head): its
    top-level files other than TRAINING_STATE_FILES (subfolders, such as DeepSpeed's global_step*, hold
    training state too)."""
    return sorted(path for path in Path(checkpoint).iterdir()
                  if path.is_file() and not any(fnmatch.fnmatch(path.name, p) for p in TRAINING_STATE_FILES))


def export_model(checkpoint: str | Path, target: str | Path) -> Path:
    """The model of a complete checkpoint as a folder of its own (what `models.register_model` takes), written
    under a temporary name and renamed, so `target` is complete or absent. The weights are hard-linked (no
    disk, no time; a copy where links are refused): nothing writes into a checkpoint's files after its
    manifest, and its rotation later removes only its own names. The small files (config, tokenizer, a card)
    are copied, as the registry writes a README.md into the model's folder. An existing `target` is kept as
    it is (a second call exports nothing twice)."""
    checkpoint, target = Path(checkpoint), Path(target)
    if read_manifest(checkpoint) is None:
        raise FileNotFoundError(f"{checkpoint}: not a complete checkpoint (no manifest, or a file is missing)")
    if target.is_dir():
        return target
    files = model_files(checkpoint)
    if not any(f.suffix == ".safetensors" for f in files):
        raise FileNotFoundError(f"{checkpoint}: no *.safetensors weights to export")
    tmp = target.parent / f"{TMP_PREFIX}{target.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for path in files:
        if not (path.suffix == ".safetensors" and _hard_link(path, tmp / path.name)):
            shutil.copy2(path, tmp / path.name)
    os.replace(tmp, target)
    _fsync_dir(target.parent)
    return target


def _hard_link(source: Path, link: Path) -> bool:
    try:
        os.link(source, link)
    except OSError:  # another file system, or links not supported
        return False
    return True


def manifest_callback(keep_meta: Callable[[], dict] | None = None):
    """A transformers TrainerCallback writing the manifest into each checkpoint Trainer has just saved.

    Trainer calls on_save after _save_checkpoint returned (weights, optimizer, scheduler, RNG, trainer state all
    written), so the manifest is the last file of the folder, as in our own checkpoints.
    """
    from transformers import TrainerCallback

    class ManifestCallback(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            # Several processes: every rank writes its own RNG file (rng_state_<rank>.pth) with no barrier after
            # it, so wait for all of them before listing the folder (on_save runs on every rank).
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
                dist.barrier()
            if state.is_world_process_zero:
                folder = Path(args.output_dir) / f"{PREFIX}{state.global_step}"
                if folder.is_dir():
                    _test_delay(state.global_step)
                    write_manifest(folder, state.global_step, keep_meta() if keep_meta else None)
            return control

    return ManifestCallback()
