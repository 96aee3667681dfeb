"""The data and users commands end to end through labeler.cli.main (and once through a real subprocess)."""
import argparse
import json
import subprocess
import sys

import pytest

from labeler.cli import build_parser, main
from storage import open_db

MY_GROUPS = ("prompts", "labels", "export", "backup", "projects", "users")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_data_subcommand_has_help():
    def leaves(parser, path):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield path, parser
            return
        helps = {choice.dest: choice.help for choice in subs[0]._choices_actions}
        for name, child in subs[0].choices.items():
            assert helps.get(name), f"{' '.join(path + [name])} has no help"
            yield from leaves(child, path + [name])

    found = [(path, parser) for path, parser in leaves(build_parser(), []) if path[0] in MY_GROUPS]
    assert len(found) >= 14
    for path, parser in found:
        assert parser.description, f"{' '.join(path)} has no description"
        for action in parser._actions:
            assert action.help, f"{' '.join(path)} {action.dest} has no help"


def test_prompts_labels_export_backup(capsys, tmp_path):
    db = str(tmp_path / "s.db")
    prompts = tmp_path / "p.txt"
    prompts.write_text("one\ntwo\none\n", encoding="utf-8")
    assert run(capsys, "prompts", "import", str(prompts), "--db", db, "--create-db", "--no-fit-length")[:2] == (
        0, "2 prompts added to project 'default', 1 duplicates skipped\n0 of them held out for evaluation; the "
           "project has 2 training and 0 held-out prompts (the project has 2 prompts: 20 or more are needed before "
           "10% of them is held out for evaluation)\n")
    code, out, _ = run(capsys, "prompts", "import-shipped", "--db", db)
    assert code == 0 and out.startswith("135 prompts added")
    code, out, _ = run(capsys, "prompts", "list", "--db", db, "--limit", "2")
    assert out.splitlines() == ["     1    0 answers  one", "     2    0 answers  two", "2 of 137 prompts in project 'default'"]

    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"prompt": "one", "chosen": "=good", "rejected": "bad"}) + "\n", encoding="utf-8")
    assert run(capsys, "labels", "import", str(pairs), "--db", db)[:2] == (
        0, "1 preference pairs added to project 'default', 0 duplicates skipped\n")
    out_csv = tmp_path / "out.csv"
    assert run(capsys, "export", "--db", db, "--format", "csv", "--out", str(out_csv))[:2] == (
        0, f"wrote 1 preferences rows to {out_csv}\n")
    assert out_csv.read_text(encoding="utf-8").splitlines() == ["prompt,chosen,rejected,source", "one,'=good,bad,import"]
    code, out, _ = run(capsys, "export", "--db", db, "--format", "jsonl", "--conversational", "--out", str(tmp_path / "c.jsonl"))
    assert json.loads((tmp_path / "c.jsonl").read_text())["chosen"] == [{"role": "assistant", "content": "=good"}]

    assert run(capsys, "backup", "--db", db, "--out", str(tmp_path / "b.db"))[0] == 0
    assert open_db(tmp_path / "b.db")["prompts"].count == 137


# A new chat project's answer length, measure and held-out share, as `projects` prints them.
OWN = ("answers of 128 tokens (the default for chat projects), measure none (default: nobody has labelled this project "
       "yet and no reward model was trained on it: no verdict; set one with projects set --measure), held-out share 0.1, ")


