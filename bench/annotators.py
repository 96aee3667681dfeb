"""Labelling at the speed of a keyboard: 1, 5 and 20 annotators over the web API vs the service layer alone.

    python bench/annotators.py                                   # 10k and 100k items, ~3 minutes
    python bench/annotators.py --sizes 100000 --duration 60      # the issue's 60 s run at 100k items
    python bench/annotators.py --sizes 10000 --annotators 1,20 --duration 5 --labels 50   # a quick look
    git archive HEAD | tar -x -C /tmp/before && python bench/annotators.py --baseline /tmp/before --rounds 3
                                                                 # this tree against a checkout, interleaved
    python bench/annotators.py --sizes 10000 --annotators 20 --duration 40 --think 2
                                                                 # people who read before they label (2 s mean):
                                                                 # how long one label waits, not the throughput
    python bench/annotators.py --sizes 10000 --questions         # each label also answers the project's questions

For each size it builds a fresh database (prompts and answers imported as plain rows, no generation; `--overlap`
labels per item), starts a real server (`rlhf-studio serve` in its own process, as a user starts it) and drives
it with gradio_client, one Client per annotator, each logged in as its own user:

- 1 annotator labels `--labels` items in a row; 5 and 20 (`--annotators`) label for `--duration` seconds. Each
  label is one `rate_submit` call (it stores the score and returns the next item): its seconds are the latency.
- `--questions`: the project asks two criteria and three flags beside its score (issue 47), and every label
  answers them as the Rate tab sends them: a score per criterion, a flag on every 5th label, a correction of the
  shown answer on every 10th (`questions.submit_rating_with_answers`, one transaction with the score). The
  database check then also counts the criterion scores stored for each acknowledged label.
- The ceiling, in the same run: the same submits (`labeling.submit_rating_and_next`) as direct calls from as
  many threads, each with its own connection, without HTTP or Gradio (--labels in all, shared among them).

Printed per row: labels/s, p50/p95/p99 per label, the server's and the clients' CPU per label, and the database
check afterwards: every acknowledged label stored exactly once for its user (lost, duplicated) and no item over
its overlap. The HTTP/service ratio is what to read on a shared machine (the load average is printed).

--baseline DIR starts a second server from another checkout of the code (the same database, its own annotators)
and measures it right before this tree's server, group by group, `--rounds` times: the two are compared under the
same drift of a shared machine's speed instead of in runs minutes apart.

The clients pass ssl_verify=False (the server is plain http on 127.0.0.1, nothing is verified either way):
otherwise gradio_client builds an httpx client that loads the CA bundle for every request, ~20 ms of client
CPU per label, and 20 annotators in one process measure their own GIL, not the server. gradio_client also
polls for its answer every 50 ms, so its p50 has a floor near 50 ms that the browser (an EventSource) has not.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PASSWORD = "bench-password-1"
PROJECT = "default"
# --questions: what the project asks beside its score, as `questions add` would set it.
CRITERIA = (("helpful", 1, 5), ("safe", 1, 3))
FLAGS = ("spam", "off-topic", "unsafe")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc; nan elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def label_answers(n: int) -> tuple[tuple[int, ...], list[str], str]:
    """What the n-th label (from 0) answers with --questions: (a score per criterion, the flags ticked, a
    correction or ''); varied so the stored rows are not all alike."""
    scores = tuple(low + n % (high - low + 1) for _, low, high in CRITERIA)
    flags = [FLAGS[(n // 5) % len(FLAGS)]] if n % 5 == 4 else []
    correction = f"A corrected answer {n}: a fine film, well acted and well shot." if n % 10 == 9 else ""
    return scores, flags, correction


def build_database(path: str, n_items: int, users: list[str], overlap: int, questions: bool = False) -> None:
    """n_items rating items (one prompt per 4 answers), the users (one password hash, copied), the overlap, and
    with `questions` the project's criteria and flags (CRITERIA, FLAGS)."""
    from labeler.services.data import accounts
    from labeler.services.labels import questions as project_questions
    from storage import open_db, write_transaction

    db = open_db(path)
    try:
        for name, low, high in CRITERIA if questions else ():
            project_questions.add_question(db, PROJECT, name, "criterion", low, high)
        for name in FLAGS if questions else ():
            project_questions.add_question(db, PROJECT, name, "flag")
        accounts.create_user(db, users[0], PASSWORD)  # scrypt once; the others share its salt and hash
        with write_transaction(db):
            db.conn.execute(
                "INSERT INTO users (username, password_hash, salt, role)"
                " SELECT value, password_hash, salt, role FROM users, json_each(?) WHERE username = ?",
                [json.dumps(users[1:]), users[0]],
            )
            db.conn.execute("UPDATE projects SET overlap = ? WHERE name = ?", [overlap, PROJECT])
            n_prompts = (n_items + 3) // 4
            db.conn.executemany(
                "INSERT INTO prompts (id, project_id, text, text_hash) VALUES (?, 1, ?, ?)",
                ((p, f"Prompt {p}: the film was", hashlib.sha256(str(p).encode()).hexdigest())
                 for p in range(1, n_prompts + 1)),
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


class Server:
    """`rlhf-studio serve` on a free port, as a user starts it (migrations at start-up, then plain requests).

    `options`: more `serve` flags; `env`: the variables set over this process's (by default Gradio's analytics off
    and one OpenMP thread); `timeout_s`: how long it may take to answer. `start_s`: the seconds it took."""

    def __init__(self, db_path: str, log_path: str, code_dir: str | None = None, project: str = PROJECT, *,
                 options: Sequence[str] = (), env: dict[str, str] | None = None, timeout_s: float = 180.0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        env = {**os.environ, **({"GRADIO_ANALYTICS_ENABLED": "False", "OMP_NUM_THREADS": "1"} if env is None else env)}
        self.log = open(log_path, "w")
        started = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "labeler", "serve", "--db", db_path, "--port", str(self.port),
             "--first-prompts", "0", "--project", project, *options],
            stdout=self.log, stderr=subprocess.STDOUT, env=env,
            # `python -m labeler` imports from its working directory first: code_dir's labeler and storage.
            cwd=code_dir,
        )
        deadline = started + timeout_s
        while True:
            if self.process.poll() is not None:
                raise SystemExit(f"the server exited ({self.process.returncode}); see {log_path}")
            try:
                with urllib.request.urlopen(self.url, timeout=2):
                    break
            except urllib.error.HTTPError:
                break  # it answers (the page may need a login)
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"the server did not answer within {timeout_s:.0f} s; see {log_path}") from None
                time.sleep(0.2)
        self.start_s = time.monotonic() - started

    def cpu_s(self) -> float:
        return process_cpu_s(self.process.pid)

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


