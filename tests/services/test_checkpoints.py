"""Atomic checkpoints: temp folder + rename, manifest written last, resume picks the newest complete one."""
from __future__ import annotations

import json

from labeler.services.execution import checkpoints


def _write(payload: bytes):
    def write(folder):
        (folder / "weights.bin").write_bytes(payload)
        (folder / "sub").mkdir()
        (folder / "sub" / "state.json").write_text(json.dumps({"n": len(payload)}))
    return write


def test_save_is_atomic_and_lists_files_in_the_manifest(tmp_path):
    path = checkpoints.save_checkpoint(tmp_path, 5, _write(b"abc"), meta={"loss": 1.5})
    assert path == tmp_path / "checkpoint-5"
    manifest = checkpoints.read_manifest(path)
    assert manifest["step"] == 5 and manifest["meta"] == {"loss": 1.5}
    assert manifest["files"] == {"weights.bin": 3, "sub/state.json": len(json.dumps({"n": 3}))}
    assert not list(tmp_path.glob(".tmp-*"))  # nothing left under a temporary name


def test_latest_skips_incomplete_and_truncated_checkpoints(tmp_path):
    checkpoints.save_checkpoint(tmp_path, 2, _write(b"two"), keep=None)
    checkpoints.save_checkpoint(tmp_path, 4, _write(b"four"), keep=None)
    # A crash while Trainer wrote checkpoint-6 in place: no manifest.
    (tmp_path / "checkpoint-6").mkdir()
    (tmp_path / "checkpoint-6" / "weights.bin").write_bytes(b"half")
    # A crash while we wrote checkpoint-8: still under its temporary name.
    (tmp_path / ".tmp-checkpoint-8-123").mkdir()
    assert checkpoints.latest_checkpoint(tmp_path).name == "checkpoint-4"
    # A file cut short after the manifest was written (disk full, bad copy) makes it incomplete too.
    (tmp_path / "checkpoint-4" / "weights.bin").write_bytes(b"fo")
    assert checkpoints.latest_checkpoint(tmp_path).name == "checkpoint-2"
    removed = sorted(p.name for p in checkpoints.remove_incomplete(tmp_path))
    assert removed == [".tmp-checkpoint-8-123", "checkpoint-4", "checkpoint-6"]
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint-2"]


def test_keep_rotates_old_checkpoints_and_numeric_order(tmp_path):
    for step in (9, 10, 11):
        checkpoints.save_checkpoint(tmp_path, step, _write(b"x"), keep=2)
    # Numeric, not lexicographic: "checkpoint-9" < "checkpoint-10".
    assert [p.name for p in checkpoints.complete_checkpoints(tmp_path)] == ["checkpoint-10", "checkpoint-11"]


def test_manifest_callback_marks_trainer_checkpoints(tmp_path):
    from types import SimpleNamespace

    folder = tmp_path / "checkpoint-3"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    callback = checkpoints.manifest_callback()
    args = SimpleNamespace(output_dir=str(tmp_path))
    state = SimpleNamespace(global_step=3, is_world_process_zero=True)
    assert checkpoints.latest_checkpoint(tmp_path) is None
    callback.on_save(args, state, control=None)
    assert checkpoints.latest_checkpoint(tmp_path) == folder
