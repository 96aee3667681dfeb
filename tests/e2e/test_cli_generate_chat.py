"""The CLI: generate (settings flags from GenerationSettings), models list/add, terminal chat."""
from __future__ import annotations

import io
import json

from labeler.cli import build_parser, main
from labeler.commands.chat import run_chat
from rlhf.configs import GenerationSettings


def _prepare(db_path, tiny_model_dir):
    from labeler.services.data import prompts
    from storage import open_db

    db = open_db(db_path)
    prompts.add_prompts(db, ["One", "Two"])
    db.conn.close()
    assert main(["models", "add", "tiny", str(tiny_model_dir), "--kind", "policy", "--db", db_path]) == 0


def test_generate_command(db_path, tiny_model_dir, capsys):
    _prepare(db_path, tiny_model_dir)
    code = main(["generate", "--db", db_path, "--model", "tiny", "--n", "2", "--max-new-tokens", "3",
                 "--temperature", "0.5", "--no-do-sample", "--seed", "4", "--batch-size", "3"])
    assert code == 0
    assert "generated 4 answers with tiny" in capsys.readouterr().out
    from storage import open_db

    db = open_db(db_path)
    settings = [json.loads(r[0]) for r in db.execute("SELECT settings_json FROM responses")]
    assert len(settings) == 4
    assert {(s["max_new_tokens"], s["temperature"], s["do_sample"]) for s in settings} == {(3, 0.5, False)}
    assert main(["generate", "--db", db_path, "--model", "tiny", "--n", "2", "--max-new-tokens", "3"]) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_generate_bad_flags_are_one_line_errors(db_path, tiny_model_dir, capsys):
    _prepare(db_path, tiny_model_dir)
    capsys.readouterr()
    assert main(["generate", "--db", db_path, "--model", "tiny", "--temperature", "0"]) == 2
    err = capsys.readouterr().err
    assert "temperature" in err and err.count("\n") == 1
    assert main(["generate", "--db", db_path, "--model", "tiny", "--top-k", "many"]) == 2
    assert "--top-k" in capsys.readouterr().err
    assert main(["generate", "--db", db_path, "--model", "nope"]) == 2


def test_every_settings_field_is_a_flag_with_help():
    help_text = build_parser()._subparsers._group_actions[0].choices["generate"].format_help()
    for name in GenerationSettings.__dataclass_fields__:
        assert "--" + name.replace("_", "-") in help_text


def test_models_list(db_path, tiny_model_dir, capsys):
    _prepare(db_path, tiny_model_dir)
    capsys.readouterr()
    assert main(["models", "list", "--db", db_path, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["name"], r["kind"]) for r in rows] == [("default", "base"), ("tiny", "policy")]
    assert main(["models", "add", "tiny", str(tiny_model_dir), "--db", db_path]) == 2
    assert "already registered" in capsys.readouterr().err


def test_terminal_chat_streams_and_keeps_history(db_path, tiny_model_dir):
    _prepare(db_path, tiny_model_dir)
    args = build_parser().parse_args(["chat", "--db", db_path, "--model", "tiny", "--max-new-tokens", "4", "--no-do-sample"])
    out = io.StringIO()
    assert run_chat(args, stdin=io.StringIO("Hello\n/reset\nHello\n"), stdout=out) == 0
    text = out.getvalue()
    answers = [line.split("tiny> ", 1)[1] for line in text.splitlines() if "tiny> " in line]
    # Greedy and the same one-turn history after /reset: the same answer twice.
    assert len(answers) == 2 and answers[0] == answers[1]
    assert "(conversation cleared)" in text
