"""bench/trainer_check.py (the trainers alone, without the app; bench/gpu_check.sh runs the app's loop) runs every
stage on the CPU at --tiny sizes with the 1.5B shape's stand-in (2 layers, Qwen's 151,936-token vocabulary)."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def test_help_runs():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "trainer_check.py"), "--help"], capture_output=True,
                          text=True, env=ENV, check=True)
    assert "--tiny" in done.stdout and "qwen1.5b-shape" in done.stdout


def test_every_stage_runs_at_tiny_size_on_cpu(tmp_path):
    out = tmp_path / "rows.json"
    subprocess.run([sys.executable, str(ROOT / "bench" / "trainer_check.py"), "--tiny", "--device", "cpu",
                    "--models", "qwen1.5b-shape", "--json", str(out)], capture_output=True, text=True, env=ENV,
                   check=True, timeout=900, cwd=tmp_path)
    rows = json.loads(out.read_text())
    assert [r["stage"] for r in rows] == ["build", "generate", "rm", "ppo", "grpo", "dpo", "chat"]
    assert all(r["status"] == "ok" and r["seconds"] > 0 and r["peak_gib"] > 0 for r in rows), rows