@dataclass
class Annotator:
    username: str
    latencies: list[float] = field(default_factory=list)
    acknowledged: list[int] = field(default_factory=list)  # item ids whose submit answered without error


class WebAnnotator(Annotator):
    def __init__(self, url: str, username: str, questions: bool = False):
        from gradio_client import Client

        super().__init__(username)
        self.questions = questions
        self.client = Client(url, auth=(username, PASSWORD), verbose=False, ssl_verify=False)
        self.key = self.client.predict(api_name="/rate_next")[6]

    def label(self) -> bool:
        """One label, one round trip; False when the queue is empty."""
        if not self.key:
            return False
        score = 1 + len(self.acknowledged) % 7
        # The Rate tab's inputs: score, comment, key, then the correction, the flags and a score per criterion.
        asked = ()
        if self.questions:
            scores, flags, correction = label_answers(len(self.acknowledged))
            asked = (correction, flags, *scores)
        start = time.perf_counter()
        shown = self.client.predict(score, "", self.key, *asked, api_name="/rate_submit")
        self.latencies.append(time.perf_counter() - start)
        self.acknowledged.append(int(self.key.split(":")[0]))
        self.key = shown[6]
        return True

    def close(self) -> None:
        self.client.close()


class ServiceAnnotator(Annotator):
    """The same submits as direct calls: one connection of its own, no HTTP, no Gradio."""

    def __init__(self, db_path: str, username: str, questions: bool = False):
        from labeler.services.data import labeling
        from labeler.services.labels import questions as project_questions
        from storage import open_db

        super().__init__(username)
        self.labeling, self.project_questions, self.questions = labeling, project_questions, questions
        self.db = open_db(db_path, migrate=False, create=False)
        self.item = labeling.next_item(self.db, PROJECT, username)

    def label(self) -> bool:
        if self.item is None:
            return False
        item_id, score = self.item.item_id, 1 + len(self.acknowledged) % 7
        start = time.perf_counter()
        if self.questions:
            scores, flags, correction = label_answers(len(self.acknowledged))
            answers = self.project_questions.ItemAnswers(
                scores=dict(zip((name for name, _, _ in CRITERIA), scores)), flags=tuple(flags),
                correction=correction or None)
            _, self.item = self.project_questions.submit_rating_with_answers(
                self.db, PROJECT, self.username, item_id, score, answers, request_id=self.item.request_id)
        else:
            _, self.item = self.labeling.submit_rating_and_next(
                self.db, PROJECT, self.username, item_id, score, request_id=self.item.request_id)
        self.latencies.append(time.perf_counter() - start)
        self.acknowledged.append(item_id)
        return True

    def close(self) -> None:
        self.db.conn.close()


