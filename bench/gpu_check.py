"""The whole loop the app runs, on a random model of a given shape, one stage per process: per stage its wall time,
the peak memory of its processes, the app's memory estimate for it, and the bytes written under the project's
data folder. The stages are the app's own commands (`rlhf-studio ...`, the database, the run worker the CLI
starts, the web API people label through), not the trainers called directly (bench/trainer_check.py does that).

    bash bench/gpu_check.sh --device cpu --shape tiny        # smoke run, ~2-4 minutes on 2 cores
    bash bench/gpu_check.sh --device cpu --shape 1.5b        # Qwen2.5-1.5B's shape, random weights (~5.5 GB of RAM)
    python bench/gpu_check.py --shape tiny --keep /tmp/gc    # keep the data folder, the logs and the model

Stages, each in processes of its own (so a peak is that stage's alone):
    floor       python with torch and transformers imported: the runtime every stage's peak includes and no
                estimate counts
    build       the model: Qwen2.5-1.5B's config (`--shape 1.5b`; `tiny`: 2 layers of width 64, the same
                151,936-token vocabulary) with random weights, saved as bf16 safetensors with the embedded default
                model's tokenizer (its ids are all below Qwen's vocabulary size); no download
    project     `projects create`, `models add`, `users add`, `prompts import` of 8 training prompts and 2 held out
    generate    `generate --n 2`: 16-token answers, whose ranking items people then see
    rank        `serve` and simulated people ranking every item through the web API (gradio_client, as the
                browser does: bench/simulated_annotators.py); they prefer longer answers (a random model's answers
                have no sentiment to judge)
    rm          `train rm --wait` (LoRA): the reward model from those rankings
    ppo-rm      `train ppo --set reward=rm:gc-rm --wait` (LoRA, batch 4, mini-batch 2, 2 steps)
    ppo-human   `train ppo --set reward=human --wait` (1 step) with `serve` running and the people ranking what the
                run asks for through the web API
    dpo         `train dpo --wait` (LoRA, 1 step)
    eval        `eval --model gc-ppo-rm`: the tuned model and its base on the held-out prompts, measured by the
                reward model, one model loaded at a time
    chat        `chat --model gc-ppo-rm`: one message, one 16-token answer

Peak memory is the largest peak RSS (VmHWM) of any one process of the stage (a `train --wait` CLI, the launcher
and the worker it starts; the server's is given beside it), read from /proc every 0.1 s: VmHWM only grows, so a
sample misses at most the last 0.1 s of a process's life. On `--device cuda` the GPU's used memory (nvidia-smi,
every 0.5 s, the whole GPU's) is added. The estimate is the app's: `train --dry-run`'s for training stages
(rlhf/memory_estimate.py from labeler/services/training/run_estimate.py train_shape) and the model cache's for inference
(labeler/services/serving/inference.py estimated_bytes: the weights in the dtype they are answered in); both count what
a stage adds above the floor row's runtime, so compare peak - floor with the estimate. Bytes written: the size of
every file under the data folder (database, WAL, runs, checkpoints, models) that the stage created or changed
(a file written twice counts once, a file created and deleted within the stage not at all).

Measured: --shape tiny --device cpu on a shared 2-core AMD EPYC (no native bf16, load average 5-15 from other
work): all 11 stages ok in each of two runs; 17-27 min of wall time for 3.1-3.7 min of CPU (the run workers train
at niceness 10, so a busy machine stretches them most); peak RSS 0.35 GiB for the floor, 0.64 generate, 0.63 rm,
0.84-0.86 ppo-rm, 0.73-0.75 ppo-human (its server 0.64), 0.76 dpo, 0.79 eval, 0.60 chat; written 41 MiB by ppo-rm
(the merged model in fp32, 39 MiB from a 20 MiB bf16 base: bf16 is off on this CPU, so LoRA's base is loaded in
fp32), 45 MiB by ppo-human, 7 MiB by rm and dpo each. --shape 1.5b has not been run here.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

GIB = 1024**3
PROJECT = "gpu-check"
PEOPLE = ("gc-alice", "gc-bob")
PROMPTS = ["Tell me about a film you liked.", "Describe your favourite restaurant.", "How did your day start?",
           "What do you think of the new phone?", "Review yesterday's concert.", "What did this book make you feel?",
           "Describe the weather today.", "Tell me about a trip to the coast."]
HELDOUT = ["Write a short review of a museum.", "What was the best meal you had this year?"]
CHAT_MESSAGE = "Tell me about your favourite film."


@dataclass(frozen=True)
class Shape:
    """A model shape and the loop's sizes at it (short answers and small batches, so 1.5B runs on 2 cores)."""

    name: str
    hidden_size: int
    intermediate_size: int
    layers: int
    heads: int
    kv_heads: int
    answer_tokens: int = 16
    ppo_steps: int = 2


