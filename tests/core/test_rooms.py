"""The rooms of the package keep to docs/architecture.md: which room may import which.

The import graph is read with ``ast`` by :func:`tests.core.test_import_graph.import_graph` (every
``import`` counts, inside functions and under ``TYPE_CHECKING`` too). Each module belongs to one
room; every edge between two rooms must be one the table of docs/architecture.md allows. A control
feeds the checker a graph with forbidden edges and asserts it names them.
"""

from __future__ import annotations

import re

import pytest

from tests.core.test_import_graph import import_graph
from tests.support import REPO_ROOT

BASE = {"errors", "io"}
#: room -> the rooms it may import (besides itself and the base modules), as docs/architecture.md says
ALLOWED: dict[str, set[str]] = {}
ALLOWED["prompts"] = set()
ALLOWED["model_kind"] = {"prompts"}
ALLOWED["checks"] = {"prompts", "model_kind"}
ALLOWED["core"] = {"checks"}
ALLOWED["config"] = {"core"}
ALLOWED["routing"] = {"checks", "model_kind", "core", "config"}
_below_engine = {"prompts", "model_kind", "checks", "core", "config", "routing"}
ALLOWED["engine"] = _below_engine
ALLOWED["models"] = _below_engine | {"engine"}
ALLOWED["frameworks"] = ALLOWED["models"] | {"models"}
ALLOWED["search"] = {"prompts", "model_kind", "checks", "core", "config", "routing"}
ALLOWED["bench"] = ALLOWED["frameworks"] | {"frameworks"}
ALLOWED["tuning"] = ALLOWED["bench"] | {"bench", "search"}
ALLOWED["serving"] = {"core", "config", "routing"}
ALLOWED["cli"] = ALLOWED["tuning"] | {"tuning", "package"}  # the package root: its version (viasd --version)
ALLOWED["adapters"] = {"checks", "model_kind", "core", "config", "routing", "engine", "models", "frameworks"}
# cache_check (how a cache checks what it reads back) sits beside checks: open to every room checks is
for room, allowed in list(ALLOWED.items()):
    if "checks" in allowed:
        allowed.add("cache_check")
ALLOWED["cache_check"] = set()
ALLOWED["package"] = set()  # viasd_adapt/__init__.py: the version, and names it hands out lazily by string
for base in BASE:
    ALLOWED[base] = set() if base == "errors" else {"errors"}


def room_of(module: str) -> str:
    """The room of an installed module name (``viasd_adapt.core.cycle`` -> ``core``)."""
    parts = module.split(".")
    if parts == ["viasd_adapt"]:
        return "package"
    return parts[1]


def forbidden_edges(graph: dict[str, set[str]]) -> list[str]:
    """``importer -> imported (room -> room)`` for every import the table does not allow."""
    found = []
    for importer, imported in sorted(graph.items()):
        source = room_of(importer)
        for target in sorted(imported):
            room = room_of(target)
            if room == source or room in BASE:
                continue
            if room not in ALLOWED.get(source, set()):
                found.append(f"{importer} -> {target} ({source} -> {room})")
    return found


def test_every_module_is_in_a_room_the_table_names():
    rooms = {room_of(module) for module in import_graph()}
    assert rooms <= set(ALLOWED), f"rooms missing from the table: {sorted(rooms - set(ALLOWED))}"
    assert {"core", "config", "engine", "adapters", "search"} <= rooms  # the graph is not silently empty


def test_every_import_between_rooms_is_allowed():
    problems = forbidden_edges(import_graph())
    assert not problems, "imports docs/architecture.md does not allow:\n  " + "\n  ".join(problems)


def test_the_control_forbidden_imports_are_named():
    graph = {
        "viasd_adapt.core.cycle": {"viasd_adapt.config.tuned", "viasd_adapt.errors"},  # core may not read files
        "viasd_adapt.search.run": {"viasd_adapt.engine.loop"},  # the search must not import the engine
        "viasd_adapt.bench.run": {"viasd_adapt.tuning.tune"},  # the bench sits below tuning
        "viasd_adapt.config.tuned": {"viasd_adapt.core.settings", "viasd_adapt.io"},  # allowed
        "viasd_adapt.engine.tier": {"viasd_adapt.adapters.hf"},  # the core never imports an adapter
    }
    problems = forbidden_edges(graph)
    assert problems == [
        "viasd_adapt.bench.run -> viasd_adapt.tuning.tune (bench -> tuning)",
        "viasd_adapt.core.cycle -> viasd_adapt.config.tuned (core -> config)",
        "viasd_adapt.engine.tier -> viasd_adapt.adapters.hf (engine -> adapters)",
        "viasd_adapt.search.run -> viasd_adapt.engine.loop (search -> engine)",
    ]


def test_the_architecture_page_names_every_room():
    page = (REPO_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table_rooms = set(re.findall(r"^\| `([a-z_]+)/?`", page, flags=re.M))
    table_rooms |= {name for row in re.findall(r"^\| (`[a-z_]+`(?:, `[a-z_]+`)+) \(package root\)", page, flags=re.M)
                    for name in re.findall(r"`([a-z_]+)`", row)}
    assert set(ALLOWED) - {"package"} <= table_rooms, sorted(set(ALLOWED) - {"package"} - table_rooms)


@pytest.mark.parametrize("module", ["viasd_adapt.config.tuned", "viasd_adapt.config.resolve", "viasd_adapt.config.mask",
                                    "viasd_adapt.prompts.splits", "viasd_adapt.core.settings"])
def test_the_file_rooms_import_without_torch(module):
    """The CLI and a vLLM engine process read settings and artifacts before (or without) loading a model."""
    import subprocess
    import sys

    code = f"import sys, {module}; assert 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)[:3]"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
