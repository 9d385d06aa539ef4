"""Every warning class the project defines is an error in the test run (pyproject.toml's pytest
``filterwarnings``), so a test that provokes one must assert it (tests/support/expected_warnings.py)
and a new, unasserted one fails the suite instead of scrolling by in the warnings summary."""

from __future__ import annotations

import ast
import tomllib

from tests.support import REPO_ROOT

#: Source folder -> the package it is installed as (``viasd_adapt/adapters`` is a symlink to ``adapters/``).
SOURCE_ROOTS = {"viasd_adapt": "viasd_adapt", "adapters": "viasd_adapt.adapters"}


def _warning_classes() -> set[str]:
    """``module.Class`` of every class in the project's source that derives from a ``...Warning``."""
    found = set()
    for folder, package in SOURCE_ROOTS.items():
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            module = ".".join([package, *path.relative_to(REPO_ROOT / folder).with_suffix("").parts])
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                bases = [getattr(base, "id", getattr(base, "attr", "")) for base in getattr(node, "bases", [])]
                if isinstance(node, ast.ClassDef) and any(base.endswith("Warning") for base in bases):
                    found.add(f"{module.removesuffix('.__init__')}.{node.name}")
    return found


def test_every_project_warning_is_an_error_in_the_test_run():
    filters = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["filterwarnings"]
    errors = {f.split(":")[2] for f in filters if f.startswith("error::")}
    classes = _warning_classes()
    assert {"viasd_adapt.core.monitor.ViasdQualityWarning", "viasd_adapt.adapters.hf.checks.ViasdFallbackWarning"} <= classes
    assert classes <= errors, f"add to pyproject.toml's filterwarnings: {sorted(classes - errors)}"
    assert "error:viasd-adapt" in filters  # and any warning whose message starts with the project's name
