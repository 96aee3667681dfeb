"""docs/ARCHITECTURE.md checked against the code, so it cannot drift again: its table list is the schema a
fresh database gets, every module of labeler/services (its subpackages' too) and of rlhf/ is named, and the
modules, files and functions it names exist."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from storage import open_db

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
SERVICES = ROOT / "labeler" / "services"
RLHF = ROOT / "rlhf"
SOURCE_DIRS = ("labeler", "rlhf", "storage", "tests")


def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def section(heading: str) -> str:
    """The doc's text from the `## heading...` line to the next `## `."""
    text = doc_text()
    start = text.index("\n## " + heading)
    end = text.find("\n## ", start + 1)
    return text[start:] if end == -1 else text[start:end]


def quoted(text: str) -> set[str]:
    """Every `code span` of the text."""
    return set(re.findall(r"`([^`\n]+)`", text))


def table_rows(text: str) -> list[list[str]]:
    """The cells of the doc's markdown table rows (header and separator left out)."""
    return [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.startswith("| `")]


def service_modules() -> set[str]:
    """The modules and packages in labeler/services' groups (a package is named by its folder's name)."""
    return ({path.stem for path in SERVICES.glob("*/*.py") if path.stem != "__init__"}
            | {path.parent.name for path in SERVICES.glob("*/*/__init__.py")})


def service_groups() -> set[str]:
    """The subpackages labeler/services is grouped in."""
    return {path.parent.name for path in SERVICES.glob("*/__init__.py")}


def subpackage_modules() -> set[str]:
    """The modules inside the groups' packages, as `package/module.py` below their group (__init__ left out)."""
    return {str(path.relative_to(path.parents[1])) for path in SERVICES.glob("*/*/**/*.py")
            if path.name != "__init__.py"}


def rlhf_modules() -> set[str]:
    """Every module of rlhf/ but its __init__.py, as its path inside rlhf/
    (`grpo.py`, `extras/best_of_n_sampler.py`)."""
    return {str(path.relative_to(RLHF)) for path in RLHF.rglob("*.py") if path.name != "__init__.py"}


def service_source(name: str) -> Path:
    """The file that defines a services module's (or package's) top-level names."""
    found = [*SERVICES.glob(f"*/{name}.py"), *SERVICES.glob(f"*/{name}/__init__.py")]
    assert len(found) == 1, f"{name}: {found}"
    return found[0]


def prose_spans() -> set[str]:
    """The doc's code spans but those of the list of groups regroup_services.py writes (which names every module
    by its group), so that a module counts as named only where the prose says what it does."""
    text = doc_text()
    begin, end = "<!-- service groups:", "<!-- end of service groups -->"
    if begin in text:
        text = text[:text.index(begin)] + text[text.index(end) + len(end):]
    return quoted(text)