def run_group(people: list[Annotator], labels: int | None, seconds: float,
              think: float = 0.0) -> tuple[float, list[BaseException]]:
    """Everyone labels at once, `labels` each or for `seconds`; (elapsed seconds, errors). With `think` > 0 each
    person pauses between labels for a random time of that mean (exponential, seeded by their name), as people
    reading an answer do; at 0 they submit back to back, which measures the server's throughput rather than how long
    one label waits."""
    barrier = threading.Barrier(len(people) + 1)
    errors: list[BaseException] = []
    deadline = [0.0]

    def work(person: Annotator) -> None:
        pause = random.Random(person.username)
        barrier.wait()
        if think > 0:  # people arrive at their own moments, not all on one click
            time.sleep(pause.uniform(0, think))
        try:
            while (len(person.latencies) < labels if labels else time.monotonic() < deadline[0]) and person.label():
                if think > 0:
                    time.sleep(min(pause.expovariate(1 / think), max(0.0, deadline[0] - time.monotonic())))
        except BaseException as error:  # reported: a failed request is a finding, not a crash
            errors.append(error)

    threads = [threading.Thread(target=work, args=(p,)) for p in people]
    for thread in threads:
        thread.start()
    deadline[0] = time.monotonic() + seconds
    start = time.monotonic()
    barrier.wait()
    for thread in threads:
        thread.join()
    return time.monotonic() - start, errors


def check_database(db_path: str, people: list[Annotator], questions: bool = False) -> tuple[int, int]:
    """(lost, duplicated): each person's acknowledged labels against their stored rating rows; with `questions`
    a label whose criterion scores are not all stored counts as lost too."""
    from storage import open_db

    db = open_db(db_path, migrate=False, create=False)
    try:
        lost = duplicated = 0
        for person in people:
            stored = [row[0] for row in db.execute(
                "SELECT r.item_id FROM ratings r JOIN users u ON u.id = r.user_id WHERE u.username = ?",
                [person.username],
            )]
            lost += len(set(person.acknowledged) - set(stored))
            duplicated += len(stored) - len(set(stored)) + len(set(stored) - set(person.acknowledged))
            if questions:
                scored = {row[0] for row in db.execute(
                    "SELECT a.item_id FROM answers a JOIN users u ON u.id = a.user_id WHERE u.username = ?"
                    " AND a.kind = 'score' GROUP BY a.item_id HAVING COUNT(*) = ?", [person.username, len(CRITERIA)],
                )}
                lost += len(set(person.acknowledged) & set(stored) - scored)
        return lost, duplicated
    finally:
        db.conn.close()


