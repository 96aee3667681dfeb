"""The Data tab's summary line: the project's counts and what to do next."""
from __future__ import annotations

from labeler.services.data.projects import project_counts
from labeler.services.data.prompts import heldout_status, retired_count, split_counts


def data_summary(db, project: str) -> str:
    """Counts an admin needs to decide what to do next (import, generate, or label)."""
    counts = project_counts(db, project)
    prompts, responses, ratings, rankings = (counts[k] for k in ("prompts", "responses", "ratings", "rankings"))
    splits = split_counts(db, project)
    hint = ""
    if prompts == 0:
        hint = "\n\n➡ No prompts yet: upload a file or import the shipped movie-review prompts."
    elif responses == 0:
        hint = "\n\n➡ No answers yet: generate responses below so annotators have work."
    if prompts and not splits["test"]:
        hint += ("\n\n⚠ No held-out prompts: finished runs cannot be evaluated. Set a held-out share below (the "
                 "project needs 20 prompts), or upload a file of evaluation prompts.")
    retired = retired_count(db, project)
    retired = f", **{retired}** retired" if retired else ""
    status = heldout_status(db, project)
    status = f"\n\nHeld out: {status}." if status else ""
    return (
        f"Project **{project}**: **{prompts}** prompts (**{splits['train']}** to train on, **{splits['test']}** "
        f"held out for evaluation{retired}) · **{responses}** answers · **{ratings}** ratings · **{rankings}** rankings"
        f"{status}{hint}"
    )
