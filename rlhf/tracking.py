"""Metric sinks: TensorBoard, metrics.csv / metrics.jsonl, and a user callback. No accounts, no network.

The app stores metrics in SQLite through the callback `callback(step, stats, samples)`; rlhf itself
never imports storage.
"""
from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

MetricsCallback = Callable[[int, dict, list], None]


class Sink(Protocol):
    def log(self, step: int, stats: dict[str, float], samples: list[dict]) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """One JSON object per step: {"step": n, **stats}. Non-finite floats become null (valid JSON)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def log(self, step: int, stats: dict[str, float], samples: list[dict]) -> None:
        row = {"step": step, **{k: (v if math.isfinite(v) else None) for k, v in stats.items()}}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    def close(self) -> None:
        pass


class CsvSink:
    """metrics.csv with a `step` column and one column per stat. When a new stat appears the file is
    rewritten with the wider header (rare: the key set is fixed after the first step)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fields: list[str] = []
        if self.path.exists() and self.path.stat().st_size:
            with self.path.open(newline="", encoding="utf-8") as f:
                self.fields = next(csv.reader(f), [])

    def log(self, step: int, stats: dict[str, float], samples: list[dict]) -> None:
        row = {"step": step, **stats}
        new = [k for k in row if k not in self.fields]
        if new:
            old_rows = []
            if self.path.exists() and self.fields:
                with self.path.open(newline="", encoding="utf-8") as f:
                    old_rows = list(csv.DictReader(f))
            self.fields = (self.fields or []) + new
            with self.path.open("w", newline="", encoding="utf-8") as f:
                writer = csv.DictWriter(f, fieldnames=self.fields)
                writer.writeheader()
                writer.writerows(old_rows)
        with self.path.open("a", newline="", encoding="utf-8") as f:
            csv.DictWriter(f, fieldnames=self.fields).writerow(row)

    def close(self) -> None:
        pass


class TensorBoardSink:
    """Scalars per step, and a text table of the first few samples."""

    def __init__(self, log_dir: str | Path, max_samples: int = 8) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))
        self.max_samples = max_samples

    def log(self, step: int, stats: dict[str, float], samples: list[dict]) -> None:
        for key, value in stats.items():
            self.writer.add_scalar(key, value, global_step=step)
        if samples:
            rows = samples[: self.max_samples]
            columns = list(rows[0])
            lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
            lines += ["| " + " | ".join(_cell(r.get(c)) for c in columns) + " |" for r in rows]
            self.writer.add_text("samples", "\n".join(lines), global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class CallbackSink:
    def __init__(self, callback: MetricsCallback) -> None:
        self.callback = callback

    def log(self, step: int, stats: dict[str, float], samples: list[dict]) -> None:
        self.callback(step, dict(stats), list(samples))

    def close(self) -> None:
        pass


def _cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


class Tracker:
    """Fans one (step, stats, samples) record out to every sink."""

    def __init__(self, sinks: Sequence[Sink]) -> None:
        self.sinks = list(sinks)

    @classmethod
    def create(cls, log_dir: str | Path | None = None, tensorboard: bool = True,
               callback: MetricsCallback | None = None, enabled: bool = True) -> "Tracker":
        """The sinks for these settings; none at all when not `enabled` (every rank but the main process:
        with several processes one writes the files and calls the callback, the others create nothing)."""
        sinks: list[Sink] = []
        if not enabled:
            return cls(sinks)
        if log_dir is not None:
            sinks += [CsvSink(Path(log_dir) / "metrics.csv"), JsonlSink(Path(log_dir) / "metrics.jsonl")]
            if tensorboard:
                sinks.append(TensorBoardSink(log_dir))
        if callback is not None:
            sinks.append(CallbackSink(callback))
        return cls(sinks)

    def log(self, step: int, stats: Mapping[str, float], samples: Sequence[dict] = ()) -> None:
        floats = {k: float(v) for k, v in stats.items()}
        for sink in self.sinks:
            sink.log(step, floats, list(samples))

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
