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
