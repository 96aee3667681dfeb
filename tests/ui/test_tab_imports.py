"""A tab imports no other tab (docs/ARCHITECTURE.md, UI): what two tabs share lives outside both, in labeler/ui
(gold.py, model_choices.py) or in tabs/labelling.py, which is not a tab."""
from __future__ import annotations

import ast
from pathlib import Path

TABS = Path(__file__).resolve().parents[2] / "labeler" / "ui" / "tabs"


def tab_of(path: Path, tabs: Path) -> str:
    return path.relative_to(tabs).parts[0].removesuffix(".py")


def is_tab(name: str, tabs: Path) -> bool:
    """A module or package of tabs/ that defines TITLE (its __init__ for a package)."""
    source = tabs / f"{name}.py" if (tabs / f"{name}.py").exists() else tabs / name / "__init__.py"
    return source.exists() and any(isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "TITLE"
                                                                          for t in node.targets)
                                   for node in ast.parse(source.read_text(encoding="utf-8")).body)


def cross_tab_imports(tabs: Path = TABS) -> list[str]:
    found = []
    for path in sorted(tabs.rglob("*.py")):
        if path.parent == tabs and path.stem == "__init__":
            continue
        own = tab_of(path, tabs)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("labeler.ui.tabs"):
                parts = node.module.split(".")[3:]
                targets = parts[:1] or [alias.name for alias in node.names]
                found += [f"{path.relative_to(tabs).as_posix()}:{node.lineno} imports tab {target}"
                          for target in targets if target != own and is_tab(target, tabs)]
    return found


def test_no_tab_imports_another():
    assert cross_tab_imports() == []


def test_the_check_sees_a_tab_importing_another(tmp_path):
    for name in ("chat", "records"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f'TITLE = "{name}"\n')
    (tmp_path / "labelling.py").write_text("def shared():\n    pass\n")
    (tmp_path / "arena.py").write_text(
        'TITLE = "Arena"\nfrom labeler.ui.tabs.chat import model_choices\nfrom labeler.ui.tabs import labelling\n')
    (tmp_path / "records" / "part.py").write_text(
        "from labeler.ui.tabs.records.filters import x\nfrom labeler.ui.tabs import chat\n")
    assert cross_tab_imports(tmp_path) == ["arena.py:2 imports tab chat", "records/part.py:2 imports tab chat"]
