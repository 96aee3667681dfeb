"""Labels spent well: the reward model's held-out accuracy after 25, 50, 100 and 200 labels, when the queue serves
items in arrival order vs by the reward model's uncertainty (projects set --selection uncertainty).

    python bench/label_efficiency.py --keep /tmp/le          # builds the pool once (1,080 answers), 2 x 5 runs
    python bench/label_efficiency.py --seeds 0,1 --pace 0.5  # a quicker look
    python bench/label_efficiency.py --pool POOL --ceiling   # the learner alone: random labels up to every pair

The pool: the shipped movie openings, `--answers` answers of the default policy per prompt, queued as ranking
items of `--ranking-size` answers (default 2: each label is one comparison), in the order they were generated. For each
seed, 27 prompts are held out (drawn by the seed) and their items removed from the queue; every other item is in
the pool.

Each run starts a real server (`rlhf-studio serve`) on a copy of the pool and has `--annotators` simulated
annotators (bench/simulated_annotators.py: VADER of the answer, ties within 0.1) rank through the web API, one
label per `--pace` seconds each, until `--labels` rankings are stored. Under uncertainty selection the server
refits its preference ensemble in the background every 10 labels (active_learning.SelectionRefresher) and one
served item in four is random. The annotators never touch the database.

The reward model measured is the one that selects: the preference ensemble on frozen MiniLM features
(rlhf.preference_ensemble), fitted on the first N rankings stored, then scored on every held-out pair (all pairs of a
held-out prompt's answers whose VADER scores differ by at least 0.1): the share it orders as VADER does.
Printed: accuracy per strategy, seed and N; the mean over seeds; and the labels uncertainty selection needs to reach
arrival order's mean accuracy at the largest N.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
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

from annotators import Server  # noqa: E402  (bench/annotators.py)
from simulated_annotators import TIE_MARGIN, WebAnnotator, add_users, run_team, vader_scores  # noqa: E402

PROJECT = "default"
HELDOUT_PROMPTS = 27


def build_pool(path: str, answers: int, ranking_size: int, seed: int = 0) -> None:
    """The shipped prompts with `answers` answers each from the default policy, in ranking items of
    `ranking_size` (2: pairs)."""
    from labeler.services.serving import generation
    from labeler.services.data import prompts
    from rlhf.configs import GenerationSettings
    from rlhf.hardware import bf16_is_fast
    from storage import open_db

    db = open_db(path)
    prompts.import_shipped_prompts(db, PROJECT)
    db.execute("UPDATE prompts SET split = 'train'")  # the bench draws its own held-out prompts per seed
    settings = GenerationSettings(max_new_tokens=16, batch_size=16, seed=seed, autocast=bf16_is_fast())
    start = time.perf_counter()
    generation.generate_responses(db, PROJECT, "default", n_per_prompt=answers, settings=settings,
                                  ranking_size=ranking_size)
    answers_made = db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    items = db.execute("SELECT COUNT(*) FROM items WHERE kind = 'ranking'").fetchone()[0]
    print(f"pool: {answers_made} answers, {items} ranking items ({time.perf_counter() - start:.0f} s)", flush=True)
    db.conn.close()


def heldout_prompt_ids(db, seed: int) -> list[int]:
    ids = [row[0] for row in db.execute("SELECT id FROM prompts ORDER BY id").fetchall()]
    return sorted(random.Random(seed).sample(ids, HELDOUT_PROMPTS))


def heldout_pairs(db, prompt_ids: list[int]) -> list[tuple[str, str, str]]:
    """(prompt, better, worse) for every pair of a held-out prompt's answers that VADER tells apart."""
    pairs = []
    for prompt_id in prompt_ids:
        prompt = db.execute("SELECT text FROM prompts WHERE id = ?", [prompt_id]).fetchone()[0]
        texts = [row[0] for row in db.execute("SELECT text FROM responses WHERE prompt_id = ? ORDER BY id", [prompt_id])]
        scores = vader_scores(texts)
        for i in range(len(texts)):
            for j in range(len(texts)):
                if scores[i] - scores[j] >= TIE_MARGIN:
                    pairs.append((prompt, texts[i], texts[j]))
    return pairs


