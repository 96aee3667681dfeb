"""No import cycle among the project's own modules (docs/ARCHITECTURE.md, Layers): the graph of every import a
module makes, read with ast (its top-level `import`/`from` statements and those inside its functions; only
`if TYPE_CHECKING:` imports, which never run, are left out) has no cycle. A function-level import only postpones
a cycle to the first call: the two modules still need each other, and the names they share are private to
neither, so the graph counts it (reading top-level imports alone once let such a circle pass)."""
from __future__ import annotations

import ast
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("labeler", "storage", "rlhf")


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runs_at_import(body: list[ast.stmt], functions: bool = False):
    """The statements of a module body that run when it is imported: also inside if/try/with and class bodies,
    not under `if TYPE_CHECKING:`; inside functions too when `functions` (what runs when they are called)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not functions:
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _runs_at_import(node.orelse)
            continue
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                yield from _runs_at_import([child for child in children if isinstance(child, ast.AST)], functions)


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


def top_level_imports(source: str, name: str, is_package: bool, known: set[str], functions: bool = False) -> set[str]:
    """Every module (ours or not) that module `name` imports when it is imported (and, with `functions`, when its
    functions run)."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in _runs_at_import(ast.parse(source).body, functions):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update(imported_by(node, package, known))
    return found - {name}


def module_files(root: Path, packages=PACKAGES) -> dict[str, Path]:
    return {module_name(path, root): path for package in packages for path in sorted((root / package).rglob("*.py"))}


def import_graph(root: Path, packages=PACKAGES, functions: bool = True) -> dict[str, set[str]]:
    """{module: the modules of ours it imports, in its functions too (unless not `functions`)}."""
    files = module_files(root, packages)
    known = set(files)
    return {name: top_level_imports(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", known,
                                    functions) & known
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


def test_the_graph_reads_every_import_that_runs(tmp_path):
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
                                           "labeler.services.e", "labeler.services.g"}
    at_import = import_graph(tmp_path, packages=("labeler",), functions=False)
    assert at_import["labeler.services.a"] == graph["labeler.services.a"] - {"labeler.services.g"}


def test_a_circle_through_a_function_level_import_is_named(tmp_path):
    # The runners' old circle: the online runners imported the shared module's private names at the top, and it
    # reached back for their runners inside a function. Import-time edges alone see no cycle.
    package = tmp_path / "labeler"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "stage_runners.py").write_text(
        "def _online(name):\n    def run(ctx):\n        from labeler import stage_runners_online\n"
        "        return stage_runners_online.RUNNERS[name](ctx)\n    return run\n")
    (package / "stage_runners_online.py").write_text("from labeler import stage_runners\nRUNNERS = {}\n")
    assert find_cycle(import_graph(tmp_path, packages=("labeler",), functions=False)) is None
    assert find_cycle(import_graph(tmp_path, packages=("labeler",))) == [
        "labeler.stage_runners", "labeler.stage_runners_online", "labeler.stage_runners"]


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


def private_names_imported(root: Path, packages=("labeler", "storage")) -> list[str]:
    """'file:line name' for each underscore name a module takes from another module of ours: `from m import _x`,
    or `m._x` where m is one of our modules it imported. A private name is the module's own business; a name
    two modules share is public, in the module both import."""
    files = module_files(root, PACKAGES)
    known = set(files)
    wrong = []
    for name, path in files.items():
        if not name.startswith(tuple(packages)):
            continue
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules_bound: set[str] = set()  # local names bound to one of our modules
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and imported_by(node, package, known):
                for alias, target in zip(node.names, imported_by(node, package, known)):
                    if target == node.module or target not in known:  # `from m import name`: a name of m
                        if alias.name.startswith("_") and not alias.name.startswith("__"):
                            wrong.append(f"{path.relative_to(root).as_posix()}:{node.lineno} {alias.name}")
                    else:
                        modules_bound.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                modules_bound |= {alias.asname for alias in node.names if alias.asname and alias.name in known}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules_bound
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                wrong.append(f"{path.relative_to(root).as_posix()}:{node.lineno} {node.value.id}.{node.attr}")
    return sorted(wrong)


def test_the_runners_take_no_private_names():
    # The stage runners and what runs them (labeler/services/training/runners/, the worker) and storage. Not yet all of
    # labeler: run_preview builds a trainer config with train_configs._trainer_defaults, a second build of the
    # config that one place describing each stage is to remove.
    assert private_names_imported(ROOT, ("labeler.services.training.runners", "labeler.worker", "storage")) == []


def test_the_private_name_check_sees_both_forms(tmp_path):
    package = tmp_path / "labeler"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "shared.py").write_text("def _helper():\n    pass\ndef helper():\n    pass\n")
    (package / "user.py").write_text(
        "from labeler.shared import _helper, helper\nfrom labeler import shared\n"
        "def f():\n    return shared._helper(), shared.helper(), helper()\n")
    assert private_names_imported(tmp_path, ("labeler",)) == ["labeler/user.py:1 _helper",
                                                              "labeler/user.py:4 shared._helper"]


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """The modules `start` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen



# The stage registry's floor: what its modules may reach (at import time or in a function). A stage names what does
# the work ("module:attribute": its rows, trainer config and runner) and imports it only when asked, so the settings,
# the storage check of a run's stage, the preview and the estimate read the stages' facts instead of their names.
STAGE_FLOOR = {"labeler.errors", "labeler.services.settings.reward_spec"}


def test_the_stage_registry_stands_on_the_ground_floor():
    files = module_files(ROOT)
    graph = import_graph(ROOT)
    stage_modules = [name for name in files if name.startswith("labeler.services.settings.training_stages")]
    assert len(stage_modules) >= 10  # the package, base and the eight stages
    for name in stage_modules:
        ours = {module for module in reachable(graph, name) if module.startswith(("labeler", "storage"))}
        above = {module for module in ours if not module.startswith("labeler.services.settings.training_stages")} - STAGE_FLOOR
        assert above == set(), f"{name} reaches {sorted(above)}"
    # and the settings read it (no second list of stage names)
    assert "labeler.services.settings.training_stages" in graph["labeler.services.settings.job_settings"]
    # The registry finds its modules with importlib, which the graph cannot see: what importing it loads, in a fresh
    # interpreter, is the floor too (no runner, row reader or trainer config imported before it is asked for).
    import subprocess
    import sys

    code = ("import json, sys; import labeler.services.settings.training_stages; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('labeler', 'storage', 'torch')))))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
    assert {m for m in loaded if not m.startswith("labeler.services.settings.training_stages")} <= STAGE_FLOOR | {
        "labeler", "labeler.services", "labeler.services.settings"}
    assert {f"labeler.services.settings.training_stages.{stage}" for stage in ("ppo", "grpo", "online_dpo")} <= loaded


def test_job_settings_stand_on_the_ground_floor():
    # Settings declare and check values: they reach no exporter with its writers and no timing code (the label
    # filters' fields are label_filters', the "20m" parsing durations'), at import time or in a function.
    files = module_files(ROOT)
    known = set(files)
    ours = reachable(import_graph(ROOT), "labeler.services.settings.job_settings") | {"labeler.services.settings.job_settings"}
    assert ours & {"labeler.services.labels.export", "labeler.services.training.run_estimate"} == set()
    theirs = {imported.split(".")[0] for name in ours for imported in top_level_imports(
        files[name].read_text(encoding="utf-8"), name, files[name].name == "__init__.py", known, functions=True)}
    assert theirs & {"subprocess", "csv", "sqlite_utils", "pyarrow", "time"} == set()
