"""Guidelines per label kind (issue 14 item 11: Rank showed the rating text)."""
from __future__ import annotations

import storage.db
from labeler.services.data.projects import DEFAULT_GUIDELINES, create_project, get_project, update_project
from storage import migrate, open_db
from storage.migrations import MIGRATIONS


def test_each_kind_has_its_own_text_or_its_default(db):
    project = get_project(db)
    assert (project.guidelines, project.ranking_guidelines) == ("", "")
    assert project.guidelines_for("rating") == DEFAULT_GUIDELINES["rating"]
    assert project.guidelines_for("ranking") == DEFAULT_GUIDELINES["ranking"]
    project = update_project(db, "default", ranking_guidelines="Best first.")
    assert (project.guidelines_for("rating"), project.guidelines_for("ranking")) == (DEFAULT_GUIDELINES["rating"], "Best first.")
    # Whitespace only is no text of one's own; the default sent back unchanged is stored as "" (follow the default).
    project = update_project(db, "default", guidelines="  \n", ranking_guidelines=DEFAULT_GUIDELINES["ranking"] + "\n")
    assert (project.guidelines, project.ranking_guidelines) == ("  \n", "")
    assert project.guidelines_for("rating") == DEFAULT_GUIDELINES["rating"]
    # A new project: one text for both kinds unless the ranking one is given.
    assert create_project(db, "both", guidelines="Same.").guidelines_for("ranking") == "Same."
    assert create_project(db, "two", guidelines="R.", ranking_guidelines="K.").guidelines_for("ranking") == "K."


def test_the_migration_keeps_a_projects_own_text_beside_rankings(db_path, monkeypatch):
    # A database from before the migration, whose project had its own guidelines (then shown in Rate and Rank).
    index = [m[0] for m in MIGRATIONS].index("projects ranking guidelines")
    before = MIGRATIONS[:index]
    monkeypatch.setattr(storage.db, "MIGRATIONS", before)
    db = open_db(db_path)
    db.execute("INSERT INTO projects (name, guidelines) VALUES ('own', 'Be kind.')")
    db.conn.commit()
    monkeypatch.setattr(storage.db, "MIGRATIONS", MIGRATIONS)
    migrate(db)
    assert get_project(db, "own").guidelines_for("ranking") == "Be kind."
    assert get_project(db).guidelines_for("ranking") == DEFAULT_GUIDELINES["ranking"]
    db.conn.close()