def first_rankings_pairs(db, n: int) -> list[tuple[str, str, str]]:
    """(prompt, chosen, rejected) of the first n rankings stored (by id)."""
    from labeler.services.data.label_kinds import ranking_pairs

    rows = db.execute("SELECT k.order_json, p.text FROM rankings k JOIN prompts p ON p.id = k.prompt_id"
                      " ORDER BY k.id LIMIT ?", [n]).fetchall()
    texts = dict(db.execute("SELECT id, text FROM responses").fetchall())
    return [(row[1], texts[c], texts[r]) for row in rows for c, r in ranking_pairs(json.loads(row[0]))]


def accuracy(encoder, train: list, test: list, seed: int = 0) -> float:
    from labeler.services.labels.active_learning import fit_ensemble

    ensemble = fit_ensemble(encoder, train, seed=seed)
    prompts = [p for p, _, _ in test]
    return ensemble.agreement(encoder.embed(prompts, [c for _, c, _ in test]), encoder.embed(prompts, [r for _, _, r in test]))


def learner_ceiling(pool: str, seeds: list[int]) -> None:
    """How far more labels move the learner itself, no server and no order: the ensemble fitted on random samples of
    the pool's pair items (labelled by VADER, as the annotators label), and of every pair of a prompt's answers, up to
    all of them. Where 10x the labels add little, no order of the same labels can halve them."""
    import itertools

    from rlhf.preference_ensemble import FrozenTextEncoder
    from storage import open_db

    encoder, db = FrozenTextEncoder(), open_db(pool, migrate=False)
    for seed in seeds:
        held = heldout_prompt_ids(db, seed)
        test, items, all_pairs = heldout_pairs(db, held), [], []
        for prompt_id, prompt in db.execute("SELECT id, text FROM prompts ORDER BY id").fetchall():
            if prompt_id in held:
                continue
            texts = [r[0] for r in db.execute("SELECT text FROM responses WHERE prompt_id = ? ORDER BY id", [prompt_id])]
            scores = vader_scores(texts)

            def labelled(i: int, j: int):
                if abs(scores[i] - scores[j]) < TIE_MARGIN:
                    return None
                return (prompt, texts[i], texts[j]) if scores[i] > scores[j] else (prompt, texts[j], texts[i])

            items += filter(None, (labelled(i, i + 1) for i in range(0, len(texts) - 1, 2)))
            all_pairs += filter(None, (labelled(i, j) for i, j in itertools.combinations(range(len(texts)), 2)))
        rng = random.Random(seed)
        rng.shuffle(items)
        rng.shuffle(all_pairs)

        def curve(pairs: list, sizes: list[int]) -> str:
            return "  ".join(f"{n}: {accuracy(encoder, pairs[:n], test):.3f}" for n in sizes)

        print(f"seed {seed} ({len(test)} held-out pairs)\n  pair items, random order: "
              f"{curve(items, [100, 200, len(items)])}\n  every pair of a prompt's answers: "
              f"{curve(all_pairs, [200, 400, 800, 1600, len(all_pairs)])}", flush=True)
    db.conn.close()


