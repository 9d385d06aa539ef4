"""The rooms of the package keep to docs/architecture.md: which room may import which.

The table is read from the page itself (:func:`allowed_imports`), so the page and the test cannot
drift. The import graph is read with ``ast`` by :func:`tests.core.test_import_graph.import_graph`
(every ``import`` counts, inside functions and under ``TYPE_CHECKING`` too), and so are the
``"module:function"`` strings a room imports on first use (:func:`string_edges`, the frameworks'
runners). Each module belongs to one room; every edge between two rooms must be one the table
allows. Controls feed the parser a table and the checker graphs with forbidden edges.
"""

from __future__ import annotations

import ast
import re

import pytest

from tests.core.test_import_graph import import_graph, project_modules
from tests.support import REPO_ROOT

ARCHITECTURE = REPO_ROOT / "docs" / "architecture.md"
RUNNER_STRING = re.compile(r"^(viasd_adapt(?:\.\w+)+):(\w+)$")


def _rooms_of_row(cell: str) -> list[str]:
    return re.findall(r"`([a-z_]+)/?`", re.sub(r"\(package root\)", "", cell))


def allowed_imports(page: str) -> tuple[dict[str, set[str]], dict[str, set[str]], set[str]]:
    """``(imports, by_string, base)`` read off the rooms table of docs/architecture.md, by the rules
    the page states above it: room -> the rooms it may import, room -> the rooms it may reach by
    ``"module:function"`` string, and the base rooms (the first row), open to every room."""
    rooms_section = page.split("## The rooms", 1)[-1].split("\n## ", 1)[0]  # the page's other tables are not rooms
    lines = [line for line in rooms_section.splitlines() if line.startswith("| `")]
    imports: dict[str, set[str]] = {}
    by_string: dict[str, set[str]] = {}
    above: list[str] = []
    base: set[str] = set()
    for line in lines:
        first, _, may = (cell.strip() for cell in line.strip("|").split("|"))
        rooms = _rooms_of_row(first)
        may = re.sub(r"\([^)]*\)", "", may)  # comments
        may, _, strings = may.partition("by string:")
        may, _, excluded = may.partition("except")
        allowed = set(re.findall(r"`([a-z_]+)/?`", may))
        if re.search(r"\bbase\b", may):
            allowed |= base
        if "above" in may:
            allowed |= set(above)
        allowed -= set(re.findall(r"`([a-z_]+)/?`", excluded))
        for position, room in enumerate(rooms):
            imports[room] = allowed | set(rooms[:position])
            by_string[room] = set(re.findall(r"`([a-z_]+)/?`", strings))
        if not base:
            base = set(rooms)
        above += rooms
    return imports, by_string, base


ALLOWED, BY_STRING, BASE = allowed_imports(ARCHITECTURE.read_text(encoding="utf-8"))


def room_of(module: str) -> str:
    """The room of an installed module name (``viasd_adapt.core.cycle`` -> ``core``)."""
    parts = module.split(".")
    if parts == ["viasd_adapt"]:
        return "package"
    return parts[1]


def forbidden_edges(graph: dict[str, set[str]], strings: dict[str, set[str]] | None = None) -> list[str]:
    """``importer -> imported (room -> room)`` for every import the table does not allow, and for
    every ``"module:function"`` string (``strings``) the table allows neither as an import nor by string."""
    found = []
    for edges, by_string in ((graph, False), (strings or {}, True)):
        for importer, imported in sorted(edges.items()):
            source = room_of(importer)
            for target in sorted(imported):
                room = room_of(target)
                if room == source or room in BASE:
                    continue
                if room not in ALLOWED.get(source, set()) | (BY_STRING.get(source, set()) if by_string else set()):
                    found.append(f"{importer} -> {target} ({source} -> {room}{', by string' if by_string else ''})")
    return found


def string_edges(modules: dict | None = None) -> tuple[dict[str, set[str]], list[str]]:
    """Module -> the project modules it names in ``"module:function"`` strings, and the strings that
    name no module of the project or no top-level name of it (a runner that cannot load)."""
    modules = project_modules() if modules is None else modules
    edges: dict[str, set[str]] = {}
    broken = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            match = RUNNER_STRING.match(node.value) if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
            if match is None:
                continue
            module, function = match.groups()
            if module not in modules or function not in top_level_names(modules[module].read_text(encoding="utf-8")):
                broken.append(f"{name}: {node.value!r}")
            else:
                edges.setdefault(name, set()).add(module)
    return edges, broken


