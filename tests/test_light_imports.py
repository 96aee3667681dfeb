"""The command line, the services and the web app stay light to import: importing labeler.cli, a service module
or labeler.ui.app loads no torch, transformers or the trainers' libraries; those load inside the functions that
train, generate or score (docs/ARCHITECTURE.md, Layers)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "accelerate", "peft", "datasets", "sentence_transformers")
# Service modules that load torch when imported, being tensor work themselves; stage_runners imports them inside
# the function that needs them.
HEAVY_SERVICES = {"online_reward", "stage_runners_online"}


def light_modules() -> list[str]:
    services = sorted(path.stem for path in (ROOT / "labeler" / "services").glob("*.py")
                      if path.stem not in HEAVY_SERVICES | {"__init__"})
    return ["labeler.cli", *(f"labeler.services.{name}" for name in services), "labeler.ui.app"]


def heavy_imports_of(modules: list[str]) -> dict[str, list[str]]:
    """{module: the heavy packages that importing it loaded}. One interpreter imports the modules in turn (a
    fresh one per module would cost seconds each), so a package is put on the first module that loaded it."""
    script = (
        "import importlib, json, sys\n"
        f"heavy = {HEAVY!r}\n"
        "found = {}\n"
        f"for name in {modules!r}:\n"
        "    before = {m for m in heavy if m in sys.modules}\n"
        "    importlib.import_module(name)\n"
        "    found[name] = sorted(m for m in heavy if m in sys.modules and m not in before)\n"
        "print(json.dumps(found))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


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


def heavy_imports_of_commands(commands: list[list[str]]) -> dict[str, list[str]]:
    """{command line: the heavy packages that running `rlhf-studio <command line>` loaded}, in one interpreter."""
    script = (
        "import contextlib, io, json, sys\n"
        "import labeler.cli\n"
        f"heavy = {HEAVY!r}\n"
        "found = {}\n"
        f"for argv in {commands!r}:\n"
        "    before = {m for m in heavy if m in sys.modules}\n"
        "    with contextlib.redirect_stdout(io.StringIO()) as printed:\n"
        "        try:\n"
        "            labeler.cli.main(argv)\n"
        "        except SystemExit:\n"
        "            pass\n"
        "    assert printed.getvalue().strip(), argv  # the command printed its help, not an error\n"
        "    found[' '.join(argv)] = sorted(m for m in heavy if m in sys.modules and m not in before)\n"
        "print(json.dumps(found))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_help_and_settings_listing_import_no_torch():
    found = heavy_imports_of_commands([list(argv) for argv in HELP_COMMANDS])
    assert found == {" ".join(argv): [] for argv in HELP_COMMANDS}


def test_the_help_check_sees_a_heavy_import():
    # The sft trainer's config is a TrainingArguments: listing it imports transformers and torch.
    assert heavy_imports_of_commands([["train", "sft", "--list-settings"]])["train sft --list-settings"] != []
