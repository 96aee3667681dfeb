"""rlhf's lazily imported names are written once (rlhf/__init__.py) and served by both import paths: `rlhf` and TRL
0.11's `rlhf.trainer`, neither of which imports transformers.Trainer until a name is used."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_one_table_serves_both_paths():
    import rlhf
    import rlhf.trainer

    assert rlhf.trainer.__all__ == list(rlhf._LAZY_EXPORTS)
    assert rlhf.trainer.DPOTrainer is rlhf.DPOTrainer
    assert rlhf.trainer.LengthSampler is rlhf.LengthSampler  # a name only the top-level table had before
    tables = [path.name for path in (ROOT / "rlhf").glob("*.py") if "_LAZY_EXPORTS = {" in path.read_text()]
    assert tables == ["__init__.py"]


def test_importing_the_trainer_path_loads_no_trainer():
    code = "import sys, rlhf.trainer; print('transformers' in sys.modules, 'rlhf.ppo' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["False", "False"]
