"""The import directions docs/ARCHITECTURE.md states, read from the source (every import, also inside functions):
storage imports neither torch nor gradio nor the packages above it, rlhf imports neither the application nor
gradio, and the services import neither gradio nor the UI or the command line."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "storage": ("torch", "gradio", "labeler", "rlhf", "transformers"),
    "rlhf": ("labeler", "storage", "gradio"),
    "labeler/services": ("gradio", "labeler.ui", "labeler.commands", "labeler.cli", "labeler.worker"),
}


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in the file, `from a import b` giving both a and a.b."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_one_way(package):
    banned = FORBIDDEN[package]
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {module}"
             for path in sorted((ROOT / package).rglob("*.py"))
             for line, module in imports(path)
             if any(module == name or module.startswith(name + ".") for name in banned)]
    assert not wrong, wrong


def test_the_checker_sees_imports_inside_functions(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from labeler import ui\n    import gradio.utils\n")
    assert imports(sample) == [(2, "labeler"), (2, "labeler.ui"), (3, "gradio.utils")]


# Within the labeling package (docs/ARCHITECTURE.md, services/data/) each module may import only the ones below it: the
# tables' writer at the bottom, so that accounts can release a deactivated account's holds through it.
LABELING_MAY_IMPORT = {
    "store": set(),
    "items": {"store"},
    "queue": {"store"},
    "submit": {"store", "queue"},
    "gold": set(),
}


@pytest.mark.parametrize("module", sorted(LABELING_MAY_IMPORT))
def test_labeling_modules_point_one_way(module):
    package = "labeler.services.data.labeling"
    path = ROOT / "labeler" / "services" / "data" / "labeling" / f"{module}.py"
    siblings = {name.removeprefix(package + ".").split(".")[0] for _, name in imports(path)
                if name.startswith(package + ".")}
    assert siblings <= LABELING_MAY_IMPORT[module], f"labeling/{module}.py imports {sorted(siblings)}"
    assert set(LABELING_MAY_IMPORT) == {p.stem for p in path.parent.glob("*.py")} - {"__init__"}


@pytest.mark.parametrize("first", ["labeler.services.data.accounts", "labeler.services.data.labeling.store",
                                   "labeler.services.data.labeling"])
def test_accounts_and_labeling_import_in_either_order(first):
    # accounts imports labeling.store, whose package imports queue and submit, which use accounts: they import the
    # module, so a fresh interpreter may start from either side.
    import subprocess
    import sys

    code = f"import {first}; from labeler.services.data import accounts, labeling; labeling.next_item; accounts.set_active"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


# The application's ground floor: the settings <-> widgets/flags mapping and the error types it raises, shared by the
# services, the UI and the command line, so they import nothing of those.
GROUND_FLOOR = ("labeler/forms.py", "labeler/errors.py")


@pytest.mark.parametrize("path", GROUND_FLOOR)
def test_the_ground_floor_imports_nothing_above_it(path):
    above = ("labeler.services", "labeler.ui", "labeler.commands", "labeler.cli", "labeler.worker")
    wrong = [f"{path}:{line} imports {module}" for line, module in imports(ROOT / path)
             if any(module == name or module.startswith(name + ".") for name in above)]
    assert not wrong, wrong


# The services' groups, floor by floor (docs/ARCHITECTURE.md, Services): each imports only the groups before it in this
# list (at import time or in a function), so a group can be read, and tested, without the ones after it.
SERVICE_GROUPS = ['settings', 'data', 'labels', 'execution', 'serving', 'evals', 'training']


@pytest.mark.parametrize("group", SERVICE_GROUPS)
def test_service_groups_point_one_way(group):
    below = {f"labeler.services.{name}" for name in SERVICE_GROUPS[:SERVICE_GROUPS.index(group) + 1]}
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {module}"
             for path in sorted((ROOT / "labeler" / "services" / group).rglob("*.py"))
             for line, module in imports(path)
             if module.startswith("labeler.services.") and ".".join(module.split(".")[:3]) not in below]
    assert not wrong, wrong


def test_every_service_module_is_in_a_group():
    services = ROOT / "labeler" / "services"
    assert [path.name for path in services.glob("*.py")] == ["__init__.py"]
    assert sorted(path.parent.name for path in services.glob("*/__init__.py")) == sorted(SERVICE_GROUPS)