def over_overlap(db_path: str) -> int:
    from storage import open_db

    db = open_db(db_path, migrate=False, create=False)
    try:
        return db.execute(
            "SELECT COUNT(*) FROM (SELECT r.item_id FROM ratings r JOIN items i ON i.id = r.item_id"
            " WHERE i.gold_json IS NULL GROUP BY r.item_id"
            " HAVING COUNT(*) > (SELECT overlap FROM projects WHERE name = ?))", [PROJECT],
        ).fetchone()[0]
    finally:
        db.conn.close()


@dataclass
class Row:
    size: int
    path: str
    count: int
    labels: int
    elapsed: float
    latencies: list[float]
    server_cpu_ms: float
    client_cpu_ms: float
    lost: int
    duplicated: int
    errors: int

    def cells(self) -> list[str]:
        p = [percentile(self.latencies, q) * 1000 for q in (0.5, 0.95, 0.99)]
        return [f"{self.size:,}", self.path, str(self.count), str(self.labels), f"{self.labels / self.elapsed:.1f}",
                *(f"{v:.1f}" for v in p), f"{self.server_cpu_ms:.1f}" if self.server_cpu_ms == self.server_cpu_ms else "-", f"{self.client_cpu_ms:.1f}",
                f"{self.lost}/{self.duplicated}", str(self.errors)]


HEADER = ["items", "path", "annotators", "labels", "labels/s", "p50 ms", "p95 ms", "p99 ms",
          "server CPU ms/label", "client CPU ms/label", "lost/dup", "errors"]


