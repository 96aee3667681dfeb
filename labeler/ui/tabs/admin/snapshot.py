"""What the Admin tab shows from the database, read again after every change: the accounts, the project's
settings, the annotators' quality and agreement, and the model registry (`snapshot`, in SHOWN's order)."""
from __future__ import annotations

import gradio as gr

from labeler.services.data import accounts
from labeler.services.evals import measures
from labeler.services.serving import models
from labeler.services.labels import quality
from labeler.services.data.projects import get_project

USER_HEADERS = ["username", "role", "active"]
MODEL_HEADERS = ["name", "kind", "base_model", "run_id", "created_at"]
# The registry table's headers, in words (MODEL_HEADERS are its fields: base_model, run_id, created_at showed).
MODEL_TITLES = ["Name", "Kind", "Base model", "Run", "Registered"]
STATS_COLUMNS = ["username", "ratings", "rankings", "skipped", "gold_items", "gold_accuracy", "mean_seconds"]
# The quality table's headers, in words (field names wrapped mid-word: "gold_accura / cy").
STATS_HEADERS = ["Annotator", "Ratings", "Rankings", "Skipped", "Gold items", "Gold accuracy", "Seconds per label"]
# The widgets `snapshot` fills, by the name each part gives them; the tab lists them in this order.
SHOWN = ("users", "who", "likert_min", "likert_max", "overlap", "guidelines", "ranking_guidelines", "stats",
         "agreement", "models_table", "model_base", "prompt_format", "selection", "answer_tokens", "measure")


def users_table(db) -> list[list]:
    return [[u.username, u.role, "yes" if u.active else "no"] for u in accounts.list_users(db)]


def stats_table(db, project: str) -> list[list]:
    rows = []
    for stat in quality.annotator_stats(db, project):
        row = []
        for column in STATS_COLUMNS:
            value = stat.get(column)
            row.append(round(value, 3) if isinstance(value, float) else value)
        rows.append(row)
    return rows


def agreement_markdown(db, project: str) -> str:
    result = quality.agreement(db, project)

    def fmt(value) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    return (
        f"**Ratings**: Krippendorff's alpha (ordinal) = **{fmt(result.get('ratings_alpha'))}** over "
        f"{result.get('ratings_items', 0)} items rated by 2+ people.  \n"
        f"**Rankings**: pairwise agreement = **{fmt(result.get('rankings_pairwise'))}** over "
        f"{result.get('rankings_comparisons', 0)} comparisons on {result.get('rankings_items', 0)} items."
    )


def models_outputs(db) -> tuple[list[list], dict]:
    """The registry table and the base-model choices."""
    listed = models.list_models(db)
    table = [[readable_time(m[h]) if h == "created_at" else (m[h] if m[h] is not None else "") for h in MODEL_HEADERS]
             for m in listed]
    return table, gr.update(choices=["", *[m["name"] for m in listed if m["kind"] != "reward"]])


def readable_time(stamp: str | None) -> str:
    """A stored UTC timestamp ('2026-12-06T10:33:03.123Z') as a person reads it: '2026-12-06 10:33 UTC'."""
    if not stamp:
        return ""
    return f"{stamp[:10]} {stamp[11:16]} UTC" if len(stamp) >= 16 and stamp[10] == "T" else stamp


def snapshot(db, project_name: str) -> tuple:
    """One value per SHOWN widget."""
    project = get_project(db, project_name)
    names = [row[0] for row in users_table(db)]
    return (
        users_table(db), gr.update(choices=names), project.likert_min, project.likert_max, project.overlap,
        project.guidelines_for("rating"), project.guidelines_for("ranking"),
        stats_table(db, project_name), agreement_markdown(db, project_name),
        *models_outputs(db), project.prompt_format, project.selection, project.answer_tokens,
        gr.update(choices=measure_choices(db, project_name), value=project.measure,
                  info=f"Judged now by: {measures.resolve(db, project_name).words}. {MEASURE_INFO}"),
    )


MEASURE_INFO = "module:function from the command line: rlhf-studio projects set --measure"


def measure_choices(db, project: str | None = None) -> list[tuple[str, str]]:
    """The measures an admin can pick: the default (blank; in `project`, what it resolves to now and why, so the
    form shows what will run), each reward model, VADER, people."""
    rewards = [m["name"] for m in models.list_models(db, kind="reward")]
    blank = (measures.default(db, project).words if project is not None else f"default: {measures.DEFAULT_WORDS}")
    return [(blank, ""), *[(f"reward model {n}", f"rm:{n}") for n in rewards],
            ("VADER sentiment of the answer", "vader"), ("people's blind comparisons", "people")]