def top_level_names(source: str) -> set[str]:
    """The names a module binds at its top level (functions, classes, assignments, imports)."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def test_every_module_is_in_a_room_the_table_names():
    rooms = {room_of(module) for module in import_graph()}
    assert rooms <= set(ALLOWED), f"rooms missing from the table: {sorted(rooms - set(ALLOWED))}"
    assert {"core", "config", "engine", "adapters", "search", "models", "training"} <= rooms  # the graph is not silently empty


def test_every_import_between_rooms_is_allowed():
    strings, broken = string_edges()
    assert not broken, f"runner strings that name nothing: {broken}"
    assert "viasd_adapt.adapters.hf" in strings["viasd_adapt.frameworks.registry"]  # the strings are seen
    problems = forbidden_edges(import_graph(), strings)
    assert not problems, "imports docs/architecture.md does not allow:\n  " + "\n  ".join(problems)


def test_the_table_is_read_as_the_page_states_it():
    """Spot checks of the parsed table, so that a parser that allows everything cannot pass."""
    assert BASE == {"errors", "io", "memory", "process_settings", "deprecated"}
    assert ALLOWED["core"] == BASE | {"checks", "cache_check"}
    assert ALLOWED["checks"] == BASE | {"prompts", "model_kind"} and ALLOWED["model_kind"] == BASE | {"prompts"}
    assert "search" not in ALLOWED["bench"] and {"frameworks", "models"} <= ALLOWED["bench"]
    assert "training" not in ALLOWED["models"] and "models" in ALLOWED["training"]  # loading never imports training
    assert all("training" not in ALLOWED[room] for room in ("frameworks", "bench", "tuning", "adapters", "search", "serving"))
    assert "training" in ALLOWED["cli"]  # `viasd models build`
    assert {"engine", "models", "frameworks"}.isdisjoint(ALLOWED["search"])
    assert {"serving", "tuning", "package"} <= ALLOWED["cli"] and "adapters" not in ALLOWED["cli"]
    assert "adapters" not in ALLOWED["frameworks"] and BY_STRING["frameworks"] == {"adapters"}
    assert ALLOWED["errors"] == set() and ALLOWED["io"] == {"errors"}


def test_the_parser_reads_a_control_table():
    page = (
        "| `a`, `b` (package root) | base rooms | nothing else |\n"
        "| `c/` | one | base, `a` (never `d`) |\n"
        "| `d/` | two | the rooms above; by string: `f` |\n"
        "| `e/` | three | everything above except `c` |\n"
    )
    imports, by_string, base = allowed_imports(page)
    assert base == {"a", "b"}
    assert imports == {"a": set(), "b": {"a"}, "c": {"a", "b"}, "d": {"a", "b", "c"}, "e": {"a", "b", "d"}}
    assert by_string["d"] == {"f"} and by_string["e"] == set()


def test_the_control_forbidden_imports_are_named():
    graph = {
        "viasd_adapt.core.cycle": {"viasd_adapt.config.tuned", "viasd_adapt.errors"},  # core may not read files
        "viasd_adapt.search.run": {"viasd_adapt.engine.loop"},  # the search must not import the engine
        "viasd_adapt.bench.run": {"viasd_adapt.tuning.tune"},  # the bench sits below tuning
        "viasd_adapt.config.tuned": {"viasd_adapt.core.settings", "viasd_adapt.io"},  # allowed
        "viasd_adapt.engine.tier": {"viasd_adapt.adapters.hf"},  # the core never imports an adapter
        "viasd_adapt.frameworks.registry": {"viasd_adapt.adapters.hf"},  # only by string
        "viasd_adapt.models.registry": {"viasd_adapt.training.presets"},  # loading a pair never imports training
        "viasd_adapt.cli.models": {"viasd_adapt.training.build", "viasd_adapt.models.registry"},  # allowed
    }
    strings = {
        "viasd_adapt.frameworks.registry": {"viasd_adapt.adapters.hf", "viasd_adapt.cli.main"},  # cli: not even by string
        "viasd_adapt.search.run": {"viasd_adapt.adapters.hf"},  # the search reaches no adapter, by string or not
    }
    problems = forbidden_edges(graph, strings)
    assert problems == [
        "viasd_adapt.bench.run -> viasd_adapt.tuning.tune (bench -> tuning)",
        "viasd_adapt.core.cycle -> viasd_adapt.config.tuned (core -> config)",
        "viasd_adapt.engine.tier -> viasd_adapt.adapters.hf (engine -> adapters)",
        "viasd_adapt.frameworks.registry -> viasd_adapt.adapters.hf (frameworks -> adapters)",
        "viasd_adapt.models.registry -> viasd_adapt.training.presets (models -> training)",
        "viasd_adapt.search.run -> viasd_adapt.engine.loop (search -> engine)",
        "viasd_adapt.frameworks.registry -> viasd_adapt.cli.main (frameworks -> cli, by string)",
        "viasd_adapt.search.run -> viasd_adapt.adapters.hf (search -> adapters, by string)",
    ]


def test_a_runner_string_that_names_nothing_is_found(tmp_path):
    package = tmp_path / "viasd_adapt"
    package.mkdir()
    (package / "runners.py").write_text("def run(pair, request):\n    pass\n")
    (package / "registry.py").write_text('RUNNERS = ["viasd_adapt.runners:run", "viasd_adapt.runners:gone", "viasd_adapt.nowhere:run"]\n')
    modules = {"viasd_adapt.runners": package / "runners.py", "viasd_adapt.registry": package / "registry.py"}
    edges, broken = string_edges(modules)
    assert edges == {"viasd_adapt.registry": {"viasd_adapt.runners"}}
    assert broken == ["viasd_adapt.registry: 'viasd_adapt.runners:gone'", "viasd_adapt.registry: 'viasd_adapt.nowhere:run'"]


@pytest.mark.parametrize("module", ["viasd_adapt.config.tuned", "viasd_adapt.config.resolve", "viasd_adapt.config.mask",
                                    "viasd_adapt.prompts.splits", "viasd_adapt.core.settings"])
def test_the_file_rooms_import_without_torch(module):
    """The CLI and a vLLM engine process read settings and artifacts before (or without) loading a model."""
    import subprocess
    import sys

    code = f"import sys, {module}; assert 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)[:3]"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
