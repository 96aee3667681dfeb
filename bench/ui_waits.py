"""How long a person waits for the app's answers, on a quiet machine and under load (issue 49 item 8).

Starts `rlhf-studio serve` on a temporary project (the shipped prompts, three fixed answers for some of them,
ranked by demo.simulate_annotator so DPO has pairs; an admin account; a tiny random model registered, or the
default model) and times, through the web API as the browser calls it (gradio_client, as
bench/simulated_annotators.py does; login as the login form posts it):

    login            POST /login
    preview dpo      the Train tab's Preview for a DPO run (the data part; DPO has no time estimate)
    preview ppo      the Train tab's Preview for a PPO run (with its time estimate: a micro-step in a fresh process)
    launch dpo       Launch, until the run is stored (queued or started); it is cancelled before the next step
    records search   Records > Search with the page's defaults

`--repeats` times each, in turn, on a freshly started server: "first" is what the first person to press it
waits (what the app pays once: imports, model configs read, a measurement cached afterwards), "median" the
later repeats'. Then the same again with `--load` busy processes (pure-Python loops, normal priority, as the server)
started by this script. Prints a table with each wait under load / quiet.

    python bench/ui_waits.py --repeats 5 --load 8                  # the measurement (alone on the machine)
    nice python bench/ui_waits.py --repeats 1 --load 1 --model tiny  # a smoke run: it runs, numbers mean nothing
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.annotators import Server  # noqa: E402 - after the repository is on the path

ADMIN = ("admin", "bench-admin-password-1")
TINY_MODEL = "tiny"
ANSWERED_PROMPTS = 24  # training prompts given three fixed answers each, ranked: DPO's pairs
# Three answers of different sentiment, so the simulated annotator's VADER ranking makes pairs (no ties).
ANSWERS = ("a wonderful, moving film that I loved.", "an average film, nothing special.",
           "a dull, terrible waste of two hours.")
OPERATIONS = ("login", "preview dpo", "preview ppo", "launch dpo", "records search")
# The Train form's widgets this script sets, by their labels (the rest keep the form's own values).
STAGE_LABEL, MODEL_LABEL, STEPS_LABEL = "What to train", "Start from model", "How long (training steps)"
BUSY_LOOP = "while True:\n    pass\n"


def seed(db_path: str, model_dir: str | None) -> str:
    """The database the server starts on; returns the model name the Train form starts from."""
    from labeler.services.data import accounts, labeling, prompts, responses
    from labeler.services.training import demo
    from labeler.services.serving import models
    from storage import open_db, write_transaction

    db = open_db(db_path)
    try:
        accounts.create_user(db, *ADMIN, role="admin")
        prompts.import_shipped_prompts(db, "default")
        train_prompts = [row[0] for row in db.execute(
            "SELECT id FROM prompts WHERE split = 'train' ORDER BY id LIMIT ?", [ANSWERED_PROMPTS]).fetchall()]
        name = "default"
        if model_dir is not None:
            models.register_model(db, TINY_MODEL, model_dir, "base")
            name = TINY_MODEL
        with write_transaction(db):
            for prompt_id in train_prompts:
                for text in ANSWERS:
                    responses.insert_response(db, prompt_id, text, model=name, source="bench")
        labeling.create_items(db, "default", ranking_size=len(ANSWERS), kinds=("ranking",))
        demo.simulate_annotator(db, "default", noise=0.0, seed=0)
    finally:
        db.conn.close()
    return name


@contextlib.contextmanager
def busy_processes(count: int):
    """`count` pure-Python busy loops at normal priority (this script's own children), ended on leaving."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(count)]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)


@contextlib.contextmanager
def server(db_path: str, model: str, root: Path, label: str):
    """`rlhf-studio serve` on a free port (bench/annotators.py's Server), at this script's priority (run it un-niced
    for the measurement: the server at normal priority, as the busy processes) and with the OpenMP threads this
    script has (a PPO preview's micro-step runs in a process of the server's); yields (url, seconds until it
    answered)."""
    env = {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    # Run in the temporary folder (whatever the server writes stays there), this tree's code from PYTHONPATH.
    serve = Server(db_path, str(root / f"serve-{label}.log"), code_dir=str(root), env=env, timeout_s=900,
                   options=["--model", model, "--runs-dir", str(root / "runs")])
    try:
        yield serve.url.rstrip("/"), serve.start_s
    finally:
        serve.close()


def arguments(client, api_name: str, overrides: dict[str, object]) -> list:
    """The endpoint's inputs as the page starts them (their defaults), with `overrides` by widget label."""
    info = client.view_api(print_info=False, return_format="dict")["named_endpoints"][f"/{api_name}"]
    values = []
    for param in info["parameters"]:
        label = param.get("label")
        values.append(overrides[label] if label in overrides else param.get("parameter_default"))
    return values


@dataclass
class Waits:
    seconds: dict[str, list[float]] = field(default_factory=lambda: {op: [] for op in OPERATIONS})
    start_s: float = 0.0

    def first(self, op: str) -> float:
        return self.seconds[op][0]

    def median(self, op: str) -> float:
        """The median of the repeats after the first (what every later press waits), or the first alone."""
        return statistics.median(self.seconds[op][1:] or self.seconds[op])


def timed(waits: Waits, op: str, call):
    started = time.perf_counter()
    result = call()
    waits.seconds[op].append(time.perf_counter() - started)
    return result


def measure(db_path: str, model: str, root: Path, repeats: int, label: str) -> Waits:
    """Each operation `repeats` times in turn on a freshly started server (its log: serve-`label`.log)."""
    import requests
    from gradio_client import Client

    waits = Waits()
    with server(db_path, model, root, label) as (url, start_s):
        waits.start_s = start_s
        client = Client(url + "/", auth=ADMIN, verbose=False)
        train = {MODEL_LABEL: model, STEPS_LABEL: 1}
        preview = {stage: arguments(client, "train_preview", {**train, STAGE_LABEL: stage}) for stage in ("dpo", "ppo")}
        launch = arguments(client, "train_launch", {**train, STAGE_LABEL: "dpo"})
        search = arguments(client, "records_search", {})
        for _ in range(repeats):
            answer = timed(waits, "login", lambda: requests.post(
                f"{url}/login", data={"username": ADMIN[0], "password": ADMIN[1]}, timeout=600))
            answer.raise_for_status()
            for stage in ("dpo", "ppo"):
                shown = timed(waits, f"preview {stage}", lambda: client.predict(*preview[stage],
                                                                                api_name="/train_preview"))
                if "will use" not in str(shown):
                    raise SystemExit(f"the {stage} preview said: {shown}")
            notice, run_id = timed(waits, "launch dpo", lambda: client.predict(*launch, api_name="/train_launch"))
            if "Run **#" not in str(notice):
                raise SystemExit(f"the launch said: {notice}")
            if isinstance(run_id, dict):  # the run picker's update: its choices and the new run picked
                run_id = run_id["value"]
            client.predict(run_id, api_name="/train_cancel")  # no training between the measurements
            timed(waits, "records search", lambda: client.predict(*search, api_name="/records_search"))
            print("  " + ", ".join(f"{op} {seconds[-1]:.1f} s" for op, seconds in waits.seconds.items()), flush=True)
    return waits


def table(quiet: Waits, loaded: Waits, load: int) -> str:
    head = (f"{'wait (s)':<16}{'quiet first':>12}{'later':>9}{f'load {load} first':>14}{'later':>9}"
            f"{'ratio first':>13}{'later':>9}")
    lines = [head, "-" * len(head)]
    rows = [("server start", quiet.start_s, quiet.start_s, loaded.start_s, loaded.start_s)]
    rows += [(op, quiet.first(op), quiet.median(op), loaded.first(op), loaded.median(op)) for op in OPERATIONS]
    for op, qf, qm, lf, lm in rows:
        lines.append(f"{op:<16}{qf:>12.2f}{qm:>9.2f}{lf:>14.2f}{lm:>9.2f}{lf / qf:>13.1f}{lm / qm:>9.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="times each operation is measured (default 5)")
    parser.add_argument("--load", type=int, default=8, help="busy processes for the loaded measurement (default 8)")
    parser.add_argument("--model", choices=("tiny", "default"), default="tiny",
                        help="the model the Train form starts from: a tiny random one registered, or the default")
    parser.add_argument("--json", default=None, help="also write every wait to this JSON file")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.load < 1:
        parser.error("--repeats and --load must be at least 1")
    from rlhf.loading import save_tiny_llama  # the tests' tiny model

    with tempfile.TemporaryDirectory(prefix="ui-waits-") as tmp:
        root = Path(tmp)
        db_path = str(root / "studio.db")
        model_dir = str(save_tiny_llama(root / "tiny")) if args.model == "tiny" else None
        model = seed(db_path, model_dir)
        print(f"quiet: {args.repeats} of each on a fresh server...", flush=True)
        quiet = measure(db_path, model, root, args.repeats, "quiet")
        print(f"under load {args.load} ({args.load} busy processes at normal priority)...", flush=True)
        with busy_processes(args.load):
            loaded = measure(db_path, model, root, args.repeats, "load")
    print(f"\nUI waits, {args.repeats} repeats, model {args.model}, {os.cpu_count()} CPUs "
          "(first: the first press after the server started; later: the median of the other repeats; ratio: under "
          "load / quiet)\n")
    print(table(quiet, loaded, args.load))
    if args.json:
        Path(args.json).write_text(json.dumps({"quiet": {**quiet.seconds, "server start": quiet.start_s},
                                               "load": {**loaded.seconds, "server start": loaded.start_s},
                                               "load_processes": args.load, "repeats": args.repeats}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
