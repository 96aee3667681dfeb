"""Projects: a set of prompts with its own Likert scale, overlap and guidelines (Argilla's "dataset").

Projects are addressed by name everywhere (CLI --project, UI settings); the id is storage detail.
"""
from __future__ import annotations

from dataclasses import dataclass

import sqlite_utils

from labeler.services.errors import InputError
from storage import write_transaction

# Columns that update_project may change; the name is the key and stays fixed.
EDITABLE_FIELDS = ("likert_min", "likert_max", "overlap", "guidelines")


@dataclass(frozen=True)
class Project:
    id: int
    name: str
    likert_min: int
    likert_max: int
    overlap: int
    guidelines: str

    @property
    def midpoint(self) -> float:
        return (self.likert_min + self.likert_max) / 2


def _from_row(row) -> Project:
    return Project(
        id=row["id"],
        name=row["name"],
        likert_min=row["likert_min"],
        likert_max=row["likert_max"],
        overlap=row["overlap"],
        guidelines=row["guidelines"],
    )


def _select(db: sqlite_utils.Database, name: str):
    return db.execute(
        "SELECT id, name, likert_min, likert_max, overlap, guidelines FROM projects WHERE name = ?", [name]
    ).fetchone()


def get_project(db: sqlite_utils.Database, name: str = "default") -> Project:
    row = _select(db, name)
    if row is None:
        known = ", ".join(p.name for p in list_projects(db)) or "none"
        raise InputError(f"unknown project '{name}' (known: {known})", field="project")
    return _from_row(row)


def list_projects(db: sqlite_utils.Database) -> list[Project]:
    rows = db.execute("SELECT id, name, likert_min, likert_max, overlap, guidelines FROM projects ORDER BY id")
    return [_from_row(row) for row in rows.fetchall()]


def _validate(name: str, likert_min: int, likert_max: int, overlap: int, guidelines: str) -> None:
    # Checked here as well as by the table's CHECKs so the user sees which field is wrong, not an IntegrityError.
    if not isinstance(name, str) or not name.strip():
        raise InputError("a project needs a non-empty name", field="name")
    for field, value in (("likert_min", likert_min), ("likert_max", likert_max), ("overlap", overlap)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"must be an integer, got {value!r}", field=field)
    if likert_max <= likert_min:
        raise InputError(f"likert_max ({likert_max}) must be greater than likert_min ({likert_min})", field="likert_max")
    if overlap < 1:
        raise InputError(f"overlap must be at least 1 (annotators per item), got {overlap}", field="overlap")
    if not isinstance(guidelines, str):
        raise InputError("guidelines must be text (markdown)", field="guidelines")


def create_project(
    db: sqlite_utils.Database,
    name: str,
    likert_min: int = 1,
    likert_max: int = 7,
    overlap: int = 1,
    guidelines: str = "",
) -> Project:
    _validate(name, likert_min, likert_max, overlap, guidelines)
    name = name.strip()
    with write_transaction(db):
        if _select(db, name) is not None:
            raise InputError(f"project '{name}' already exists", field="name")
        db.execute(
            "INSERT INTO projects (name, likert_min, likert_max, overlap, guidelines) VALUES (?, ?, ?, ?, ?)",
            [name, likert_min, likert_max, overlap, guidelines],
        )
    return get_project(db, name)


def update_project(db: sqlite_utils.Database, name: str, **fields) -> Project:
    """Change likert_min, likert_max, overlap and/or guidelines; fields left out keep their value."""
    unknown = sorted(set(fields) - set(EDITABLE_FIELDS))
    if unknown:
        raise InputError(f"cannot change {', '.join(unknown)} (editable: {', '.join(EDITABLE_FIELDS)})", field=unknown[0])
    fields = {key: value for key, value in fields.items() if value is not None}
    with write_transaction(db):
        current = get_project(db, name)
        merged = {key: fields.get(key, getattr(current, key)) for key in EDITABLE_FIELDS}
        _validate(name, **merged)
        # Narrowing the scale under existing ratings would leave scores the new scale cannot hold.
        low, high = db.execute(
            "SELECT MIN(r.score), MAX(r.score) FROM ratings r JOIN items i ON i.id = r.item_id WHERE i.project_id = ?",
            [current.id],
        ).fetchone()
        if low is not None and (low < merged["likert_min"] or high > merged["likert_max"]):
            field = "likert_min" if low < merged["likert_min"] else "likert_max"
            raise InputError(f"existing ratings range from {low:g} to {high:g}: the scale must still include them", field=field)
        if fields:
            assignments = ", ".join(f"{key} = ?" for key in fields)
            db.execute(f"UPDATE projects SET {assignments} WHERE id = ?", [*fields.values(), current.id])
    return get_project(db, name)