def test_projects_and_users(capsys, tmp_path):
    db = str(tmp_path / "s.db")
    guide = tmp_path / "g.md"
    guide.write_text("# Rate kindness\n", encoding="utf-8")
    code, out, _ = run(capsys, "projects", "create", "imdb", "--db", db, "--create-db", "--likert-max", "5", "--overlap", "2", "--guidelines", str(guide))
    assert (code, out) == (0, "created project imdb: Likert 1..5, overlap 2, prompt format chat, selection arrival, " + OWN + "guidelines 16 chars\n")
    assert run(capsys, "projects", "set", "imdb", "--db", db, "--overlap", "3")[1] == (
        "updated project imdb: Likert 1..5, overlap 3, prompt format chat, selection arrival, " + OWN + "guidelines 16 chars\n")
    assert "selection uncertainty" in run(capsys, "projects", "set", "imdb", "--db", db, "--selection", "uncertainty")[1]
    assert "selection arrival" in run(capsys, "projects", "set", "imdb", "--db", db, "--selection", "arrival")[1]
    assert run(capsys, "projects", "list", "--db", db)[1].splitlines() == [
        "default: Likert 1..7, overlap 1, prompt format chat, selection arrival, " + OWN.rstrip(", ") + ", 0 prompts (0 held out)",
        "imdb: Likert 1..5, overlap 3, prompt format chat, selection arrival, " + OWN + "guidelines 16 chars, 0 prompts (0 held out)"]

    assert run(capsys, "users", "add", "alice", "--password", "password1", "--db", db)[1] == "added annotator 'alice'\n"
    code, out, _ = run(capsys, "users", "add", "root", "--role", "admin", "--generate", "--db", db)
    password = out.strip().rsplit(" ", 1)[1]
    from labeler.services.data.accounts import authenticate

    assert authenticate(open_db(db), "root", password).role == "admin"
    assert run(capsys, "users", "deactivate", "alice", "--db", db)[1] == "'alice' is now deactivated\n"
    assert run(capsys, "users", "list", "--db", db)[1].split() == ["alice", "annotator", "deactivated", "root", "admin", "active"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["users", "add", "bob", "--password", "short"], "users: error: field 'password': password must be at least 8"),
        (["projects", "create", "x", "--likert-min", "3", "--likert-max", "2"], "field 'likert_max'"),
        (["export", "--out", "x.jsonl", "--since", "soon"], "field 'since'"),
        (["prompts", "import", "missing.csv"], "missing.csv: file not found"),
    ],
)
def test_errors_are_one_line_exit_2(capsys, tmp_path, argv, message):
    code, out, err = run(capsys, *argv, "--db", str(tmp_path / "s.db"), "--create-db")
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err


def test_bad_file_in_a_real_process(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"prompt": ""}\n', encoding="utf-8")
    db = tmp_path / "s.db"
    done = subprocess.run(
        [sys.executable, "-m", "labeler", "prompts", "import", str(bad), "--db", str(db), "--create-db"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"rlhf-studio prompts: error: {bad}, line 2, field 'prompt': is empty\n"
    assert open_db(db)["prompts"].count == 0


def test_export_filter_flags_reach_the_options(capsys, tmp_path):
    db = str(tmp_path / "s.db")
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"prompt": "p", "chosen": "a", "rejected": "b"}) + "\n", encoding="utf-8")
    run(capsys, "labels", "import", str(pairs), "--db", db, "--create-db")
    out = tmp_path / "o.jsonl"
    # The imported pair was judged once and by no annotator: each of these filters removes it.
    for flags in (["--min-annotators", "2"], ["--annotators", "alice,bob"], ["--since", "2999-01-01"]):
        code, _, err = run(capsys, "export", "--db", db, "--out", str(out), *flags)
        assert code == 2 and "nothing to export" in err, flags
    code, stdout, _ = run(capsys, "export", "--db", db, "--out", str(out), "--include-rating-pairs", "--min-agreement", "1")
    assert code == 0 and json.loads(out.read_text()) == {"prompt": "p", "chosen": "a", "rejected": "b", "margin": 0.0,
                                                  "source": "import"}
    code, _, err = run(capsys, "export", "--db", db, "--out", str(out), "--min-annotators", "two")
    assert code == 2 and "field 'min_annotators'" in err


def test_output_piped_into_a_reader_that_leaves_early_is_no_error(tmp_path):
    # `rlhf-studio prompts list | head -1`: head exits after one line; the CLI must not print a BrokenPipeError
    # traceback or fail.
    db = str(tmp_path / "s.db")
    assert main(["prompts", "import-shipped", "--db", db, "--create-db"]) == 0
    script = (f"{sys.executable} -m labeler prompts list --db {db} --limit 135 | head -c 10 >/dev/null; "
              "echo ${PIPESTATUS[0]}")
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "0", out.stderr
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr


def test_a_teams_own_project_from_the_command_line(capsys, tmp_path):
    """Issue 33: a chat project with room for answers, held-out prompts at import, a measure checked when set."""
    db = str(tmp_path / "s.db")
    questions = tmp_path / "q.txt"
    questions.write_text("".join(f"How do I export invoice {i} as a PDF?\n" for i in range(40)), encoding="utf-8")
    code, out, _ = run(capsys, "projects", "create", "support", "--prompt-format", "chat", "--db", db, "--create-db")
    assert code == 0 and "answers of 128 tokens" in out and "held-out share 0.1" in out
    code, out, _ = run(capsys, "prompts", "import", str(questions), "--project", "support", "--db", db,
                       "--no-fit-length")
    assert code == 0 and "20 of them held out for evaluation; the project has 20 training and 20 held-out" in out
    assert "(the rule holds 20 of 40 prompts out (at least 30, or half the prompts" in out
    code, _, err = run(capsys, "prompts", "import", str(questions), "--project", "other-too-small", "--db", db)
    assert code == 2 and "unknown project 'other-too-small'" in err
    small = tmp_path / "small.txt"
    small.write_text("a?\nb?\nc?\nd?\ne?\nf?\n", encoding="utf-8")
    code, _, err = run(capsys, "prompts", "import", str(small), "--project", "support", "--heldout-share", "0.5",
                       "--db", db, "--no-fit-length")
    assert code == 0  # 46 prompts: 23 would be held out, only the 6 new ones can move: 23 held out, 23 to train
    code, _, err = run(capsys, "projects", "set", "support", "--measure", "rm:nope", "--db", db)
    assert code == 2 and "no reward model named 'nope'" in err
    code, out, _ = run(capsys, "projects", "set", "support", "--measure", "vader", "--answer-tokens", "96", "--db", db)
    assert code == 0 and "answers of 96 tokens (set by hand), measure vader" in out


def test_export_leaves_out_held_out_prompts_unless_include_heldout(capsys, tmp_path):
    """Issue 48 item 5: a label on a held-out prompt (split 'test') is in an export only with --include-heldout."""
    db = str(tmp_path / "s.db")
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": p, "chosen": "good", "rejected": "bad"}) + "\n"
                             for p in ("kept", "held")), encoding="utf-8")
    assert run(capsys, "labels", "import", str(pairs), "--db", db, "--create-db")[0] == 0
    open_db(db).execute("UPDATE prompts SET split = 'test' WHERE text = 'held'")
    out = tmp_path / "out.jsonl"
    assert run(capsys, "export", "--db", db, "--out", str(out))[:2] == (0, f"wrote 1 preferences rows to {out}\n")
    assert [json.loads(line)["prompt"] for line in out.read_text().splitlines()] == ["kept"]
    assert run(capsys, "export", "--db", db, "--out", str(out), "--include-heldout")[:2] == (
        0, f"wrote 2 preferences rows to {out}\n")
    assert [json.loads(line)["prompt"] for line in out.read_text().splitlines()] == ["kept", "held"]


def test_prompts_edit_retire_and_restore(capsys, tmp_path):
    db = str(tmp_path / "s.db")
    prompts = tmp_path / "p.txt"
    prompts.write_text("Waht is RLHF?\ntwo\n", encoding="utf-8")
    assert run(capsys, "prompts", "import", str(prompts), "--db", db, "--create-db", "--no-fit-length")[0] == 0
    assert run(capsys, "prompts", "edit", "1", "What is RLHF?", "--db", db)[:2] == (
        0, "prompt 1 of project 'default' now reads: What is RLHF?\n")
    assert run(capsys, "prompts", "retire", "1", "--db", db)[:2] == (
        0, "1 prompts retired in project 'default' (their answers and labels are kept)\n")
    assert tuple(open_db(db).execute("SELECT split, retired_from FROM prompts WHERE id = 1").fetchone()) == (
        "retired", "train")
    assert run(capsys, "prompts", "restore", "1", "--db", db)[:2] == (0, "1 prompts restored in project 'default'\n")
    code, _, err = run(capsys, "prompts", "retire", "9", "--db", db)
    assert (code, err) == (2, "rlhf-studio prompts: error: field 'prompt': no prompt 9 in this project\n")
