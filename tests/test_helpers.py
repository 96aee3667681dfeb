"""tests/helpers.py: the helpers every test folder shares, and no test file keeping its own copy."""
from __future__ import annotations

import ast
import socket
from pathlib import Path

import pytest
from helpers import free_port, wait_until

TESTS = Path(__file__).resolve().parent
SHARED = {"free_port", "wait_until"}


def test_free_port_is_free_to_listen_on():
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))  # OSError if something held it


def test_wait_until_returns_the_first_truthy_value_and_names_what_timed_out():
    answers = iter([0, None, "ready", "later"])
    assert wait_until(lambda: next(answers), timeout=5, interval=0.001) == "ready"
    with pytest.raises(AssertionError, match=r"timed out after 0.05s waiting for the moon"):
        wait_until(lambda: False, timeout=0.05, what="the moon", interval=0.01)


def test_no_test_file_keeps_its_own_copy():
    copies = [f"{path.relative_to(TESTS)}:{node.lineno} {node.name}"
              for path in sorted(TESTS.rglob("*.py")) if path.name != "helpers.py"
              for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
              if isinstance(node, ast.FunctionDef) and node.name.strip("_") in SHARED | {"wait_for"}]
    assert copies == []
