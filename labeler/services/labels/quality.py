"""Quality control: per-annotator statistics, gold accuracy and inter-annotator agreement.

Ratings agree when Krippendorff's alpha (ordinal metric, the `krippendorff` package) is high: it handles any
number of coders per item and missing values, and corrects for the agreement expected by chance, so a lazy
annotator who always answers 4 does not look reliable. Likert points are ordered but not equally spaced (the
step from "bad" to "fair" need not equal the one from "good" to "very good"), which is what the ordinal metric
assumes and the interval metric does not. Rankings agree pairwise: for every pair of responses of an
item ranked by two people, do they order it the same way (a tie is its own answer)?

Its reads are views: labels joined with their items (gold answers) and annotators, one query per statistic.
"""
from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Literal

import krippendorff
import numpy as np
import sqlite_utils

from labeler.services.data import label_kinds
from labeler.services.data.projects import get_project


def krippendorff_alpha(units: Sequence[Sequence[float]],
                       level: Literal["nominal", "ordinal", "interval", "ratio"] = "ordinal") -> float | None:
    """Krippendorff's alpha of `units`, at the given level of measurement (ordinal: Likert ratings).

    `units` holds, per item, the values the coders gave it (any number of coders, missing ones simply left
    out); units with fewer than two values cannot be paired and are ignored. Returns None when no unit has two
    values or when all of them are equal (with no variation, agreement cannot be told from chance), where
    `krippendorff.alpha` raises.
    """
    pairable = [[float(v) for v in unit] for unit in units if len(unit) >= 2]
    domain = sorted({v for unit in pairable for v in unit})  # ordered: the ordinal metric counts values between
    if len(domain) < 2:
        return None
    index = {value: i for i, value in enumerate(domain)}
    counts = np.zeros((len(pairable), len(domain)))  # (units, values): how many coders gave each value
    for row, unit in enumerate(pairable):
        for value in unit:
            counts[row, index[value]] += 1
    return float(krippendorff.alpha(value_counts=counts, value_domain=domain, level_of_measurement=level))


Order = Sequence[Sequence[int]]  # best to worst, ties grouped


def pairwise_agreement(rankings_per_item: Sequence[tuple[Sequence[int], Sequence[Order]]]) -> tuple[float | None, int]:
    """Fraction of (response pair, annotator pair) comparisons that order the pair the same way.

    Each entry is (response ids of the item, the rankings it got). For every pair of responses (a, b)
    and every pair of annotators, the two agree when both put a above b, both put b above a, or both
    tie them. Returns (agreement or None when nothing was compared, number of comparisons).
    """
    agree = total = 0
    for response_ids, orders in rankings_per_item:
        for a, b in label_kinds.all_pairs(response_ids):
            relations = [label_kinds.pair_relation(order, a, b) for order in orders]
            for i in range(len(relations)):
                for j in range(i + 1, len(relations)):
                    total += 1
                    agree += relations[i] == relations[j]
    return (agree / total if total else None), total


def _ratings(db: sqlite_utils.Database, project_id: int) -> list:
    return db.execute(
        """SELECT r.item_id, r.score, r.seconds, u.username, i.gold_json FROM ratings r
           JOIN items i ON i.id = r.item_id JOIN users u ON u.id = r.user_id
           WHERE i.project_id = ? AND i.kind = 'rating' ORDER BY r.item_id, r.id""",
        [project_id],
    ).fetchall()


def _rankings(db: sqlite_utils.Database, project_id: int) -> list:
    # Annotators' rankings only: imported preferences (no user) and arena votes are not annotation work.
    return db.execute(
        """SELECT r.item_id, r.order_json, r.seconds, u.username, i.gold_json, i.response_ids_json FROM rankings r
           JOIN items i ON i.id = r.item_id JOIN users u ON u.id = r.user_id
           WHERE i.project_id = ? AND i.kind = 'ranking' AND r.source = 'annotator' ORDER BY r.item_id, r.id""",
        [project_id],
    ).fetchall()


def annotator_stats(db: sqlite_utils.Database, project: str = "default") -> list[dict]:
    """One row per annotator who holds or held work in the project, sorted by username.

    gold_accuracy: the fraction of their labels on gold items that match the gold answer
    (label_kinds.rating_matches_gold: within one point; ranking_matches_gold: same best group), None
    without gold labels. mean_seconds: over their labels that recorded a time.
    """
    proj = get_project(db, project)
    stats: dict[str, dict] = defaultdict(
        lambda: {"ratings": 0, "rankings": 0, "skipped": 0, "gold_items": 0, "gold_correct": 0, "seconds": []}
    )
    for row in db.execute(
        """SELECT u.username, SUM(a.status = 'skipped') FROM assignments a
           JOIN items i ON i.id = a.item_id JOIN users u ON u.id = a.user_id
           WHERE i.project_id = ? GROUP BY u.username""",
        [proj.id],
    ).fetchall():
        stats[row[0]]["skipped"] = row[1]
    for kind, rows in (("ratings", _ratings(db, proj.id)), ("rankings", _rankings(db, proj.id))):
        for row in rows:
            entry = stats[row["username"]]
            entry[kind] += 1
            if row["seconds"] is not None:
                entry["seconds"].append(row["seconds"])
            if row["gold_json"] is not None:
                gold = json.loads(row["gold_json"])
                entry["gold_items"] += 1
                if kind == "ratings":
                    entry["gold_correct"] += label_kinds.rating_matches_gold(row["score"], gold["score"])
                else:
                    order = json.loads(row["order_json"])
                    entry["gold_correct"] += label_kinds.ranking_matches_gold(order, gold["order"])
    result = []
    for username in sorted(stats):
        entry = stats[username]
        seconds = entry.pop("seconds")
        correct = entry.pop("gold_correct")
        result.append(
            {
                "username": username,
                **entry,
                "gold_accuracy": correct / entry["gold_items"] if entry["gold_items"] else None,
                "mean_seconds": sum(seconds) / len(seconds) if seconds else None,
            }
        )
    return result


def agreement(db: sqlite_utils.Database, project: str = "default") -> dict:
    """Inter-annotator agreement over the items that at least two annotators labelled.

    ratings_alpha: Krippendorff's alpha (ordinal) on ratings_items items; rankings_pairwise: pairwise
    agreement over rankings_comparisons comparisons on rankings_items items. None where not computable.
    """
    proj = get_project(db, project)
    scores: dict[int, list[float]] = defaultdict(list)
    for row in _ratings(db, proj.id):
        scores[row["item_id"]].append(row["score"])
    units = [values for values in scores.values() if len(values) >= 2]

    orders: dict[int, list] = defaultdict(list)
    response_ids: dict[int, list[int]] = {}
    for row in _rankings(db, proj.id):
        orders[row["item_id"]].append(json.loads(row["order_json"]))
        response_ids[row["item_id"]] = json.loads(row["response_ids_json"])
    ranked = [(response_ids[item], item_orders) for item, item_orders in orders.items() if len(item_orders) >= 2]
    pairwise, comparisons = pairwise_agreement(ranked)
    return {
        "ratings_alpha": krippendorff_alpha(units, "ordinal"),
        "ratings_items": len(units),
        "rankings_pairwise": pairwise,
        "rankings_items": len(ranked),
        "rankings_comparisons": comparisons,
    }
