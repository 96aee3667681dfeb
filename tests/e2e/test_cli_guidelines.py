"""`projects create/set --guidelines/--ranking-guidelines`: one text per label kind (issue 14 item 11)."""
from __future__ import annotations

from labeler.cli import main
from labeler.services.data.projects import get_project
from storage import open_db


def test_guidelines_flags_set_both_kinds_or_the_ranking_text_apart(capsys, tmp_path):
    db = str(tmp_path / "s.db")
    both, ranking = tmp_path / "both.md", tmp_path / "ranking.md"
    both.write_text("Be kind.\n", encoding="utf-8")
    ranking.write_text("Best first.\n", encoding="utf-8")
    assert main(["projects", "create", "imdb", "--db", db, "--create-db", "--guidelines", str(both)]) == 0
    project = get_project(open_db(db), "imdb")
    assert (project.guidelines, project.ranking_guidelines) == ("Be kind.\n", "Be kind.\n")
    assert main(["projects", "set", "imdb", "--db", db, "--ranking-guidelines", str(ranking)]) == 0
    project = get_project(open_db(db), "imdb")
    assert (project.guidelines, project.ranking_guidelines) == ("Be kind.\n", "Best first.\n")
    assert main(["projects", "set", "imdb", "--db", db, "--guidelines", str(ranking)]) == 0
    project = get_project(open_db(db), "imdb")
    assert (project.guidelines, project.ranking_guidelines) == ("Best first.\n", "Best first.\n")
    capsys.readouterr()
