"""The helpers test files share (tests/helpers.py, tests/rlhf/param_checks.py, fixtures in tests/conftest.py), and no
test file keeping its own copy of one."""
from __future__ import annotations

import ast
import socket
from pathlib import Path

import pytest
from helpers import free_port, rank_good_over_bad, recording, rows, seed_questions, wait_until

TESTS = Path(__file__).resolve().parent
# Each shared helper and the one file that defines it: a module-level function of that name anywhere else in tests/
# is a copy. Fixtures are pytest's own namespace and are checked apart (SHARED_FIXTURES).
SHARED = {
    "free_port": "helpers.py",
    "wait_until": "helpers.py",
    "wait_for": "helpers.py",  # wait_until's name in older copies
    "login": "helpers.py",
    "rows": "helpers.py",
    "recording": "helpers.py",
    "seed_questions": "helpers.py",
    "serving_questions": "helpers.py",
    "rank_good_over_bad": "helpers.py",
    "build_heldout_db": "services/export_fixtures.py",
    "snapshot": "rlhf/param_checks.py",
    "params": "rlhf/param_checks.py",  # snapshot's name in older copies
    "changed": "rlhf/param_checks.py",
}
SHARED_FIXTURES = {"tiny": "conftest.py", "tiny_model_dir": "conftest.py", "db": "conftest.py"}


def is_fixture(node: ast.FunctionDef) -> bool:
    return any("fixture" in ast.unparse(decorator) for decorator in node.decorator_list)


def module_functions(path: Path) -> list[ast.FunctionDef]:
    return [node for node in ast.parse(path.read_text(encoding="utf-8")).body if isinstance(node, ast.FunctionDef)]


def test_free_port_is_free_to_listen_on():
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))  # OSError if something held it


def test_wait_until_returns_the_first_truthy_value_and_names_what_timed_out():
    answers = iter([0, None, "ready", "later"])
    assert wait_until(lambda: next(answers), timeout=5, interval=0.001) == "ready"
    with pytest.raises(AssertionError, match=r"timed out after 0.05s waiting for the moon"):
        wait_until(lambda: False, timeout=0.05, what="the moon", interval=0.01)


def test_rows_gives_whole_rows_as_tuples(db):
    db.execute("CREATE TABLE t (a INTEGER, b TEXT)")
    db.execute("INSERT INTO t VALUES (1, 'x'), (2, 'y')")
    assert rows(db, "SELECT a, b FROM t ORDER BY a") == [(1, "x"), (2, "y")]
    assert rows(db, "SELECT b FROM t WHERE a = ?", [2]) == [("y",)]


def test_recording_keeps_each_argument_and_returns_what_it_was_given():
    calls = []
    measure = recording("made up", calls)
    assert (measure(1), measure({"steps": 2})) == ("made up", "made up")
    assert calls == [1, {"steps": 2}]


def test_seed_questions_writes_the_project_s_questions_answers_and_items(db_path):
    from storage import open_db

    questions = [{"name": "helpful", "scale_min": 1, "scale_max": 3, "guideline": "Useful?"},
                 {"name": "spam", "kind": "flag"}]
    seed_questions(db_path, ("rita", "rita-password-1"), questions, {"Q1": ["a1"], "Q2": ["b1", "b2"]},
                   ranking_size=2, kinds=("rating", "ranking"))
    db = open_db(db_path)
    try:
        assert rows(db, "SELECT username, role FROM users") == [("rita", "annotator")]
        assert rows(db, "SELECT name, kind, scale_min, scale_max, guideline FROM questions ORDER BY id") == [
            ("helpful", "criterion", 1, 3, "Useful?"), ("spam", "flag", None, None, "")]
        assert rows(db, "SELECT p.text, r.text, r.source FROM responses r JOIN prompts p ON p.id = r.prompt_id"
                        " ORDER BY r.id") == [("Q1", "a1", "e2e"), ("Q2", "b1", "e2e"), ("Q2", "b2", "e2e")]
        # a rating item per answer, a ranking item of 2 for the prompt with two answers
        assert rows(db, "SELECT kind, COUNT(*) FROM items GROUP BY kind ORDER BY kind") == [("ranking", 1),
                                                                                          ("rating", 3)]
    finally:
        db.conn.close()


def test_rank_good_over_bad_ranks_each_prompt_s_good_answer_first(db):
    import json

    from labeler.services.data import accounts

    accounts.create_user(db, "root", "root-password-1", role="admin")
    rank_good_over_bad(db, "root", ["P0", "P1"])
    texts = dict(rows(db, "SELECT id, text FROM responses"))
    assert [[[texts[i] for i in group] for group in json.loads(order)]
            for (order,) in rows(db, "SELECT order_json FROM rankings ORDER BY id")] == [
        [["a good answer to 1"], ["a bad answer to 1"]], [["a good answer to 2"], ["a bad answer to 2"]]]


def test_no_test_file_keeps_its_own_copy():
    copies = []
    for path in sorted(TESTS.rglob("*.py")):
        here = str(path.relative_to(TESTS))
        for node in module_functions(path):
            home = (SHARED_FIXTURES.get(node.name) if is_fixture(node) else SHARED.get(node.name)) or here
            if home != here:
                copies.append(f"{here}:{node.lineno} {node.name} (shared in tests/{home})")
    assert copies == []
