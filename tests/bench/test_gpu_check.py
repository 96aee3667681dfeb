"""bench/gpu_check.sh runs the app's whole loop stage by stage (bench/gpu_check.py). The loop itself is a script
(its tiny shape takes minutes on a shared 2-core machine; run `bash bench/gpu_check.sh --device cpu --shape tiny`);
here: the script parses, and what it measures with is right: a process tree's peak memory, followed after its
parent exits, and the bytes written under a folder."""
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import gpu_check  # noqa: E402

MIB = 1024**2


def test_shell_script_parses_and_help_names_the_shapes():
    subprocess.run(["bash", "-n", str(ROOT / "bench" / "gpu_check.sh")], check=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--help"], capture_output=True,
                          text=True, env=env, check=True)
    assert "--shape" in done.stdout and "{1.5b,tiny}" in done.stdout and "--device" in done.stdout


def test_written_bytes_counts_new_and_changed_files_once(tmp_path):
    (tmp_path / "kept").write_bytes(b"x" * 10)
    (tmp_path / "changed").write_bytes(b"x" * 20)
    before = gpu_check._files(tmp_path)
    time.sleep(0.01)
    (tmp_path / "changed").write_bytes(b"y" * 30)  # rewritten: its new size, once
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "new").write_bytes(b"z" * 40)
    after = gpu_check._files(tmp_path)
    assert gpu_check.written_bytes(before, after) == 30 + 40  # the unchanged 10 bytes are not counted


def test_peaks_follow_a_grandchild_its_parent_left_behind():
    # The parent starts a child that holds 200 MiB for 1.5 s and exits at once, as `train --wait` may exit before
    # the run's worker: the child is orphaned, and its peak must still be measured, and waited for.
    child = "import time; block = bytearray(200 * 1024 * 1024); time.sleep(1.5)"
    parent = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(0.3)"
    start = time.monotonic()
    with gpu_check.ProcessPeaks() as peaks:
        process = subprocess.Popen([sys.executable, "-c", parent])
        peaks.add(process.pid)
        process.wait()
    assert time.monotonic() - start > 1.4  # the orphan was waited for, not only its parent
    assert len(peaks.peak) == 2
    assert peaks.largest(exclude={process.pid}) > 200 * MIB
    assert peaks.peak[process.pid] < 100 * MIB  # the parent's own peak is its own, not its child's
    assert not peaks.alive()


def test_markdown_row_subtracts_the_floor_and_says_when_there_is_no_estimate():
    gib = gpu_check.GIB
    rows = [gpu_check.Row("floor", seconds=3.0, peak_bytes=int(0.5 * gib)),
            gpu_check.Row("rm", seconds=12.25, peak_bytes=int(2.0 * gib), estimate_bytes=int(1.25 * gib),
                          estimate_note="train --dry-run: weights 1.0", written=3 * MIB),
            gpu_check.Row("rank", seconds=5.0, peak_bytes=gib, note="4 rankings")]
    table = gpu_check.markdown(rows, "## header", "cpu")
    lines = table.splitlines()
    assert lines[2].startswith("| stage | wall s | peak RSS GiB | peak - floor GiB | app's estimate GiB |")
    assert "| rm | 12.2 | 2.00 | 1.50 | 1.25 (train --dry-run: weights 1.0) | 3.0 MiB |" in table  # 2.0 - 0.5
    assert "| rank | 5.0 | 1.00 | 0.50 | none (no model is loaded, or no estimate exists for this stage) |" in table