def top_level_names(path: Path) -> set[str]:
    """Functions, classes and assigned names a module defines at its top level."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):  # a package's __init__ re-exporting a name
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def test_the_table_list_is_the_schema(tmp_path):
    db = open_db(tmp_path / "fresh.db", create=True)
    try:
        schema = set(db.table_names())
    finally:
        db.conn.close()
    listed = [name for row in table_rows(doc_text()) for name in re.findall(r"`([a-z_]+)`", row[0])]
    assert len(listed) == len(set(listed)), f"a table is listed twice: {sorted(listed)}"
    assert set(listed) == schema, (f"missing from docs/ARCHITECTURE.md: {sorted(schema - set(listed))}; "
                                   f"listed but not in the schema: {sorted(set(listed) - schema)}")


def test_every_table_writer_is_a_service_module_or_storage():
    storage_files = {path.name for path in (ROOT / "storage").glob("*.py")}
    wrong = [(row[0], name) for row in table_rows(doc_text())
             for name in re.findall(r"`([^`]+)`", row[-1])
             if name not in service_modules() and Path(name).name not in storage_files]
    assert not wrong, f"'written by' names no labeler/services module or storage file: {wrong}"


def test_every_service_module_is_named():
    spans = prose_spans()
    missing = sorted(name for name in service_modules()
                     if name not in spans and not any(span.endswith((f"/{name}.py", f"/{name}/")) for span in spans))
    assert not missing, f"labeler/services modules docs/ARCHITECTURE.md does not name: {missing}"


def test_every_service_group_is_named():
    spans = quoted(doc_text())
    missing = sorted(group for group in service_groups() if f"services/{group}/" not in spans and f"{group}/" not in spans)
    assert not missing, f"labeler/services groups docs/ARCHITECTURE.md does not name: {missing}"


def test_every_service_subpackage_module_is_named():
    spans = quoted(doc_text())
    missing = sorted(module for module in subpackage_modules()
                     if not any(span == module or span.endswith("services/" + module) for span in spans))
    assert not missing, f"labeler/services modules docs/ARCHITECTURE.md does not name: {missing}"


def test_every_services_subpackage_file_named_exists():
    """A `package/module.py` the Services section names is a module of that labeler/services package."""
    packages = {path.parent.name for path in SERVICES.glob("*/*/__init__.py")}
    named = {span.removeprefix("labeler/").removeprefix("services/") for span in quoted(section("Services"))
             if re.fullmatch(r"[\w/]+\.py", span)}
    named = {span.split("/", 1)[1] if span.split("/")[0] in service_groups() else span for span in named}
    named = {span for span in named if span.split("/")[0] in packages}
    assert named and not named - subpackage_modules(), f"not in labeler/services: {sorted(named - subpackage_modules())}"


def test_every_rlhf_module_is_named():
    spans = {span.removeprefix("rlhf/") for span in quoted(section("rlhf/"))}
    missing = sorted(rlhf_modules() - spans)
    assert not missing, f"rlhf/ modules the rlhf/ section of docs/ARCHITECTURE.md does not name: {missing}"


def test_the_rlhf_section_names_only_rlhf_modules():
    named = {span.removeprefix("rlhf/") for span in quoted(section("rlhf/")) if re.fullmatch(r"[\w/]+\.py", span)}
    wrong = sorted(named - rlhf_modules() - {"__init__.py"})
    assert named and not wrong, f"the rlhf/ section of docs/ARCHITECTURE.md names what rlhf/ does not hold: {wrong}"


def test_every_named_file_and_folder_exists():
    files = [str(path.relative_to(ROOT)) for folder in SOURCE_DIRS for path in (ROOT / folder).rglob("*.py")]
    folders = {str(Path(f).parent) for f in files}
    named = [span for span in quoted(doc_text()) if re.fullmatch(r"[\w/]+\.py", span)]
    missing = sorted(span for span in named if not any(f == span or f.endswith("/" + span) for f in files))
    named_folders = [span.rstrip("/") for span in quoted(doc_text()) if re.fullmatch(r"[\w/]+/", span)]
    missing += sorted(span + "/" for span in named_folders
                      if not any(f == span or f.endswith("/" + span) for f in folders))
    assert named and named_folders and not missing, f"docs/ARCHITECTURE.md names what does not exist: {missing}"


def test_every_named_service_function_exists():
    """`module.name` spans on a labeler/services module (or storage) name something that module defines."""
    owners = {name: service_source(name) for name in service_modules()}
    owners["storage"] = ROOT / "storage" / "__init__.py"
    named = [span.split(".") for span in quoted(doc_text()) if re.fullmatch(r"[a-z_]+\.[A-Za-z_]+", span)]
    checked = [(module, name) for module, name in named if module in owners and name != "py"]
    missing = sorted(f"{module}.{name}" for module, name in checked if name not in top_level_names(owners[module]))
    assert checked and not missing, f"docs/ARCHITECTURE.md names what does not exist: {missing}"


@pytest.mark.parametrize("package", ["labeler", "rlhf", "storage"])
def test_no_issue_numbers_in_code(package):
    """Why a line is so belongs in its comment; a tracker number says nothing to a reader of the code."""
    hits = [f"{path.relative_to(ROOT)}:{number}" for path in sorted((ROOT / package).rglob("*.py"))
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
            if re.search(r"\bissue\s*#?\d", line, flags=re.IGNORECASE)]
    assert not hits, hits
