"""`rlhf-studio eval` end to end through labeler.cli.main on a tiny model; bad input is one line and exit 2;
the README mentions every subcommand."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from labeler.cli import build_parser, main
from storage import open_db

README = Path(__file__).resolve().parents[2] / "README.md"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def heldout_db(tmp_path, tiny_model_dir):
    db_path = str(tmp_path / "studio.db")
    db = open_db(db_path)
    for i, text in enumerate(["The film was", "I watched it and", "A train prompt"]):
        db.execute("INSERT INTO prompts (project_id, text, text_hash, split) VALUES (1, ?, ?, ?)",
                   [text, f"h{i}", "train" if i == 2 else "test"])
    db.conn.close()
    return db_path


def test_eval_prints_metrics_and_answers_and_stores_them(capsys, heldout_db, tiny_model_dir, tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text("def words(prompts, answers):\n"
                                            "    return [len(a.split()) / 4 for a in answers]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, err = run(capsys, "eval", "--db", heldout_db, "--model", str(tiny_model_dir), "--samples", "2",
                         "--max-new-tokens", "3", "--reward", "my_rewards:words", "--examples", "2")
    assert code == 0, err
    assert "2 prompts (heldout) x 2 samples, 3 new tokens, measure: function my_rewards:words" in out
    header = next(line for line in out.splitlines() if line.startswith("model"))
    assert re.findall(r"score|win rate vs base|positive|KL|length|distinct-2", header)[:6] == [
        "score", "win rate vs base", "positive", "KL", "length", "distinct-2"]
    assert "The film was" in out and "I watched it and" in out and "A train prompt" not in out
    db = open_db(heldout_db)
    rows = db.execute("SELECT model, samples_json FROM evaluations").fetchall()
    assert len(rows) == 1 and rows[0][0] == str(tiny_model_dir)
    assert f"stored as evaluation #{db.execute('SELECT id FROM evaluations').fetchone()[0]}" in out


@pytest.mark.parametrize("args, words", [
    (["--model", "nope"], "field 'model': no model named 'nope'"),
    (["--model", "default", "--reward", "positivity"], "field 'reward': unknown reward 'positivity'"),
    (["--model", "default", "--measure", "rm:missing"], "field 'reward'"),
    (["--model", "default", "--reward", "rm:missing"], "field 'reward'"),
    (["--model", "default", "--prompts", "missing.jsonl"], "missing.jsonl: file not found"),
    (["--model", "default", "--samples", "0"], "field 'samples'"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, heldout_db, args, words):
    code, out, err = run(capsys, "eval", "--db", heldout_db, *args)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("rlhf-studio eval: error: ") and words in err, err


def test_a_bad_prompts_file_names_its_line(capsys, heldout_db, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "fine"}\n{"text": "no prompt"}\n', encoding="utf-8")
    code, _, err = run(capsys, "eval", "--db", heldout_db, "--model", "default", "--prompts", str(path))
    assert code == 2 and f"{path}, line 2, field 'prompt'" in err


def test_eval_has_help_for_every_flag():
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    parser = subparsers.choices["eval"]
    assert parser.description and next(c.help for c in subparsers._choices_actions if c.dest == "eval")
    assert all(action.help for action in parser._actions)


def test_readme_mentions_every_subcommand():
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    readme = README.read_text(encoding="utf-8")
    missing = [name for name in subparsers.choices if f"rlhf-studio {name}" not in readme]
    assert not missing, f"README.md does not mention: {missing}"


def test_eval_of_a_tuned_model_prints_the_verdict_in_words(capsys, heldout_db, tiny_model_dir, tmp_path, monkeypatch):
    """The same sentence as the run's page: here the 'tuned' model is its base's weights, so every answer ties."""
    from labeler.services.serving import models

    (tmp_path / "my_rewards.py").write_text("def words(prompts, answers):\n"
                                            "    return [len(a.split()) / 4 for a in answers]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    db = open_db(heldout_db)
    models.register_model(db, "tuned", str(tiny_model_dir), "policy", base_model=str(tiny_model_dir))
    db.conn.close()
    code, out, err = run(capsys, "eval", "--db", heldout_db, "--model", "tuned", "--samples", "2",
                         "--max-new-tokens", "3", "--reward", "my_rewards:words")
    assert code == 0, err
    assert ("tuned: The tuned model is not yet distinguishable from its base (it won 50% of the comparisons, 95% "
            "interval") in out
