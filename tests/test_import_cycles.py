"""No import cycle among the project's own modules (docs/ARCHITECTURE.md, Layers): the graph of the imports that
run when a module is imported (its top-level `import`/`from` statements, read with ast; imports inside functions
and under `if TYPE_CHECKING:` run later or never) has no cycle. A cycle works only while every module in it
imports the others' names late, so each one would otherwise be a function-level import kept for the cycle."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("labeler", "storage", "rlhf")


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runs_at_import(body: list[ast.stmt]):
    """The statements of a module body that run when it is imported: also inside if/try/with and class bodies,
    not inside functions, not under `if TYPE_CHECKING:`."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _runs_at_import(node.orelse)
            continue
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                yield from _runs_at_import([child for child in children if isinstance(child, ast.AST)])


def imported_by(node: ast.Import | ast.ImportFrom, package: str, known: set[str]) -> list[str]:
    """The modules one import statement imports, by absolute name (`from pkg import sub` imports pkg.sub when
    that is one of the `known` modules; a package that Python imports before its named submodule is left
    out, being an __init__ that re-exports at most)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from . import x / from .y import z
        anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        base = ".".join([*anchor, *([base] if base else [])])
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]


def top_level_imports(source: str, name: str, is_package: bool, known: set[str]) -> set[str]:
    """Every module (ours or not) that module `name` imports when it is imported."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in _runs_at_import(ast.parse(source).body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update(imported_by(node, package, known))
    return found - {name}


def module_files(root: Path, packages=PACKAGES) -> dict[str, Path]:
    return {module_name(path, root): path for package in packages for path in sorted((root / package).rglob("*.py"))}


def import_graph(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    """{module: the modules of ours it imports when it is imported}."""
    files = module_files(root, packages)
    known = set(files)
    return {name: top_level_imports(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", known) & known
            for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (depth-first search, in sorted order so the answer is stable)."""
    state: dict[str, str] = {}  # "open" while on the current path, "done" once all it reaches is explored
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_project_modules_import_without_a_cycle():
    cycle = find_cycle(import_graph(ROOT))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_graph_reads_the_imports_that_run(tmp_path):
    package = tmp_path / "labeler"
    (package / "services").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "services" / "__init__.py").write_text("")
    (package / "services" / "a.py").write_text(
        "from __future__ import annotations\nfrom typing import TYPE_CHECKING\n"
        "from labeler.services import b\nfrom labeler.services.c import thing\nimport labeler.services.d\n"
        "try:\n    from . import e\nexcept ImportError:\n    pass\n"
        "if TYPE_CHECKING:\n    from labeler.services import f\n"
        "def late():\n    from labeler.services import g\n")
    for name in "bcdefg":
        (package / "services" / f"{name}.py").write_text("")
    graph = import_graph(tmp_path, packages=("labeler",))
    assert graph["labeler.services.a"] == {"labeler.services.b", "labeler.services.c", "labeler.services.d",
                                           "labeler.services.e"}


def test_a_cycle_is_named(tmp_path):
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    # The same, read from source: hub imports evaluation at the top, and evaluation imports hub.
    package = tmp_path / "labeler"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "hub.py").write_text("from labeler.evaluation import list_evaluations\n")
    (package / "evaluation.py").write_text("import json\nfrom labeler import hub\n")
    cycle = find_cycle(import_graph(tmp_path, packages=("labeler",)))
    assert cycle == ["labeler.evaluation", "labeler.hub", "labeler.evaluation"]
