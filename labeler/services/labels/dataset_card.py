"""The README.md card of an `export --format hf` folder: what its rows are, where they came from (label counts,
annotators, agreement), how they were filtered, and the split sizes. Written by the export into the folder it
replaces atomically; labeler/services/training/hub.py pushes the folder, card first. Its label counts join the label
tables with their items and prompts (a view, kept here).

Kept apart from the model cards (hub.py), which read stored evaluations: the export, which training's settings
import, must not import the evaluation service, which reads training's settings.
"""
from __future__ import annotations

import dataclasses

import sqlite_utils

from labeler.services.data.projects import get_project
from labeler.services.labels.quality import agreement
from rlhf.cards import dataset_card

COLUMNS = {
    "preferences": {"prompt": "the prompt (text, or a message list in conversational form)",
                    "chosen": "the answer the annotators preferred", "rejected": "the answer they ranked lower",
                    "source": "where the pair was judged: rank (the labelling queue), arena, evaluation (a run judged "
                              "by people), a run's stage (online-dpo, ppo), import, chat; rate for rating pairs",
                    "margin": "difference of mean ratings (rating pairs only)"},
    "ratings": {"prompt": "the prompt", "completion": "the answer", "score": "mean rating over annotators",
                "n": "number of ratings", "std": "population std of the ratings"},
    "unpaired": {"prompt": "the prompt", "completion": "the answer", "label": "score >= threshold (KTO's label)"},
}
AGREEMENT = {  # quality.agreement's keys, as a reader of the card would name them
    "ratings_alpha": "ratings: Krippendorff's alpha (ordinal)", "ratings_items": "ratings: items with 2+ raters",
    "rankings_pairwise": "rankings: pairwise agreement", "rankings_items": "rankings: items with 2+ rankers",
    "rankings_comparisons": "rankings: pairs compared"}
TRAINERS = {"preferences": "DPOTrainer or RewardTrainer", "ratings": "a regression reward model",
            "unpaired": "KTOTrainer"}
# The Hub's task_categories: preference and KTO rows train a text generator; mean ratings train a scorer.
TASKS = {"preferences": ["text-generation"], "ratings": ["text-classification"], "unpaired": ["text-generation"]}


def label_facts(db: sqlite_utils.Database, project: str) -> dict:
    """Labels behind a project's exports: counts per label kind, annotators, inter-annotator agreement."""
    proj = get_project(db, project)
    ratings, raters = db.execute(
        "SELECT COUNT(*), COUNT(DISTINCT r.user_id) FROM ratings r JOIN items i ON i.id = r.item_id"
        " WHERE i.project_id = ?", [proj.id]).fetchone()
    rankings, rankers = db.execute(
        "SELECT COUNT(*), COUNT(DISTINCT k.user_id) FROM rankings k JOIN prompts p ON p.id = k.prompt_id"
        " WHERE p.project_id = ?", [proj.id]).fetchone()
    annotators = db.execute(
        "SELECT COUNT(*) FROM (SELECT r.user_id FROM ratings r JOIN items i ON i.id = r.item_id WHERE i.project_id = ?"
        " UNION SELECT k.user_id FROM rankings k JOIN prompts p ON p.id = k.prompt_id"
        " WHERE p.project_id = ? AND k.user_id IS NOT NULL)", [proj.id, proj.id]).fetchone()[0]
    return {"project": proj.name, "likert scale": f"{proj.likert_min}-{proj.likert_max}", "ratings": ratings,
            "raters": raters, "rankings (incl. pairwise votes)": rankings, "rankers": rankers,
            "annotators": annotators, **{AGREEMENT[k]: v for k, v in agreement(db, project).items() if k in AGREEMENT}}


def export_card(db: sqlite_utils.Database, project: str, kind: str, options, splits: dict[str, int]) -> str:
    """The README.md of an export folder: what the rows are, where they came from, how they were filtered."""
    defaults = type(options)()
    filters = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)
               if f.name != "license" and getattr(options, f.name) != getattr(defaults, f.name)}
    summary = (f"{kind.capitalize()} exported by RLHF Studio from project `{project}`, in TRL's column format "
               f"(for {TRAINERS[kind]}). Splits are made by prompt: no prompt is in both.")
    columns = dict(COLUMNS[kind])
    if kind == "preferences" and not options.include_rating_pairs:
        columns.pop("margin")
    return dataset_card(f"{project}: {kind}", summary, columns, splits, tags=[kind], task_categories=TASKS[kind],
                        license=options.license, sections={
                            "Labels": label_facts(db, project),
                            "Filters": filters or "None: every label of the project (the export defaults).",
                        })
