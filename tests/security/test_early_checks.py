"""Inputs checked early and fast (issue 36, item 9): each of these once took seconds to minutes, or was accepted
and failed in the worker minutes later."""
from __future__ import annotations

import socket
import time

import pytest

from labeler.cli import main
from storage import open_db

pytestmark = pytest.mark.reliability


@pytest.fixture
def db_file(db_path):
    open_db(db_path).conn.close()
    return db_path


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_a_huge_max_new_tokens_is_refused_by_a_dry_run_at_once(db_file, capsys):
    start = time.monotonic()
    assert main(["train", "ppo", "--dry-run", "--db", db_file, "--set", "max_new_tokens=1000000000000"]) == 2
    line = _one_error_line(capsys)
    assert "max_new_tokens=1000000000000: must be between 1 and 32,768" in line
    assert time.monotonic() - start < 10  # no answer in 120 s before (the estimate generated that many tokens)


def test_a_huge_completion_length_is_refused_for_grpo_too(db_file, capsys):
    assert main(["train", "grpo", "--dry-run", "--db", db_file, "--set", "max_completion_length=1000000000000"]) == 2
    assert "max_completion_length=1000000000000: must be between 1 and 32,768" in _one_error_line(capsys)


def test_a_yaml_alias_bomb_is_refused_before_it_expands(db_file, tmp_path, capsys):
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 10)}]" for k in range(1, 10)]  # 10**10 leaves
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines + ["steps: 2"]) + "\n", encoding="utf-8")
    start = time.process_time()
    assert main(["train", "sft", "--dry-run", "--db", db_file, "--config", str(bomb)]) == 2
    line = _one_error_line(capsys)
    assert "bomb.yaml, line 2: YAML aliases (*name) are not accepted in a config file" in line
    assert time.process_time() - start < 2  # 34 s and 547 MB before the refusal


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_a_learning_rate_that_is_not_a_positive_number_is_refused(db_file, capsys, value):
    assert main(["train", "sft", "--dry-run", "--db", db_file, "--set", f"learning_rate={value}"]) == 2
    line = _one_error_line(capsys)
    assert f"learning_rate={float(value)!r}: must be a positive finite number" in line, line


def test_learning_rate_check_in_the_library():
    from rlhf.configs import PPOConfig, check_learning_rate

    for bad in (float("nan"), float("inf"), -1.0, 0.0, True):
        with pytest.raises(ValueError, match="learning_rate=.*must be a positive finite number"):
            check_learning_rate(bad)
    with pytest.raises(ValueError, match="learning_rate=inf"):
        PPOConfig(learning_rate=float("inf"))  # `> 0` let inf through
    check_learning_rate(2e-5)


def test_a_missing_model_folder_or_reward_module_is_refused_when_queued(db_file, capsys, tmp_path):
    assert main(["train", "sft", "--db", db_file, "--runs-dir", str(tmp_path), "--set",
                 "model=/nonexistent/model"]) == 2
    assert "/nonexistent/model: no such folder" in _one_error_line(capsys)
    assert main(["train", "ppo", "--db", db_file, "--runs-dir", str(tmp_path), "--set",
                 "reward=nosuchmodule:fn"]) == 2
    line = _one_error_line(capsys)
    assert "'nosuchmodule:fn': no module 'nosuchmodule'" in line and "reward_function" in line
    assert open_db(db_file)["runs"].count == 0  # neither queued (both were, and failed in the worker)


def test_a_reward_module_the_worker_finds_is_accepted(db, tmp_path, monkeypatch):
    from labeler.services.execution import launch

    (tmp_path / "my_rewards.py").write_text("def score(queries, responses):\n    return [0.0] * len(responses)\n")
    monkeypatch.chdir(tmp_path)  # the worker runs `python -m` here: this folder is on its path
    launch.refuse_unloadable({"reward_function": "my_rewards:score"}, resolve_model=lambda name: name)
    launch.refuse_unloadable({"runner": "json:loads", "model": "default"}, resolve_model=None)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "far_rewards.py").write_text("def score(queries, responses):\n    return []\n")
    monkeypatch.setenv("PYTHONPATH", str(elsewhere))  # the worker inherits this process's environment
    launch.refuse_unloadable({"reward_function": "far_rewards:score"}, resolve_model=None)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when this returns: connections are refused


def test_a_hub_dataset_that_cannot_be_reached_fails_fast_in_one_line(db_file, capsys, monkeypatch):
    import huggingface_hub

    # A Hub that refuses connections, on this machine (tests never touch the network).
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    start = time.monotonic()
    assert main(["prompts", "import", "nobody/no-such-dataset", "--db", db_file]) == 2
    line = _one_error_line(capsys)  # 12 lines of retries before
    assert "nobody/no-such-dataset: no such local file or folder, and the Hub cannot be reached" in line
    assert time.monotonic() - start < 10  # 25 s of retries before
