"""Web downloads (backups, exports) leave nothing behind (issue 10 item 8): each is written in a private folder
that the next download sweeps once it is old, and Gradio's copies age out of its cache (delete_cache)."""
from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import gradio as gr
import pytest

from labeler.ui import downloads

ADMIN = "root"


def _age(path: Path, seconds: float) -> None:
    past = time.time() - seconds
    os.utime(path, (past, past))


def test_sweep_removes_only_old_folders_and_the_root_is_private(tmp_path, monkeypatch):
    monkeypatch.setattr(downloads.tempfile, "gettempdir", lambda: str(tmp_path))
    first = downloads.new_folder("backup-")
    (first / "studio.db").write_bytes(b"x")
    _age(first, downloads.KEEP_S + 1)
    recent = downloads.new_folder("export-")  # sweeps `first`
    assert not first.exists() and recent.is_dir()
    assert recent.parent == tmp_path / f"rlhf-studio-downloads-{os.getuid()}"
    assert stat.S_IMODE(recent.parent.stat().st_mode) == 0o700 and stat.S_IMODE(recent.stat().st_mode) == 0o700
    assert downloads.sweep(recent.parent) == []  # young folders stay


def test_a_root_that_is_a_link_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(downloads.tempfile, "gettempdir", lambda: str(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / f"rlhf-studio-downloads-{os.getuid()}").symlink_to(elsewhere)
    with pytest.raises(PermissionError, match="not a folder owned by this user"):
        downloads.new_folder("backup-")


@pytest.fixture
def app(db_path, tmp_path, monkeypatch, tiny_model_dir):
    from labeler.services.data import accounts
    from labeler.ui.app import build_app
    from labeler.ui.context import ServeSettings
    from storage import open_db

    monkeypatch.setattr(downloads.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    db = open_db(db_path)
    accounts.create_user(db, ADMIN, "root-password-1", role="admin")
    db.conn.close()
    return build_app(ServeSettings(db_path=db_path, model=str(tiny_model_dir), runs_dir=str(tmp_path / "runs")))


def _backup(db_path: str) -> Path:
    """The Admin tab's backup button's handler, called as its event calls it."""
    from labeler.ui.context import ServeSettings, UIContext
    from labeler.ui.tabs.admin.backup import download_backup

    return Path(download_backup(UIContext(ServeSettings(db_path=db_path)), gr.Request(username=ADMIN)))


def test_web_backups_leave_no_folders_behind(app, db_path, tmp_path):
    root = tmp_path / "tmp" / f"rlhf-studio-downloads-{os.getuid()}"
    first = _backup(db_path)
    assert first.parent.parent == root and stat.S_IMODE(first.stat().st_mode) == 0o600
    _age(first.parent, downloads.KEEP_S + 1)
    second = _backup(db_path)
    assert [p.name for p in root.iterdir()] == [second.parent.name]  # the old download's folder is gone
    # Nothing under the system temp folder's old names either.
    assert not list((tmp_path / "tmp").glob("rlhf-studio-backup-*"))
    assert app.delete_cache == (600, 3600)  # Gradio's cached copies age out too
