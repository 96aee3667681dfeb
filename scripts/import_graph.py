"""Draw the import graph of labeler/, rlhf/ and storage/: modules as nodes, imports as arrows, the ones a function
makes (late imports) as well as the ones that run at import time.

    python scripts/import_graph.py                 # depth, circles, the longest functions
    python scripts/import_graph.py --dot > g.dot   # the graph in Graphviz DOT (late imports dashed)

Depth is the longest chain of imports (in modules) once every circle is merged into one node; a circle is a group
of modules that reach each other (a strongly connected component), listed for the import-time graph and for the
graph with late imports, since a late import only postpones a circle. `if TYPE_CHECKING:` imports never run and
are left out.
"""
from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("labeler", "rlhf", "storage")
SERVICES = "labeler.services."


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    late: bool  # made inside a function


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_files(root: Path = ROOT, packages=PACKAGES) -> dict[str, Path]:
    return {module_name(path, root): path for package in packages for path in sorted((root / package).rglob("*.py"))}


def imported_by(node: ast.Import | ast.ImportFrom, package: str, known: set[str]) -> list[str]:
    """The modules one import statement names, by absolute name (`from pkg import sub` is pkg.sub when that is a
    module of ours)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        base = ".".join([*anchor, *([base] if base else [])])
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]


def _imports(body: list[ast.stmt], late: bool):
    """(import node, late) for every import in `body`, descending into blocks, classes and functions; skips
    `if TYPE_CHECKING:` bodies."""
    for node in body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _imports(node.orelse, late)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, late
        inner = late or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for field in ("body", "orelse", "finalbody", "handlers"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                yield from _imports([c for c in children if isinstance(c, ast.stmt | ast.excepthandler)], inner)


def edges(root: Path = ROOT, packages=PACKAGES) -> list[Edge]:
    files = module_files(root, packages)
    known = set(files)
    found: dict[tuple[str, str], bool] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node, late in _imports(ast.parse(path.read_text(encoding="utf-8")).body, False):
            for target in imported_by(node, package, known):
                if target in known and target != name:
                    found[(name, target)] = found.get((name, target), True) and late  # at import time wins
    return [Edge(s, t, late) for (s, t), late in sorted(found.items())]


def graph_of(all_edges: list[Edge], nodes, with_late: bool) -> dict[str, set[str]]:
    graph = {node: set() for node in nodes}
    for edge in all_edges:
        if with_late or not edge.late:
            graph[edge.source].add(edge.target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def longest_chain(graph: dict[str, set[str]]) -> list[str]:
    """The longest import chain (a list of modules), each circle counted as one step."""
    group = {node: node for node in graph}
    for component in circles(graph):
        for member in component:
            group[member] = component[0]
    condensed: dict[str, set[str]] = {group[node]: set() for node in graph}
    for node, targets in graph.items():
        condensed[group[node]] |= {group[t] for t in targets if group[t] != group[node]}
    best: dict[str, list[str]] = {}

    def chain(node: str) -> list[str]:
        if node not in best:
            tails = [chain(target) for target in sorted(condensed[node])]
            best[node] = [node, *max(tails, key=len, default=[])]
        return best[node]

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    return max((chain(node) for node in sorted(condensed)), key=len, default=[])


def longest_functions(root: Path = ROOT, packages=PACKAGES, count: int = 10) -> list[tuple[int, str]]:
    """(lines, 'file:line name') of the longest functions and methods, longest first."""
    found = []
    for name, path in module_files(root, packages).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((node.end_lineno - node.lineno + 1,
                              f"{path.relative_to(root).as_posix()}:{node.lineno} {node.name}"))
    return sorted(found, key=lambda item: (-item[0], item[1]))[:count]


def dot(all_edges: list[Edge], nodes) -> str:
    lines = ["digraph imports {", "  rankdir=LR;", "  node [shape=box, fontsize=10];"]
    lines += [f'  "{node}";' for node in sorted(nodes)]
    lines += [f'  "{e.source}" -> "{e.target}"{" [style=dashed]" if e.late else ""};' for e in all_edges]
    return "\n".join([*lines, "}"]) + "\n"


def report(root: Path = ROOT) -> str:
    nodes = module_files(root)
    all_edges = edges(root)
    out = [f"modules: {len(nodes)}, imports: {len(all_edges)} "
           f"({sum(e.late for e in all_edges)} made inside functions)"]
    for title, with_late in (("at import time", False), ("with function-level imports", True)):
        graph = graph_of(all_edges, nodes, with_late)
        chain = longest_chain(graph)
        out.append(f"\n{title}: depth {len(chain)} modules: " + " -> ".join(chain))
        found = circles(graph)
        out.append(f"{title}: {len(found)} circle(s)" + "".join(f"\n  {' <-> '.join(c)}" for c in found))
        services = {n: {t for t in ts if t.startswith(SERVICES)} for n, ts in graph.items() if n.startswith(SERVICES)}
        out.append(f"{title}, labeler.services alone: depth {len(longest_chain(services))} modules")
    out.append("\nlongest functions (lines):")
    out += [f"  {lines:4d}  {where}" for lines, where in longest_functions(root)]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dot", action="store_true", help="print the graph in Graphviz DOT instead of the figures")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to read (default: this one)")
    args = parser.parse_args(argv)
    if args.dot:
        sys.stdout.write(dot(edges(args.root), module_files(args.root)))
    else:
        sys.stdout.write(report(args.root))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
