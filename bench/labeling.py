"""Labelling through the web API: latency per label and throughput, one call per label vs the old two.

    python bench/labeling.py                       # 1k and 100k items, 200 labels in a row, 20 annotators x 20 s
    python bench/labeling.py --duration 60 --sizes 1000,100000 --annotators 20

For each database size it builds a fresh database (plain SQL, no generation), starts `build_app` + `launch` in a
child process on a free port (so the clients do not share its interpreter), and drives it with gradio_client:

- one annotator, `--labels` labels in a row: p50/p99 seconds per label;
- `--annotators` annotators at once for `--duration` seconds: p50/p99 per label, labels/s in total, and the
  database checked afterwards: every acknowledged submit stored exactly once (lost / duplicated), no item over
  its overlap;
- the service layer alone (the same submits as direct calls, no HTTP): the ceiling.

Each is measured for the one-round-trip path (`rate_submit` returns the next item and its key) and the old
two-call path (`rate_next`, then `rate_submit`), taking turns in the same run so that a shared machine's drift
hits both alike; the ratio old / new is printed.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PASSWORD = "bench-password-1"
VARIANTS = ("one call", "two calls")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def build_database(path: str, n_items: int, users: list[str]) -> None:
    """n_items rating items (one prompt per 4 answers), the users; overlap 1, Likert 1..7."""
    import hashlib

    from labeler.services import accounts
    from storage import open_db, write_transaction

    db = open_db(path)
    try:
        for name in users:
            accounts.create_user(db, name, PASSWORD)
        with write_transaction(db):
            n_prompts = (n_items + 3) // 4
            db.conn.executemany(
                "INSERT INTO prompts (id, project_id, text, text_hash) VALUES (?, 1, ?, ?)",
                ((p, f"Prompt {p}: the film was", hashlib.sha256(str(p).encode()).hexdigest()) for p in range(1, n_prompts + 1)),
            )
            db.conn.executemany(
                "INSERT INTO responses (id, prompt_id, text, model) VALUES (?, ?, ?, 'bench')",
                ((r, (r - 1) // 4 + 1, f"Answer {r}: a fine film, well acted.") for r in range(1, n_items + 1)),
            )
            db.conn.executemany(
                "INSERT INTO items (project_id, kind, prompt_id, response_ids_json) VALUES (1, 'rating', ?, ?)",
                (((r - 1) // 4 + 1, f"[{r}]") for r in range(1, n_items + 1)),
            )
    finally:
        db.conn.close()


def serve_child(db_path: str, port: int) -> None:
    from labeler.ui.app import build_app, launch
    from labeler.ui.context import ServeSettings

    settings = ServeSettings(db_path=db_path, port=port)
    app = build_app(settings)
    launch(app, settings, prevent_thread_lock=True, quiet=True)
    print("READY", flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    app.close()


class Server:
    def __init__(self, db_path: str):
        self.port = free_port()
        env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "OMP_NUM_THREADS": "1"}
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve-child", db_path, str(self.port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )
        line = self.process.stdout.readline()
        if line.strip() != "READY":
            raise SystemExit(f"the server did not start (said {line!r})")
        self.url = f"http://127.0.0.1:{self.port}/"

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()


class Annotator:
    """One gradio_client session labelling through either path; records latency per label and what it sent."""

    def __init__(self, url: str, username: str, variant: str, seed: int):
        from gradio_client import Client

        self.client = Client(url, auth=(username, PASSWORD), verbose=False)
        self.username, self.variant = username, variant
        self.seed = seed
        self.latencies: list[float] = []
        self.acknowledged: list[int] = []  # item ids whose submit answered without error
        self.key = self.client.predict(api_name="/rate_next")[6]

    def label(self) -> bool:
        """One label; False when the queue is empty."""
        start = time.perf_counter()
        if self.variant == "two calls":
            self.key = self.client.predict(api_name="/rate_next")[6]
        if not self.key:
            return False
        score = 1 + (self.seed + len(self.acknowledged)) % 7
        shown = self.client.predict(score, "", self.key, api_name="/rate_submit")
        self.latencies.append(time.perf_counter() - start)
        self.acknowledged.append(int(self.key.split(":")[0]))
        self.key = shown[6]
        return True


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


def one_annotator(url: str, labels: int, tag: str) -> dict[str, list[float]]:
    """`labels` labels in a row per variant, taking turns every 20 labels."""
    people = {v: Annotator(url, f"{tag}-solo-{i}", v, i) for i, v in enumerate(VARIANTS)}
    while any(len(p.latencies) < labels for p in people.values()):
        for person in people.values():
            for _ in range(min(20, labels - len(person.latencies))):
                if not person.label():
                    break
    return {v: p.latencies for v, p in people.items()}


def many_annotators(url: str, count: int, seconds: float, variant: str, tag: str) -> tuple[list[Annotator], float]:
    people = [Annotator(url, f"{tag}-{variant[:3]}-{i}", variant, i) for i in range(count)]
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []
    deadline = [0.0]

    def work(person: Annotator) -> None:
        barrier.wait()
        try:
            while time.monotonic() < deadline[0] and person.label():
                pass
        except BaseException as error:  # reported below: a failed request is a finding, not a crash
            errors.append(error)

    threads = [threading.Thread(target=work, args=(p,)) for p in people]
    deadline[0] = time.monotonic() + seconds + 1.0
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - start
    if errors:
        print(f"  {len(errors)} annotator(s) stopped on an error: {errors[0]!r}")
    return people, elapsed


def check_database(db_path: str, people: list[Annotator]) -> tuple[int, int, int]:
    """(lost, duplicated, over overlap): acknowledged submits against the rows stored."""
    from storage import open_db

    db = open_db(db_path)
    try:
        lost = duplicated = 0
        for person in people:
            stored = [row[0] for row in db.execute(
                "SELECT r.item_id FROM ratings r JOIN users u ON u.id = r.user_id WHERE u.username = ?",
                [person.username],
            )]
            lost += len(set(person.acknowledged) - set(stored))
            duplicated += len(stored) - len(set(stored)) + len(set(stored) - set(person.acknowledged))
        over = db.execute(
            "SELECT COUNT(*) FROM (SELECT item_id FROM ratings GROUP BY item_id"
            " HAVING COUNT(*) > (SELECT overlap FROM projects WHERE id = 1))"
        ).fetchone()[0]
        return lost, duplicated, over
    finally:
        db.conn.close()


def service_ceiling(db_path: str, username: str, labels: int) -> list[float]:
    from labeler.services import labeling
    from storage import open_db

    latencies = []
    db = open_db(db_path)
    try:
        item = labeling.next_item(db, "default", username)
        for i in range(labels):
            start = time.perf_counter()
            _, item = labeling.submit_rating_and_next(db, "default", username, item.item_id, 1 + i % 7,
                                                      request_id=item.request_id)
            latencies.append(time.perf_counter() - start)
    finally:
        db.conn.close()
    return latencies


def fmt(latencies: list[float]) -> str:
    return f"p50 {percentile(latencies, 0.5) * 1000:6.1f} ms  p99 {percentile(latencies, 0.99) * 1000:6.1f} ms"


def run_size(n_items: int, args) -> None:
    tag = f"n{n_items}"
    users = ([f"{tag}-solo-{i}" for i in range(len(VARIANTS))] + [f"{tag}-service"]
             + [f"{tag}-{v[:3]}-{i}" for v in VARIANTS for i in range(args.annotators)])
    with tempfile.TemporaryDirectory(prefix="bench-labeling-") as root:
        db_path = str(Path(root) / "studio.db")
        start = time.monotonic()
        build_database(db_path, n_items, users)
        print(f"\n## {n_items} items (database built in {time.monotonic() - start:.1f} s)")
        server = Server(db_path)
        try:
            solo = one_annotator(server.url, args.labels, tag)
            for variant in VARIANTS:
                print(f"1 annotator, {len(solo[variant])} labels, {variant:9}: {fmt(solo[variant])}")
            ratio = percentile(solo["two calls"], 0.5) / percentile(solo["one call"], 0.5)
            print(f"  ratio two calls / one call (p50): {ratio:.2f}x")
            ceiling = service_ceiling(db_path, f"{tag}-service", args.labels)
            print(f"service layer alone, {len(ceiling)} labels   : {fmt(ceiling)}")

            results = {}
            for variant in VARIANTS:  # different users per path, so each starts with a fresh queue of its own
                people, elapsed = many_annotators(server.url, args.annotators, args.duration, variant, tag)
                latencies = [x for p in people for x in p.latencies]
                labels = sum(len(p.acknowledged) for p in people)
                lost, duplicated, over = check_database(db_path, people)
                results[variant] = (latencies, labels / elapsed)
                print(f"{args.annotators} annotators x {elapsed:.0f} s, {variant:9}: {fmt(latencies)}  "
                      f"{labels / elapsed:5.1f} labels/s  lost {lost}  duplicated {duplicated}  over overlap {over}")
            (new, new_rate), (old, old_rate) = results["one call"], results["two calls"]
            print(f"  ratio two calls / one call: p99 {percentile(old, 0.99) / percentile(new, 0.99):.2f}x, "
                  f"labels/s one call / two calls {new_rate / old_rate:.2f}x")
        finally:
            server.close()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-child":
        serve_child(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,100000", help="comma-separated item counts, one database each")
    parser.add_argument("--labels", type=int, default=200, help="labels in a row for the single annotator, per path")
    parser.add_argument("--annotators", type=int, default=20, help="concurrent annotators")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds the concurrent annotators label, per path")
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"# bench/labeling.py  load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}  cores {os.cpu_count()}")
    for size in (int(s) for s in args.sizes.split(",")):
        run_size(size, args)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