def one_run(pool: str, work: Path, strategy: str, seed: int, args) -> Path:
    """A server on a copy of the pool; annotators rank until args.labels rankings are stored. Returns the copy."""
    from storage import open_db

    path = work / f"{strategy}-{seed}.db"
    shutil.copy(pool, path)
    db = open_db(str(path))
    heldout = heldout_prompt_ids(db, seed)
    marks = ", ".join("?" * len(heldout))
    db.execute(f"DELETE FROM items WHERE prompt_id IN ({marks})", heldout)
    db.execute("UPDATE projects SET selection = ? WHERE name = ?", [strategy, PROJECT])
    users = [f"annotator{i}" for i in range(args.annotators)]
    db.conn.close()
    add_users(str(path), users)
    server = Server(str(path), str(work / f"{strategy}-{seed}.log"))
    db = open_db(str(path), migrate=False)
    try:
        if strategy == "uncertainty":  # the server's first refresh encodes the whole pool once
            while db.execute("SELECT COUNT(*) FROM items WHERE selection_score IS NOT NULL").fetchone()[0] == 0:
                time.sleep(1.0)
        team = [WebAnnotator(server.url, name, pace=args.pace) for name in users]
        stop = threading.Event()
        start = time.perf_counter()
        threads = run_team(team, ("ranking",), stop)
        while db.execute("SELECT COUNT(*) FROM rankings").fetchone()[0] < args.labels:
            time.sleep(0.2)
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        stored = db.execute("SELECT COUNT(*) FROM rankings").fetchone()[0]
        print(f"  {strategy:<11} seed {seed}: {stored} rankings in {time.perf_counter() - start:.0f} s", flush=True)
        for annotator in team:
            annotator.close()
    finally:
        db.conn.close()
        server.close()
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pool", default="", help="a pool database built before (default: build one)")
    parser.add_argument("--answers", type=int, default=8, help="answers per prompt in the pool")
    parser.add_argument("--ranking-size", type=int, default=2, help="answers per ranking item (2: pairs)")
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--sizes", default="25,50,100,200")
    parser.add_argument("--annotators", type=int, default=5)
    parser.add_argument("--pace", type=float, default=1.0, help="seconds each annotator takes per label")
    parser.add_argument("--strategies", default="arrival,uncertainty")
    parser.add_argument("--keep", default="", help="folder to keep the run databases in")
    parser.add_argument("--ceiling", action="store_true", help="only the learner's own curve on the pool, up to "
                        "every pair (offline: no server, no order)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    args.labels = max(sizes)
    seeds = [int(s) for s in args.seeds.split(",")]
    strategies = args.strategies.split(",")
    work = Path(args.keep or tempfile.mkdtemp(prefix="label-efficiency-"))
    work.mkdir(parents=True, exist_ok=True)
    pool = args.pool or str(work / "pool.db")
    if not Path(pool).exists():
        build_pool(pool, args.answers, args.ranking_size)
    if args.ceiling:
        learner_ceiling(pool, seeds)
        return

    from rlhf.preference_ensemble import FrozenTextEncoder
    from storage import open_db

    encoder = FrozenTextEncoder()
    results: dict[tuple[str, int, int], float] = {}
    for seed in seeds:
        source = open_db(pool, migrate=False)
        test = heldout_pairs(source, heldout_prompt_ids(source, seed))
        source.conn.close()
        for strategy in strategies:  # interleaved per seed: the machine's drift touches both alike
            path = one_run(pool, work, strategy, seed, args)
            db = open_db(str(path), migrate=False)
            for n in sizes:
                results[(strategy, seed, n)] = accuracy(encoder, first_rankings_pairs(db, n), test)
            db.conn.close()
            print("    " + "  ".join(f"{n}: {results[(strategy, seed, n)]:.3f}" for n in sizes)
                  + f"   ({len(test)} held-out pairs)", flush=True)

    print(f"\nHeld-out pairwise accuracy of the preference ensemble, by labels (rankings of {args.ranking_size}), "
          f"{args.annotators} annotators at {args.pace} s/label, seeds {args.seeds}")
    print("| strategy | " + " | ".join(f"{n} labels" for n in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    means = {}
    for strategy in strategies:
        cells = []
        for n in sizes:
            values = [results[(strategy, s, n)] for s in seeds]
            means[(strategy, n)] = statistics.mean(values)
            spread = f" ± {statistics.stdev(values):.3f}" if len(values) > 1 else ""
            cells.append(f"{means[(strategy, n)]:.3f}{spread}")
        print(f"| {strategy} | " + " | ".join(cells) + " |")
    if set(strategies) >= {"arrival", "uncertainty"}:
        target = means[("arrival", sizes[-1])]
        reached = [n for n in sizes if means[("uncertainty", n)] >= target]
        print(f"\narrival order at {sizes[-1]} labels: {target:.3f}; uncertainty selection reaches it at "
              f"{reached[0] if reached else 'none of the sizes'} labels"
              + (f" ({reached[0] / sizes[-1]:.2f}x the labels)" if reached else ""))


if __name__ == "__main__":
    main()