def measure(size: int, path: str, count: int, make, args, server: Server | None, db_path: str) -> Row:
    people = [make(i) for i in range(count)]
    # The service layer labels a fixed number (it would empty a small queue in seconds); one web annotator
    # labels --labels in a row, a group for --duration seconds.
    labels = max(20, args.labels // count) if path == "service" else (args.labels if count == 1 else None)
    server_cpu, client_cpu = (server.cpu_s() if server else 0.0), time.process_time()
    elapsed, errors = run_group(people, labels, args.duration, think=0.0 if path == "service" else args.think)
    server_cpu = (server.cpu_s() - server_cpu) if server else float("nan")
    client_cpu = time.process_time() - client_cpu
    for person in people:
        person.close()
    done = sum(len(p.acknowledged) for p in people)
    lost, duplicated = check_database(db_path, people, args.questions)
    if errors:
        print(f"  {len(errors)} annotator(s) stopped on an error: {errors[0]!r}", flush=True)
    if labels is None and elapsed < args.duration * 0.9:
        print(f"  the queue ran out after {elapsed:.1f} s: use more --sizes items for this many labels", flush=True)
    per = 1000 / max(done, 1)
    row = Row(size, path, count, done, elapsed, [x for p in people for x in p.latencies],
              server_cpu * per, client_cpu * per, lost, duplicated, len(errors))
    print("  " + " | ".join(row.cells()), flush=True)
    return row


def run_size(size: int, args, counts: list[int]) -> list[Row]:
    tag = f"n{size}"
    paths = ["svc", "web", *(["base"] if args.baseline else [])]
    users = [f"{tag}-{path}-{count}-{r}-{i}" for path in paths for count in counts for r in range(args.rounds)
             for i in range(count)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-annotators-") as root:
        db_path = str(Path(root) / "studio.db")
        start = time.monotonic()
        build_database(db_path, size, users, args.overlap, args.questions)
        built = time.monotonic() - start
        start = time.monotonic()
        server = Server(db_path, str(Path(root) / "serve.log"))
        baseline = Server(db_path, str(Path(root) / "baseline.log"), args.baseline) if args.baseline else None
        print(f"\n## {size:,} items: database built in {built:.1f} s, server(s) up in {time.monotonic() - start:.1f} s",
              flush=True)
        try:
            for count in counts:
                for r in range(args.rounds):
                    # The ceiling first, then the web API, for each group size: a shared machine's drift hits all.
                    rows.append(measure(size, "service", count,
                                        lambda i: ServiceAnnotator(db_path, f"{tag}-svc-{count}-{r}-{i}", args.questions),
                                        args, None, db_path))
                    if baseline:
                        rows.append(measure(size, "baseline", count,
                                            lambda i: WebAnnotator(baseline.url, f"{tag}-base-{count}-{r}-{i}", args.questions),
                                            args, baseline, db_path))
                    rows.append(measure(size, "web API", count,
                                        lambda i: WebAnnotator(server.url, f"{tag}-web-{count}-{r}-{i}", args.questions),
                                        args, server, db_path))
        finally:
            server.close()
            if baseline:
                baseline.close()
        over = over_overlap(db_path)
        print(f"  items over their overlap of {args.overlap}: {over}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # 10k, not fewer: 20 annotators label ~180/s, and a queue that runs out mid-row measures nothing (each item
    # takes --overlap labels; the row says when it ran out).
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated item counts, one database and server each")
    parser.add_argument("--annotators", default="1,5,20", help="comma-separated group sizes")
    parser.add_argument("--labels", type=int, default=200, help="labels in a row for the single annotator")
    parser.add_argument("--duration", type=float, default=12.0, help="seconds each group of several annotators labels")
    parser.add_argument("--overlap", type=int, default=3, help="labels per item (the project's overlap)")
    parser.add_argument("--baseline", metavar="DIR", help="a checkout of other code whose server is measured too, "
                        "interleaved with this tree's (e.g. `git archive HEAD | tar -x -C DIR`)")
    parser.add_argument("--think", type=float, default=0.0,
                        help="mean seconds a web annotator pauses between labels (0: back to back, a throughput test)")
    parser.add_argument("--rounds", type=int, default=1, help="times each group is measured (alternating servers)")
    parser.add_argument("--questions", action="store_true", help="the project asks two criteria and three flags "
                        "beside its score, and every label answers them (a correction every 10th)")
    args = parser.parse_args()
    counts = [int(c) for c in args.annotators.split(",")]
    load = os.getloadavg()
    print(f"# bench/annotators.py  load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}  cores {os.cpu_count()}",
          flush=True)
    start = time.monotonic()
    rows = [row for size in (int(s) for s in args.sizes.split(",")) for row in run_size(size, args, counts)]
    print(f"\n| {' | '.join(HEADER)} |\n|{'---|' * len(HEADER)}")
    for row in rows:
        print(f"| {' | '.join(row.cells())} |")
    print("\nweb API / service (p50 latency, labels/s):")
    services = [row for row in rows if row.path == "service"]
    for web, service in zip([row for row in rows if row.path == "web API"], services):
        ratio = percentile(web.latencies, 0.5) / percentile(service.latencies, 0.5)
        print(f"  {web.size:>7,} items, {web.count:2} annotators: p50 x{ratio:.0f}, "
              f"labels/s {web.labels / web.elapsed:.1f} vs {service.labels / service.elapsed:.0f}")
    if args.baseline:
        print("\nthis tree / baseline, all rounds pooled (p50, p95, p99 latency; labels/s):")
        for size in sorted({row.size for row in rows}):
            for count in counts:
                pooled = {}
                for path in ("web API", "baseline"):
                    group = [row for row in rows if (row.size, row.count, row.path) == (size, count, path)]
                    latencies = [x for row in group for x in row.latencies]
                    pooled[path] = ([percentile(latencies, q) for q in (0.5, 0.95, 0.99)],
                                    sum(row.labels for row in group) / sum(row.elapsed for row in group))
                (now, now_rate), (before, before_rate) = pooled["web API"], pooled["baseline"]
                print(f"  {size:>7,} items, {count:2} annotators: " + ", ".join(
                    f"p{q} {b * 1000:.0f} -> {n * 1000:.0f} ms" for q, n, b in zip((50, 95, 99), now, before))
                    + f"; labels/s {before_rate:.1f} -> {now_rate:.1f}")
    print(f"\n{time.monotonic() - start:.0f} s; load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
