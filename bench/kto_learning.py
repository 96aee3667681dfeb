"""KTO on the app's ratings: people rate the default policy's answers in the Rate tab, the unpaired export turns
each rated answer into a desirable or undesirable row, and `train kto` with its defaults learns from them.

    python bench/kto_learning.py                      # 4 answers per training prompt, 5 annotators, defaults
    python bench/kto_learning.py --set steps=20       # any train --set applies
    python bench/kto_learning.py --rated /tmp/kto/kto.db  # a copy of a database rated before: steps 3-4 only

1. a fresh database with the shipped prompts (the held-out fifth is never generated for or rated);
   `rlhf-studio generate --n ANSWERS --max-new-tokens 16` (the length the evaluation writes)
2. a real server (`rlhf-studio serve`) and `--annotators` simulated annotators (bench/simulated_annotators.py:
   VADER compound of the answer mapped onto the 1-7 scale) rate every answer through the web API
3. `rlhf-studio export --kind unpaired --training --format jsonl`: the rows KTO reads (desirable: mean score >= the
   scale's midpoint; the held-out prompts' ratings left out, as training does), counted
4. `rlhf-studio train kto --wait`, defaults otherwise: the run's automatic before/after evaluation on the held-out
   prompts (positive share: VADER compound > 0.5; KL to the base in nats per answer; distinct-2)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from annotators import Server  # noqa: E402
from human_loop import fresh_database, report  # noqa: E402
from simulated_annotators import WebAnnotator, add_users, run_team  # noqa: E402


def studio(db: Path, *args: str, log: Path | None = None) -> float:
    """One `rlhf-studio` command on `db`; returns its wall seconds."""
    start = time.perf_counter()
    with open(log or os.devnull, "w") as out:
        subprocess.run([sys.executable, "-m", "labeler", *args, "--db", str(db)], check=True, stdout=out,
                       stderr=subprocess.STDOUT)
    return time.perf_counter() - start


def count(db: Path, sql: str) -> int:
    from storage import open_db

    handle = open_db(str(db), migrate=False)
    try:
        return handle.execute(sql).fetchone()[0]
    finally:
        handle.conn.close()


def rate_everything(db: Path, work: Path, annotators: int) -> None:
    """Simulated annotators rate through the web API until no rating item is left."""
    users = [f"annotator{i}" for i in range(annotators)]
    add_users(str(db), users)
    server = Server(str(db), str(work / "server.log"))
    team = [WebAnnotator(server.url, name) for name in users]
    stop = threading.Event()
    start = time.perf_counter()
    threads = run_team(team, ("rating",), stop, idle_sleep=1.0)
    try:
        while count(db, "SELECT COUNT(*) FROM items WHERE kind = 'rating' AND is_open = 1"):
            time.sleep(1.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        for annotator in team:
            annotator.close()
        server.close()
    ratings = count(db, "SELECT COUNT(*) FROM ratings")
    print(f"rated: {ratings} ratings by {annotators} annotators through the web API in "
          f"{time.perf_counter() - start:.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--answers", type=int, default=4, help="answers per training prompt to rate")
    parser.add_argument("--annotators", type=int, default=5)
    parser.add_argument("--set", action="append", default=[], help="a train setting (key=value)")
    parser.add_argument("--keep", default="", help="folder for the database and logs")
    parser.add_argument("--rated", default="", help="start from a copy of this database, its answers rated before")
    args = parser.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="kto-learning-"))
    work.mkdir(parents=True, exist_ok=True)
    db = work / "kto.db"
    if args.rated:
        shutil.copy(args.rated, db)
        print(f"rated before: {count(db, 'SELECT COUNT(*) FROM ratings')} ratings ({args.rated})", flush=True)
    else:
        fresh_database(db)
        seconds = studio(db, "generate", "--n", str(args.answers), "--max-new-tokens", "16", "--autocast")
        print(f"generated: {count(db, 'SELECT COUNT(*) FROM responses')} answers in {seconds:.0f} s", flush=True)
        rate_everything(db, work, args.annotators)

    export = work / "unpaired.jsonl"
    threshold = [s.split("=", 1)[1] for s in args.set if s.startswith("sft_min_score=")]  # KTO's threshold
    studio(db, "export", "--kind", "unpaired", "--training", "--format", "jsonl", "--out", str(export),
           *(["--threshold", threshold[-1]] if threshold else []))
    rows = [json.loads(line) for line in export.read_text().splitlines()]
    desirable = sum(bool(row["label"]) for row in rows)
    print(f"unpaired export: {len(rows)} rows, {desirable} desirable, {len(rows) - desirable} undesirable", flush=True)

    command = ["train", "kto", "--wait", *[part for s in args.set for part in ("--set", s)]]
    wall = studio(db, *command, log=work / "train.log")
    report(db, count(db, "SELECT MAX(id) FROM runs"), wall, "kto on the unpaired export")


if __name__ == "__main__":
    main()
