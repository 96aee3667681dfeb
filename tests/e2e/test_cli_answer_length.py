"""Issue 45 item 3 from the command line: a new chat project's answer length fitted from its base model's answers
when its first prompts come in (`projects create --prompts`, `prompts import`), said where it came from, skippable
and never fatal. The tiny random model stands in for the base (it never ends an answer: the cap is the length)."""
from __future__ import annotations

import pytest

from labeler.cli import main
from labeler.commands import data as data_commands
from labeler.services.data import projects
from labeler.services.serving.answer_length import FitOutcome
from storage import open_db


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def questions(tmp_path):
    path = tmp_path / "q.txt"
    path.write_text("".join(f"How do I export invoice {i} as a PDF?\n" for i in range(40)), encoding="utf-8")
    return path


@pytest.fixture
def small_fit(monkeypatch):
    # 4 answers of up to 32 tokens: the plumbing, not a minute of sampling.
    monkeypatch.setattr(data_commands, "FIT_SAMPLE", 4)
    monkeypatch.setattr(data_commands, "AUTO_FIT_CAP", 32)  # the import's fit
    monkeypatch.setattr(data_commands, "FIT_CAP", 32)


def _project(db: str, name: str):
    database = open_db(db)
    try:
        return projects.get_project(database, name)
    finally:
        database.conn.close()


def test_projects_create_with_prompts_fits_the_answer_length(capsys, tmp_path, questions, tiny_model_dir, small_fit):
    db = str(tmp_path / "s.db")
    code, out, err = run(capsys, "projects", "create", "support", "--prompts", str(questions), "--fit-model",
                         str(tiny_model_dir), "--db", db, "--create-db")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("created project support:") and "answers of 128 tokens (the default for chat" in lines[0]
    assert lines[1] == "40 prompts added to project 'support', 0 duplicates skipped"
    assert lines[2].startswith("20 of them held out for evaluation; the project has 20 training and 20 held-out")
    assert lines[3].startswith(f"fitting the answer length: {tiny_model_dir} answers up to 4 of the prompts")
    origin = "fitted from 4 of the base model's answers: 0% end within 32 tokens, the cap (the longer ones are cut)"
    assert lines[4] == f"answer length 32 tokens, {origin}"
    project = _project(db, "support")
    assert (project.answer_tokens, project.answer_tokens_origin) == (32, origin)
    # `projects list` says where it came from; a second import does not fit again (no model named, none loaded).
    assert f"answers of 32 tokens ({origin})" in run(capsys, "projects", "list", "--db", db)[1]
    more = tmp_path / "more.txt"
    more.write_text("Where is my receipt?\n", encoding="utf-8")
    code, out, _ = run(capsys, "prompts", "import", str(more), "--project", "support", "--fit-model", "/nowhere",
                       "--db", db)
    assert code == 0 and "answer length" not in out and _project(db, "support").answer_tokens == 32


def test_the_fit_is_skippable_and_never_fatal(capsys, tmp_path, questions, small_fit):
    db = str(tmp_path / "s.db")
    code, out, _ = run(capsys, "prompts", "import", str(questions), "--no-fit-length", "--db", db, "--create-db")
    assert code == 0 and "answer length" not in out
    assert _project(db, "default").answer_tokens_origin == ""  # still the default: the next import fits
    missing = tmp_path / "no-model"
    more = tmp_path / "more.txt"
    more.write_text("Where is my receipt?\n", encoding="utf-8")
    code, out, err = run(capsys, "prompts", "import", str(more), "--fit-model", str(missing), "--db", db)
    assert code == 0, err  # the prompts are in: the fit's failure is said, not fatal
    assert "1 prompts added" in out
    assert "answer length: kept 128 tokens (the default for chat projects): the base model's answers could not be " \
           "sampled (" in out and str(missing) in out
    project = _project(db, "default")
    assert (project.answer_tokens, project.answer_tokens_origin) == (128, "")


def test_a_length_given_at_create_is_not_fitted_and_a_bad_file_creates_nothing(capsys, tmp_path, questions):
    db = str(tmp_path / "s.db")
    code, out, _ = run(capsys, "projects", "create", "support", "--answer-tokens", "200", "--prompts", str(questions),
                       "--fit-model", "/nowhere", "--db", db, "--create-db")
    assert code == 0 and "answers of 200 tokens (set by hand)" in out and "fitting" not in out
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"prompt": 7}\n', encoding="utf-8")
    code, _, err = run(capsys, "projects", "create", "other", "--prompts", str(bad), "--db", db)
    assert code == 2 and "line 2" in err and "prompt" in err
    database = open_db(db)
    assert [p.name for p in projects.list_projects(database)] == ["default", "support"]
    database.conn.close()


def test_a_length_typed_with_projects_set_is_kept_even_at_the_defaults_value(capsys, tmp_path, questions):
    db = str(tmp_path / "s.db")
    code, out, _ = run(capsys, "projects", "set", "default", "--answer-tokens", "128", "--db", db, "--create-db")
    assert code == 0 and "answers of 128 tokens (set by hand)" in out
    code, out, _ = run(capsys, "prompts", "import", str(questions), "--fit-model", "/nowhere", "--db", db)
    assert code == 0 and "answer length" not in out  # typed: no fit, no model loaded


def test_the_fit_at_import_caps_lower_than_an_asked_for_fit(capsys, tmp_path, questions, monkeypatch):
    """The import's own fit stops at AUTO_FIT_CAP (256: minutes, not a quarter hour, on 2 cores); `fit-length` at
    FIT_CAP (512) unless --cap says otherwise."""
    caps = []
    monkeypatch.setattr(data_commands, "fit_new_project",
                        lambda db, project, loader, **options: caps.append(options["cap"]) or FitOutcome(""))
    db = str(tmp_path / "c.db")
    assert run(capsys, "prompts", "import", str(questions), "--db", db, "--create-db")[0] == 0
    assert caps == [data_commands.AUTO_FIT_CAP] == [256] and data_commands.FIT_CAP == 512
