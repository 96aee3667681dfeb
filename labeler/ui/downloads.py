"""Files the web app hands out for download (backups, exports), each in a private folder of its own that lives
only as long as Gradio needs it.

A handler returns a path; Gradio copies that file into its cache after the handler has returned and serves the
copy, so the handler cannot remove its folder itself. Instead every new download first removes the folders of
downloads older than KEEP_S (a copy takes seconds), and the app's Blocks(delete_cache=...) ages Gradio's copies
out (app.py). Before, every web backup and export left a folder in the system temp directory for good.
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

KEEP_S = 600.0  # a download's folder is removed by the first download started this long after it
ROOT_PREFIX = "rlhf-studio-downloads-"


def root() -> Path:
    """<temp>/rlhf-studio-downloads-<uid>, 0700, refused when it is a link or someone else's (a shared /tmp)."""
    base = Path(tempfile.gettempdir()) / f"{ROOT_PREFIX}{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    info = base.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise PermissionError(f"{base} is not a folder owned by this user; remove it")
    if stat.S_IMODE(info.st_mode) != 0o700:
        base.chmod(0o700)
    return base


def sweep(base: Path, keep_s: float = KEEP_S, now: float | None = None) -> list[Path]:
    """Remove the download folders under `base` last changed more than `keep_s` ago; returns them."""
    cutoff = (time.time() if now is None else now) - keep_s
    removed = []
    for folder in base.iterdir():
        try:
            if folder.lstat().st_mtime < cutoff:
                if folder.is_dir() and not folder.is_symlink():
                    shutil.rmtree(folder)
                else:
                    folder.unlink()
                removed.append(folder)
        except FileNotFoundError:  # another request swept it first
            continue
    return removed


def new_folder(prefix: str, keep_s: float = KEEP_S) -> Path:
    """A fresh private folder for one download, after sweeping the old ones."""
    base = root()
    sweep(base, keep_s)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))
