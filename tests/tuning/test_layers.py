"""``viasd_adapt.tuning`` builds on ``viasd_adapt.bench`` (it prices and scores its candidates with the
bench's costs and fidelity), so ``viasd_adapt.bench`` must never import ``viasd_adapt.tuning``, not
even inside a function: what both need (the tuned.json artifact, the resolver, the budget) lives
below both, in ``viasd_adapt.config`` (the tuned.json artifact, the resolver, the budget)."""

from __future__ import annotations

import ast

import pytest

from tests.support import REPO_ROOT

LOWER = ("viasd_adapt/config/tuned.py", "viasd_adapt/config/resolve.py", "viasd_adapt/config/schema.py", "viasd_adapt/config/budget.py")


def imported_modules(path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("path", sorted((REPO_ROOT / "viasd_adapt" / "bench").glob("*.py")), ids=lambda p: p.name)
def test_the_bench_never_imports_tuning(path):
    offending = sorted(n for n in imported_modules(path) if n == "viasd_adapt.tuning" or n.startswith("viasd_adapt.tuning."))
    assert not offending, f"{path.name} imports {offending}"


@pytest.mark.parametrize("relative", LOWER)
def test_the_shared_layer_imports_neither(relative):
    names = imported_modules(REPO_ROOT / relative)
    offending = sorted(n for n in names if n.split(".")[:2] in (["viasd_adapt", "tuning"], ["viasd_adapt", "bench"],
                                                                  ["viasd_adapt", "cli"]))
    assert not offending, f"{relative} imports {offending}"
