"""The installed package's metadata (what `pip show rlhf-studio` and PyPI display)."""
from __future__ import annotations

import importlib.metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_package_metadata_names_its_license_readme_and_entry_point():
    meta = importlib.metadata.metadata("rlhf-studio")
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta["Description-Content-Type"] == "text/markdown"  # the README is the long description
    assert "RLHF Studio" in meta.json["description"]
    assert (ROOT / "LICENSE").read_text().count("Apache License") >= 1
    scripts = {e.name: e.value for e in importlib.metadata.entry_points(group="console_scripts")}
    assert scripts["rlhf-studio"] == "labeler.cli:main"