SHAPES = {
    # Qwen2.5-1.5B's config.json, written out (no download).
    "1.5b": Shape("1.5b", hidden_size=1536, intermediate_size=8960, layers=28, heads=12, kv_heads=2),
    "tiny": Shape("tiny", hidden_size=64, intermediate_size=128, layers=2, heads=4, kv_heads=2, ppo_steps=1),
}


def model_config(shape: Shape):
    from transformers import Qwen2Config

    return Qwen2Config(vocab_size=151936, hidden_size=shape.hidden_size, intermediate_size=shape.intermediate_size,
                       num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                       num_key_value_heads=shape.kv_heads, tie_word_embeddings=True, max_position_embeddings=32768,
                       rope_theta=1000000.0, rms_norm_eps=1e-6)


def qwen_15b_config(tiny: bool):
    """Qwen2.5-1.5B's config (tiny: 2 layers of width 64): bench/checkpoint_bytes.py builds its model from it."""
    return model_config(SHAPES["tiny" if tiny else "1.5b"])


def build_model(folder: Path, shape: Shape) -> None:
    """Random weights of `shape`, made in bf16 (no fp32 model first: 1.5B in fp32 would be a 6 GB detour) and saved
    as safetensors in bf16 as hub checkpoints are, with the embedded default model's tokenizer and chat template."""
    import torch
    from transformers import Qwen2ForCausalLM

    from rlhf.loading import load_tokenizer

    tokenizer = load_tokenizer("default")
    config = model_config(shape)
    config.eos_token_id = config.pad_token_id = tokenizer.eos_token_id
    config.bos_token_id = tokenizer.bos_token_id
    torch.manual_seed(0)
    model = Qwen2ForCausalLM._from_config(config, dtype=torch.bfloat16)
    model.generation_config.eos_token_id = model.generation_config.pad_token_id = tokenizer.eos_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    stored = json.loads((folder / "config.json").read_text())
    if (stored.get("dtype") or stored.get("torch_dtype")) != "bfloat16":
        raise SystemExit(f"{folder / 'config.json'}: dtype {stored.get('dtype')!r}, expected bfloat16")


# ---- measuring a stage's processes -------------------------------------------------------------------------------

def _status(pid: int) -> dict[str, int]:
    """VmHWM and VmRSS in bytes of a live process ({} once it is gone)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return {line.split(":")[0]: int(line.split()[1]) * 1024 for line in lines if line.startswith(("VmHWM", "VmRSS"))}


def _children_of(pids: set[int]) -> set[int]:
    found = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                ppid = int(Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid in pids:
                found.add(int(entry.name))
    return found


class ProcessPeaks:
    """The peak RSS of every process under some root pids (their descendants found while they live, then followed
    after they are orphaned, as a run's worker is when `train --wait` exits first), sampled every `interval` s."""

    def __init__(self, interval: float = 0.1, gpu: bool = False):
        self.interval, self.gpu = interval, gpu
        self.roots: set[int] = set()
        self.seen: set[int] = set()
        self.peak: dict[int, int] = {}
        self.gpu_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def add(self, pid: int) -> None:
        self.roots.add(pid)

    def _sample(self) -> None:
        self.seen |= set(self.roots)
        self.seen |= _children_of(self.seen)
        for pid in self.seen:
            hwm = _status(pid).get("VmHWM")
            if hwm:
                self.peak[pid] = max(self.peak.get(pid, 0), hwm)

    def _loop(self) -> None:
        last_gpu = 0.0
        while not self._stop.is_set():
            self._sample()
            if self.gpu and time.monotonic() - last_gpu > 0.5:
                last_gpu = time.monotonic()
                self.gpu_peak = max(self.gpu_peak, _gpu_used_bytes())
            self._stop.wait(self.interval)

    def alive(self) -> list[int]:
        return [pid for pid in self.seen if _status(pid)]

    def __exit__(self, *exc):
        # A run's worker may outlive `train --wait` (it records success, then exits): wait for every process seen,
        # so the next stage starts on a quiet machine and this one's peak is complete.
        deadline = time.monotonic() + 120
        while self.alive() and time.monotonic() < deadline:
            time.sleep(self.interval)
        self._stop.set()
        self._thread.join()
        self._sample()

    def largest(self, exclude: set[int] = frozenset()) -> int:
        return max((v for pid, v in self.peak.items() if pid not in exclude), default=0)


def _gpu_used_bytes() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=5).stdout
        return int(out.split()[0]) * 1024**2
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return 0


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for path in folder.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink():
                stat = path.stat()
                out[str(path)] = (stat.st_size, stat.st_mtime_ns)
        except OSError:  # removed while listed
            continue
    return out


