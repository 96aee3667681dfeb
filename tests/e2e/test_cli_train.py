"""`rlhf-studio train / runs` end to end through the CLI hub, with the toy stage runner (no model needed)."""
from __future__ import annotations

from pathlib import Path

import pytest

from labeler.cli import main
from labeler.services.execution import launch, runs

TOY_DIR = Path(__file__).resolve().parents[1] / "services"


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(TOY_DIR))
    monkeypatch.setenv(launch.LAUNCHER_ENV, "python")


def test_train_wait_list_show_and_errors(db_path, tmp_path, capsys):
    config = tmp_path / "toy.json"
    config.write_text('{"runner": "toy_runner:run", "model": "toy", "steps": 2}')
    code = main(["train", "sft", "--db", db_path, "--create-db", "--config", str(config), "--set", "steps=3",
                 "--runs-dir", str(tmp_path / "runs"), "--wait"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "run 1  sft  succeeded  step 3/3" in out  # --set wins over the file
    assert "loss=" in out

    assert main(["runs", "list", "--db", db_path]) == 0
    assert "   1  sft  succeeded  step     3/3" in capsys.readouterr().out
    assert main(["runs", "show", "1", "--db", db_path]) == 0
    shown = capsys.readouterr().out
    assert "labeler.worker" in shown and "latest metrics" in shown and "loss = " in shown

    # Errors: one line on stderr, exit 2, nothing queued.
    assert main(["train", "sft", "--db", db_path, "--set", "stepz=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "stepz" in err
    assert main(["train", "ppo", "--db", db_path, "--set", "batch_size=3", "--set", "mini_batch_size=2"]) == 2
    assert "batch_size" in capsys.readouterr().err
    assert main(["runs", "resume", "1", "--db", db_path]) == 2
    assert "only a failed or cancelled run" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"steps": 2,\n "lora": }')
    assert main(["train", "sft", "--db", db_path, "--config", str(bad)]) == 2
    assert "bad.json, line 2" in capsys.readouterr().err
    assert len(runs.list_runs(__import__("storage").open_db(db_path))) == 1


def test_list_settings_shows_job_and_trainer_fields(capsys):
    assert main(["train", "ppo", "--list-settings"]) == 0
    out = capsys.readouterr().out
    assert "timeout_policy='skip'" in out and "PPOConfig settings" in out and "init_kl_coef=0.03" in out and "advantage_estimator='rloo'" in out


def test_every_train_subcommand_has_help():
    from labeler.cli import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name in ("train", "runs", "demo"):
        assert subparsers.choices[name].description
        help_text = next(c.help for c in subparsers._choices_actions if c.dest == name)
        assert help_text
    runs = subparsers.choices["runs"]
    runs_sub = next(a for a in runs._actions if a.__class__.__name__ == "_SubParsersAction")
    assert sorted(c.dest for c in runs_sub._choices_actions if c.help) == ["cancel", "list", "resume", "show", "stop"]


def test_a_run_without_data_is_refused_at_launch(capsys, tmp_path):
    """As the Train tab refuses it: an SFT run on a project with no ratings would stop at once for want of rows."""
    from storage import open_db

    db = str(tmp_path / "s.db")
    assert main(["train", "sft", "--db", db, "--create-db", "--set", "steps=1", "--runs-dir", str(tmp_path / "runs")]) == 2
    assert "not launched: only 0" in capsys.readouterr().err
    assert open_db(db).execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0
