"""The command line, the services and the web app stay light to import: importing labeler.cli, a service module
or labeler.ui.app loads no torch, transformers or the trainers' libraries; those load inside the functions that
train, generate or score (docs/ARCHITECTURE.md, Layers)."""
from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from test_import_cycles import imported_by, module_files, top_level_imports

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "accelerate", "peft", "datasets", "sentence_transformers")
# Service modules that load torch when imported, being tensor work themselves; their callers import them inside
# the function that needs them (runners/__init__.py the online runners, common.py the online reward model).
HEAVY_SERVICES = {"labels.online_reward", "training.runners.online", "training.runners.online_dpo"}


def light_modules() -> list[str]:
    """labeler.cli, the app, and every labeler/services module (in its packages too) but the heavy ones."""
    services_dir = ROOT / "labeler" / "services"
    services = sorted(".".join(path.relative_to(services_dir).with_suffix("").parts).removesuffix(".__init__")
                      for path in services_dir.rglob("*.py"))
    return ["labeler.cli", *(f"labeler.services.{name}" for name in services
                             if name not in HEAVY_SERVICES | {"__init__"}), "labeler.ui.app"]


def newly_loaded(items: list, step: str, heavy: tuple[str, ...] = HEAVY, prelude: str = "") -> list[list[str]]:
    """For each item in turn, in one interpreter (after `prelude`): the `heavy` modules that running `step` (Python
    lines using `item`) loaded. A fresh interpreter per item would cost seconds each, so a module is put on the
    first item that loaded it."""
    script = (
        "import contextlib, importlib, io, json, sys\n" + prelude
        + f"heavy = {heavy!r}\nfound = []\nfor item in {items!r}:\n"
        "    before = {m for m in heavy if m in sys.modules}\n"
        + textwrap.indent(step, "    ")
        + "    found.append(sorted(m for m in heavy if m in sys.modules and m not in before))\n"
        "print(json.dumps(found))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def heavy_imports_of(modules: list[str]) -> dict[str, list[str]]:
    """{module: the heavy packages that importing it loaded}."""
    return dict(zip(modules, newly_loaded(modules, "importlib.import_module(item)\n")))


def test_cli_services_and_app_import_no_torch():
    found = heavy_imports_of(light_modules())
    assert {name: packages for name, packages in found.items() if packages} == {}


def test_the_check_sees_a_heavy_import():
    assert heavy_imports_of(["json", "torch", "labeler.cli"]) == {"json": [], "torch": ["torch"], "labeler.cli": []}


# Printing help or the settings builds every subcommand's parser and lists every field's default; bf16's default
# asks the hardware (torch, for a GPU) and must be shown in words instead. `train ppo`: the other stages' configs
# are transformers' TrainingArguments, whose listing needs transformers itself.
HELP_COMMANDS = (["--help"], ["train", "--help"], ["train", "ppo", "--help"], ["train", "ppo", "--list-settings"],
                 ["demo", "--help"])


def heavy_imports_of_commands(commands: list[list[str]], heavy: tuple[str, ...] = HEAVY) -> dict[str, list[str]]:
    """{command line: the `heavy` modules that running `rlhf-studio <command line>` loaded}, in one interpreter."""
    run_command = (
        "with contextlib.redirect_stdout(io.StringIO()) as printed:\n"
        "    try:\n"
        "        labeler.cli.main(item)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "assert printed.getvalue().strip(), item  # the command printed its help, not an error\n"
    )
    loaded = newly_loaded(commands, run_command, heavy, prelude="import labeler.cli\n")
    return {" ".join(argv): modules for argv, modules in zip(commands, loaded)}


def test_help_and_settings_listing_import_no_torch():
    found = heavy_imports_of_commands([list(argv) for argv in HELP_COMMANDS])
    assert found == {" ".join(argv): [] for argv in HELP_COMMANDS}


def test_the_help_check_sees_what_a_command_loads():
    # Building the parser loads each command's module (the ones importing torch would be seen the same way;
    # `train sft --list-settings` loads torch, TrainingArguments being its config, but takes seconds more).
    watched = ("labeler.commands.train",)
    assert heavy_imports_of_commands([["--help"], ["train", "--help"]], watched) == {
        "--help": ["labeler.commands.train"], "train --help": []}


# ---- late imports -------------------------------------------------------------------------------------------
# A function imports a module only when importing it at the top would cost what the rule spares the light paths:
# a heavy package, an optional one that a single feature needs (yaml for .yaml files, pyarrow for parquet, the
# Hub client for pushing), or a module of ours that imports a heavy package when it is imported.
HEAVY_AT_IMPORT = {*HEAVY, "gradio"}
LATE_PACKAGES = {*HEAVY_AT_IMPORT, "yaml", "pyarrow", "huggingface_hub"}


def late_imports(source: str, name: str, is_package: bool, known: set[str]) -> list[tuple[int, str]]:
    """(line, module) of every import inside a function of the module."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for function in ast.walk(ast.parse(source)):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    found.update((node.lineno, module) for module in imported_by(node, package, known))
    return sorted(found)


def misplaced_late_imports(root: Path, packages=("labeler",)) -> list[str]:
    """'file:line imports X in a function' for each late import of a module that is light, or that the file
    already imports at its top: either belongs at the top."""
    files = module_files(root, ("labeler", "storage", "rlhf"))
    known = set(files)
    top = {name: top_level_imports(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", known)
           for name, path in files.items()}

    @functools.lru_cache(maxsize=None)
    def heavy(module: str) -> bool:
        if module not in known:
            return module.split(".")[0] in HEAVY_AT_IMPORT
        return any(heavy(imported) for imported in top[module])

    wrong = []
    for name, path in files.items():
        where = path.relative_to(root).as_posix()
        if not where.startswith(tuple(f"{package}/" for package in packages)):
            continue
        for line, module in late_imports(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", known):
            at_top = module in top[name] or (module not in known and module.split(".")[0] in
                                             {imported.split(".")[0] for imported in top[name]})
            if at_top:
                wrong.append(f"{where}:{line} imports {module} in a function, and at the top already")
            elif not (heavy(module) or module not in known and module.split(".")[0] in LATE_PACKAGES):
                wrong.append(f"{where}:{line} imports {module} in a function, but it is light")
    return wrong


def test_functions_import_only_heavy_or_optional_modules():
    # No exceptions: docs/ARCHITECTURE.md's rule has none (a cycle is not one, test_import_cycles reads these too).
    assert misplaced_late_imports(ROOT, ("labeler", "storage")) == []


def test_the_late_import_check_sees_light_and_repeated_imports(tmp_path):
    package = tmp_path / "labeler"
    package.mkdir()
    for folder in ("storage", "rlhf"):
        (tmp_path / folder).mkdir()
    (package / "__init__.py").write_text("")
    (package / "light.py").write_text("import json\n")
    (package / "heavy.py").write_text("import torch\n")
    (package / "user.py").write_text(
        "import os\nfrom labeler import light\n"
        "def f():\n    import torch\n    from labeler import heavy\n    import fcntl\n"
        "    from labeler.light import json\n    import os.path\n")
    assert misplaced_late_imports(tmp_path) == [
        "labeler/user.py:6 imports fcntl in a function, but it is light",
        "labeler/user.py:7 imports labeler.light in a function, and at the top already",
        "labeler/user.py:8 imports os.path in a function, and at the top already",
    ]