def written_bytes(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> int:
    """Bytes of the files created or changed between two listings (each file's whole size once)."""
    return sum(size for path, (size, mtime) in after.items() if before.get(path) != (size, mtime))


def shown_command(command: list[str]) -> str:
    """A command as a person types it: `python -m labeler ...` is `rlhf-studio ...`."""
    if command[1:3] == ["-m", "labeler"]:
        return shlex.join(["rlhf-studio", *command[3:]])
    return shlex.join(["python", *command[1:]])


# ---- the stages --------------------------------------------------------------------------------------------------

@dataclass
class Row:
    stage: str
    seconds: float = 0.0
    peak_bytes: int = 0
    estimate_bytes: int | None = None
    estimate_note: str = ""
    written: int = 0
    status: str = "ok"
    note: str = ""
    gpu_peak_bytes: int = 0
    server_pids: list[int] = field(default_factory=list)  # measured apart: the row's peak is the stage's own work
    commands: list[str] = field(default_factory=list)


class Loop:
    def __init__(self, work: Path, shape: Shape, device: str):
        self.work, self.shape, self.device = work, shape, device
        self.data = work / "data"  # the project's data folder: database, runs, checkpoints, registered models
        self.data.mkdir(parents=True, exist_ok=True)
        self.db = str(self.data / "studio.db")
        self.model = work / f"model-{shape.name}"  # outside the data folder: the team's own downloaded model
        self.logs = work / "logs"
        self.logs.mkdir(exist_ok=True)
        self.rows: list[Row] = []
        self.env = {key: value for key, value in os.environ.items() if not key.startswith("ACCELERATE_")}
        self.env.update(PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
                        HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", GRADIO_ANALYTICS_ENABLED="False")
        if device == "cpu":
            self.env["CUDA_VISIBLE_DEVICES"] = ""  # the app then trains and answers on the CPU

    # -- running commands -----------------------------------------------------------------------------------------
    def cli(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "labeler", *args]

    def run(self, row: Row, command: list[str], peaks: ProcessPeaks, stdin: str | None = None) -> str:
        row.commands.append(shown_command(command))
        log = self.logs / f"{row.stage}-{len(row.commands)}.log"
        with open(log, "w") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=self.work,
                                       stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL, text=True)
            peaks.add(process.pid)
            if stdin is not None:
                process.communicate(stdin)
            code = process.wait()
        text = log.read_text()
        if code != 0:
            last = (text.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"`{row.commands[-1]}` exited {code}: {last} (log {log})")
        return text

    def stage(self, name: str, body, estimate=None) -> Row:
        """Run body(row, peaks) as one stage; a failure is recorded and the loop goes on where it can."""
        row = Row(name)
        before = _files(self.data)
        start = time.perf_counter()
        with ProcessPeaks(gpu=self.device == "cuda") as peaks:
            try:
                body(row, peaks)
            except Exception as error:  # one stage failing must not hide the others' figures
                row.status = f"FAILED: {type(error).__name__}: {str(error)[:300]}"
        row.seconds = time.perf_counter() - start
        row.peak_bytes = peaks.largest(exclude=set(row.server_pids))
        row.gpu_peak_bytes = peaks.gpu_peak
        row.written = written_bytes(before, _files(self.data))
        if estimate is not None and row.status == "ok":
            try:
                row.estimate_bytes, row.estimate_note = estimate()
            except Exception as error:
                row.estimate_note = f"none: {type(error).__name__}: {str(error)[:120]}"
        self.rows.append(row)
        print(format_row(row), flush=True)
        return row

    # -- the app's estimates ----------------------------------------------------------------------------------------
    def training_estimate(self, stage: str, values: dict):
        """What `train STAGE --dry-run` prints for these settings (labeler/services/run_estimate.memory_text)."""
        def estimate():
            from labeler.services.serving import models
            from labeler.services.training import run_settings
            from labeler.services.training.run_estimate import train_shape
            from rlhf.memory_estimate import estimate_training_memory, model_shape
            from storage import open_db

            db = open_db(self.db)
            try:
                resolved = run_settings.resolve_run(db, PROJECT, stage, {k: str(v) for k, v in values.items()})
                job, trainer = resolved.job, resolved.trainer_config()
                path = str(models.resolve(db, job.base_model(stage)))
            finally:
                db.conn.close()
            result = estimate_training_memory(model_shape(path), train_shape(stage, job, trainer, self.device))
            return int(result.total), f"train --dry-run: {result.summary()}"
        return estimate

    def inference_estimate(self, *names: str):
        """The model cache's estimate before a load (labeler/services/serving/inference.py estimated_bytes) of each
        model; a LoRA adapter is answered merged into its base, so its base's folder is what is estimated."""
        def estimate():
            from labeler.services.serving import inference, models
            from rlhf.hardware import cpu_flags
            from storage import open_db

            db = open_db(self.db)
            try:
                paths = [str(models.resolve(db, name)) for name in names]
            finally:
                db.conn.close()
            total, parts = 0, []
            for name, path in zip(names, paths):
                adapter = Path(path) / "adapter_config.json"
                if adapter.exists():
                    path = json.loads(adapter.read_text())["base_model_name_or_path"]
                size = inference.estimated_bytes(path, self.device, cpu_flags())
                total += size
                parts.append(f"{name} {size / GIB:.2f}")
            dtype = inference.inference_dtype(self.device, cpu_flags())
            return total, f"weights in {dtype}: {', '.join(parts)} GiB"
        return estimate

    # -- the loop -----------------------------------------------------------------------------------------------------
    def settings(self, stage: str) -> dict:
        lora = {"model": "gc-base", "lora": "true", "eval_samples": 0, "output_name": f"gc-{stage}"}
        if stage == "rm":
            return {**lora, "steps": 2, "per_device_train_batch_size": 2, "max_length": 64}
        if stage == "dpo":
            return {**lora, "steps": 1, "per_device_train_batch_size": 2, "max_length": 64, "max_prompt_length": 32}
        # PPO: 2 prompts x 2 answers a step, mini-batches of 2; no held-out curve (the eval stage does that).
        return {**lora, "batch_size": 4, "answers_per_prompt": 2, "mini_batch_size": 2,
                "rollout_forward_batch_size": 2, "max_new_tokens": self.shape.answer_tokens, "heldout_every": 0,
                "checkpoint_every": 0}

    def train(self, stage: str, values: dict, row: Row, peaks: ProcessPeaks) -> None:
        command = self.cli("train", stage, "--db", self.db, "--project", PROJECT, "--runs-dir",
                           str(self.data / "runs"), "--wait")
        for key, value in values.items():
            command += ["--set", f"{key}={value}"]
        text = self.run(row, command, peaks)
        row.note = next((line.strip()[:100] for line in reversed(text.splitlines()) if "step" in line), "")

    def judge(self, prompts, answers):
        return [len(a) / 10 for a in answers]  # longer is better: ties only at equal length

    def annotators(self, url: str):
        from simulated_annotators import WebAnnotator

        return [WebAnnotator(url, name, judge=self.judge, margin=0.05) for name in PEOPLE]

    def go(self) -> list[Row]:
        shape = self.shape
        self.stage("floor", lambda row, peaks: self.run(
            row, [sys.executable, "-c", "import torch, transformers, labeler.services.serving.inference"], peaks))

        self.stage("build", lambda row, peaks: self.run(
            row, [sys.executable, str(Path(__file__).resolve()), "--build", str(self.model), "--shape", shape.name],
            peaks))

        def project(row, peaks):
            (self.work / "train.txt").write_text("\n".join(PROMPTS) + "\n")
            (self.work / "heldout.txt").write_text("\n".join(HELDOUT) + "\n")
            common = ["--db", self.db, "--project", PROJECT]
            self.run(row, self.cli("projects", "create", PROJECT, "--db", self.db, "--create-db",
                                   "--answer-tokens", str(shape.answer_tokens)), peaks)
            self.run(row, self.cli("models", "add", "gc-base", str(self.model), *common), peaks)
            for name in PEOPLE:
                self.run(row, self.cli("users", "add", name, "--password", "bench-password-1", *common), peaks)
            self.run(row, self.cli("prompts", "import", str(self.work / "train.txt"), *common), peaks)
            self.run(row, self.cli("prompts", "import", str(self.work / "heldout.txt"), "--split", "test", *common),
                     peaks)
        self.stage("project", project)

        self.stage("generate", lambda row, peaks: self.run(
            row, self.cli("generate", "--db", self.db, "--project", PROJECT, "--model", "gc-base", "--n", "2",
                          "--max-new-tokens", str(shape.answer_tokens), "--batch-size", "8"), peaks),
            estimate=self.inference_estimate("gc-base"))

        def rank(row, peaks):
            from annotators import Server

            server = Server(self.db, str(self.logs / "serve-rank.log"), project=PROJECT)
            peaks.add(server.process.pid)
            try:
                people = self.annotators(server.url)
                ranked = 0
                for person in people:  # each ranks until their queue is empty
                    while person.label("ranking"):
                        ranked += 1
                row.note = f"{ranked} rankings through the web API"
                if not ranked:
                    raise RuntimeError("nothing to rank: generate made no ranking items")
            finally:
                server.close()
        self.stage("rank", rank)

        rm = self.settings("rm")
        self.stage("rm", lambda row, peaks: self.train("rm", rm, row, peaks), self.training_estimate("rm", rm))
        ppo = {**self.settings("ppo"), "reward": "rm:gc-rm", "steps": shape.ppo_steps, "output_name": "gc-ppo-rm"}
        self.stage("ppo-rm", lambda row, peaks: self.train("ppo", ppo, row, peaks), self.training_estimate("ppo", ppo))

        # human_overlap off: with one step, the overlapped next batch would be generated and queued for nobody.
        human = {**self.settings("ppo"), "reward": "human", "human_label": "ranking", "steps": 1,
                 "human_overlap": "false", "human_timeout": 600, "output_name": "gc-ppo-human"}

        def ppo_human(row, peaks):
            from annotators import Server
            from simulated_annotators import run_team

            server = Server(self.db, str(self.logs / "serve-human.log"), project=PROJECT)
            peaks.add(server.process.pid)
            row.server_pids.append(server.process.pid)
            stop = threading.Event()
            people = self.annotators(server.url)
            threads = run_team(people, ("ranking",), stop, idle_sleep=1.0)
            try:
                self.train("ppo", human, row, peaks)
            finally:
                stop.set()
                for thread in threads:
                    thread.join(timeout=60)
                server_peak = peaks.peak.get(server.process.pid, 0)
                server.close()
            row.note = (f"{sum(p.labels['ranking'] for p in people)} rankings; server peak "
                        f"{server_peak / GIB:.2f} GiB; {row.note}")
        self.stage("ppo-human", ppo_human, self.training_estimate("ppo", human))

        dpo = self.settings("dpo")
        self.stage("dpo", lambda row, peaks: self.train("dpo", dpo, row, peaks), self.training_estimate("dpo", dpo))

        def evaluate(row, peaks):
            text = self.run(row, self.cli("eval", "--db", self.db, "--project", PROJECT, "--model", "gc-ppo-rm",
                                          "--reward", "rm:gc-rm", "--samples", "2", "--max-new-tokens",
                                          str(shape.answer_tokens), "--batch-size", "4", "--examples", "0"), peaks)
            row.note = next((line.strip()[:100] for line in text.splitlines() if "gc-ppo-rm" in line), "")
        self.stage("eval", evaluate, self.inference_estimate("gc-ppo-rm", "gc-rm"))

        def chat(row, peaks):
            text = self.run(row, self.cli("chat", "--db", self.db, "--project", PROJECT, "--model", "gc-ppo-rm",
                                          "--max-new-tokens", str(shape.answer_tokens)), peaks,
                            stdin=f"{CHAT_MESSAGE}\n/exit\n")
            answer = text.split("gc-ppo-rm> ", 1)[1].split("\n", 1)[0] if "gc-ppo-rm> " in text else ""
            if not answer.strip():
                raise RuntimeError(f"no answer in the chat's output: {text[-200:]!r}")
            row.note = f"{len(answer)} characters answered"
        self.stage("chat", chat, self.inference_estimate("gc-ppo-rm"))
        return self.rows


# ---- output ------------------------------------------------------------------------------------------------------

def _size(n: int) -> str:
    return f"{n / GIB:.2f} GiB" if n >= GIB / 10 else f"{n / 1024**2:.1f} MiB"


def format_row(row: Row) -> str:
    estimate = f"{row.estimate_bytes / GIB:.2f}" if row.estimate_bytes is not None else "none"
    return (f"{row.stage:>10} {row.seconds:8.1f} s  peak {row.peak_bytes / GIB:6.2f} GiB  estimate {estimate:>5}  "
            f"written {_size(row.written):>10}  {row.status}")


def markdown(rows: list[Row], header: str, device: str) -> str:
    floor = next((r.peak_bytes for r in rows if r.stage == "floor"), 0)
    gpu = device == "cuda"
    lines = [header, "",
             "| stage | wall s | peak RSS GiB | peak - floor GiB | app's estimate GiB | written under the data folder |"
             + (" GPU used GiB |" if gpu else "") + " status | note |",
             "|---|---:|---:|---:|---:|---:|" + ("---:|" if gpu else "") + "---|---|"]
    for row in rows:
        if row.estimate_bytes is not None:
            estimate = f"{row.estimate_bytes / GIB:.2f} ({row.estimate_note})"
        else:
            estimate = row.estimate_note or "none (no model is loaded, or no estimate exists for this stage)"
        rise = ("-" if row.stage == "floor" else "below it" if row.peak_bytes < floor
                else f"{(row.peak_bytes - floor) / GIB:.2f}")
        lines.append(f"| {row.stage} | {row.seconds:.1f} | {row.peak_bytes / GIB:.2f} | {rise} | {estimate} | "
                     f"{_size(row.written)} |" + (f" {row.gpu_peak_bytes / GIB:.2f} |" if gpu else "")
                     + f" {row.status} | {row.note.replace('|', '/')} |")
    lines += ["", "Commands, per stage:", ""]
    lines += [f"- {row.stage}: " + "; ".join(f"`{c}`" for c in row.commands) for row in rows if row.commands]
    return "\n".join(lines) + "\n"


def machine() -> str:
    import platform

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or "unknown CPU")
    return f"{cpu}, {os.cpu_count()} cores visible, load average {os.getloadavg()[0]:.2f} at the start"


