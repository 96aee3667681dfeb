"""Every third-party module the shipped packages import is declared in requirements*.txt (pyproject reads them),
so `pip install rlhf-studio` (or an extra) brings it, instead of it arriving by chance as another package's
dependency. Optional ones (deepspeed, the trackers) are imported on demand and declared in their extra."""
from __future__ import annotations

import ast
import importlib.metadata
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from rlhf.configs import TRACKER_PACKAGES

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("labeler", "rlhf", "storage")


def declared() -> dict[str, str]:
    """Canonical distribution name -> the requirements file that declares it."""
    out = {}
    for path in sorted(ROOT.glob("requirements*.txt")):
        for line in path.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                out[canonicalize_name(Requirement(line).name)] = path.name
    return out


def imported_modules() -> dict[str, set[str]]:
    """Top-level third-party module -> the files importing it (absolute imports anywhere in the code)."""
    modules: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in (*PACKAGES, "__future__"):
                        modules.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return modules


def test_every_imported_package_is_declared():
    requirements = declared()
    distributions = importlib.metadata.packages_distributions()  # module -> installed distributions
    missing = {}
    for module, files in imported_modules().items():
        # a module not installed here (an optional extra) is looked up under its own name
        names = [canonicalize_name(d) for d in distributions.get(module, [module])]
        if not any(name in requirements for name in names):
            missing[module] = sorted(files)
    assert not missing, f"imported but not in requirements*.txt: {missing}"
    assert requirements["huggingface-hub"] == "requirements.txt"  # labeler/services/training/hub.py, push_to_hub


def test_every_tracker_package_is_in_the_tracking_extra():
    requirements = declared()
    assert {canonicalize_name(p) for p in TRACKER_PACKAGES.values()} <= {
        name for name, file in requirements.items() if file == "requirements-tracking.txt"}
