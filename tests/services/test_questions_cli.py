"""`rlhf-studio questions`: add, list, retire and export a project's criteria and flags from the shell."""
import json

from labeling_helpers import add_prompt, make_users

from labeler.cli import main
from labeler.services.data import labeling, projects
from labeler.services.labels import questions
from labeler.services.labels.questions import ItemAnswers
from storage import open_db


def test_questions_from_the_command_line(db_path, tmp_path, capsys):
    db = open_db(db_path)
    make_users(db, "alice")
    (response,) = add_prompt(db, "How do I reset my password?", 1)
    db.conn.close()
    base = ["--db", str(db_path)]
    assert main(["questions", "add", "safe:1-3:Could this answer hurt anyone?", *base]) == 0
    assert main(["questions", "add", "spam", "--flag", *base]) == 0
    assert main(["questions", "add", "safe:0-9", *base]) == 2  # the name is taken: one line, nothing written
    assert "already has a question named 'safe'" in capsys.readouterr().err
    capsys.readouterr()
    assert main(["questions", "list", *base]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "criterion overall 1-7", "criterion safe 1-3: Could this answer hurt anyone?", "flag spam"]

    db = open_db(db_path)
    labeling.create_items(db, "default", kinds=("rating",))
    item = labeling.next_item(db, "default", "alice", "rating")
    labeling.submit_rating(db, "default", "alice", item.item_id, 5)
    questions.submit_answers(db, "default", "alice", item.item_id, response,
                             ItemAnswers(scores={"safe": 3}, flags=["spam"], correction="Use the reset link."))
    db.conn.close()

    out = tmp_path / "corrections.jsonl"
    assert main(["questions", "export", "--rows", "corrections-preferences", "--out", str(out), *base]) == 0
    assert [json.loads(line) for line in out.read_text().splitlines()] == [{
        "prompt": "How do I reset my password?", "chosen": "Use the reset link.",
        "rejected": "How do I reset my password? / answer 0"}]
    assert main(["questions", "export", "--rows", "criterion-ratings", "--out", str(out), *base]) == 2
    assert "name one with --criterion" in capsys.readouterr().err
    assert main(["questions", "retire", "spam", *base]) == 0
    assert main(["questions", "export", "--rows", "flagged-kto", "--out", str(out), *base]) == 0  # kept when retired
    assert json.loads(out.read_text())["label"] is False


def test_projects_create_with_criteria_and_flags(db_path, capsys):
    base = ["--db", str(db_path), "--create-db"]
    assert main(["projects", "create", "support", "--criterion", "helpful:1-5:Does it answer?",
                 "--criterion", "safe:0-2", "--flag", "spam", *base]) == 0
    assert "criterion helpful, criterion safe, flag spam" in capsys.readouterr().out
    # A bad criterion (scale 3-3) writes neither the project nor any question.
    assert main(["projects", "create", "broken", "--criterion", "ok", "--criterion", "bad:3-3", *base]) == 2
    assert "must be above its bottom" in capsys.readouterr().err
    assert main(["projects", "create", "twice", "--criterion", "a", "--flag", "a", *base]) == 2
    db = open_db(db_path)
    assert [p.name for p in projects.list_projects(db)] == [
        "default", "support"]
    assert [(q.name, q.kind) for q in questions.list_questions(db, "support")] == [
        ("helpful", "criterion"), ("safe", "criterion"), ("spam", "flag")]
    db.conn.close()


def test_projects_fit_length(db_path, tiny_model_dir, capsys):
    # A random tiny model never ends its answers: nothing fits below the cap, so the cap is the length.
    db = open_db(db_path)
    add_prompt(db, "How do I reset my password?", 0)
    add_prompt(db, "Where is my invoice?", 0)
    db.conn.close()
    assert main(["projects", "fit-length", "default", "--model", str(tiny_model_dir), "--sample", "2", "--cap", "24",
                 "--db", str(db_path)]) == 0
    assert "answer length 24 tokens: 0% of 2 answers end within it" in capsys.readouterr().out
    db = open_db(db_path)
    assert projects.get_project(db).answer_tokens == 24
    db.conn.close()