def main(argv=None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--shape", choices=tuple(SHAPES), default="1.5b",
                        help="the random model's shape: 1.5b (Qwen2.5-1.5B's) or tiny (a smoke run)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where the app runs: cpu hides the GPU from every stage (default: cuda when available)")
    parser.add_argument("--keep", default="", help="a folder for the data, the logs and the model (default: temporary)")
    parser.add_argument("--markdown", default="gpu_check.md", help="write the table here (markdown)")
    parser.add_argument("--json", default="gpu_check.json", help="write the rows here")
    parser.add_argument("--build", default="", help=argparse.SUPPRESS)  # the build stage's own process
    args = parser.parse_args(argv)
    shape = SHAPES[args.shape]
    if args.build:
        build_model(Path(args.build), shape)
        return []
    if args.device == "auto":
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    header = (f"## bench/gpu_check.py --shape {shape.name} --device {args.device}\n\n"
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {machine()}. The model is random (Qwen2.5-1.5B's "
              f"config{'' if shape.name == '1.5b' else ', shrunk to 2 layers of width 64'}), so these are time, "
              f"memory and bytes, not learning. Answers {shape.answer_tokens} tokens, LoRA r 8, PPO batch 4 "
              f"(mini-batch 2).")
    print(header, flush=True)
    try:
        rows = Loop(work, shape, args.device).go()
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    text = markdown(rows, header, args.device)
    print("\n" + text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    failed = [r.stage for r in rows if r.status != "ok"]
    print(f"{len(rows) - len(failed)} of {len(rows)} stages ran" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return rows


if __name__ == "__main__":
    sys.exit(1 if any(r.status != "ok" for r in main()) else 0)
