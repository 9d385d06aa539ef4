"""Architecture test: the modules of ``viasd_adapt/`` and ``adapters/`` form an import graph without
cycles, and the core never imports an adapter.

Why: an import cycle that only closes inside a function works until someone moves the import to
the top of a file (or imports the modules in another order), and then fails with a half-initialised
module. And when the core imports an adapter, the adapter cannot be removed, replaced or tested on
its own. Python reports neither until it is too late, so this test reads the source with :mod:`ast`
and checks both.

How the graph is built (each rule is deliberate):

* Nodes are the project's modules, named as they are installed: ``viasd_adapt/...`` as
  ``viasd_adapt...`` and ``adapters/...`` as ``viasd_adapt.adapters...`` (``viasd_adapt/adapters``
  is a symlink to ``adapters/``, which the walk of ``viasd_adapt/`` does not follow, so
  ``adapters/`` is walked on its own). A package is its ``__init__.py``, named by the package (``viasd_adapt.routing``).
* Every ``import`` / ``from ... import`` statement counts, wherever it sits: at the top, inside a
  function or method, under ``try``, and under ``if TYPE_CHECKING:``. A type-only import names a
  dependency just as much as a runtime one (a cycle that only closes in type hints still means the
  two modules cannot be understood apart), and counting it is the simplest rule that cannot be
  gamed by moving an import under a guard.
* ``import a.b.c`` and ``from a.b import c`` where ``a.b.c`` is a module are edges to ``a.b.c``.
  ``from a.b import name`` where ``name`` is not a submodule (a function, class or re-export) is an
  edge to ``a.b`` itself, i.e. to the package's ``__init__.py`` when ``a.b`` is a package. So
  ``from viasd_adapt.search import x`` inside ``viasd_adapt/search/foo.py`` *is* a cycle through
  ``search/__init__.py`` when that ``__init__`` imports ``foo``, but a package importing its own
  submodules (re-exports) is not a cycle with them unless one of them imports the package back.
* Python runs every parent package's ``__init__`` before ``a.b.c`` itself, so a module *outside*
  package ``a.b`` that imports ``a.b.c`` also depends on ``a/b/__init__.py`` (an edge to ``a.b``):
  ``checks`` importing ``routing.layers`` would run ``routing/__init__``, which imports
  ``routing.slim``, which imports ``checks`` again. A module *inside* ``a.b`` gets no such edge:
  its package is already initialising when it runs, which is what makes re-exports acyclic.
* Relative imports are resolved against the importing module's package. Imports of anything
  outside the project (torch, transformers, eagle) are not edges.
* Two views are checked: modules (no cycle at all), and *units*, where each subpackage
  (``routing``, ``search``, ``bench``, ``tuning``, ``models``, ``adapters.eagle``, ...) is one node
  and every other module is its own node (no cycle between packages: a package is a layer).
* Not imports, and so not edges: string-based lazy registries, such as the ``"module:function"``
  runner strings of :mod:`viasd_adapt.frameworks` loaded by :func:`importlib.import_module`. They
  are a plugin registry: the core names a plugin by a string and never depends on its code, which
  is exactly how a third-party framework would register itself. tests/core/test_rooms.py reads
  those strings and checks them against the rooms table (docs/architecture.md, "by string").
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

#: Source folder -> the package name it is installed as (``viasd_adapt/adapters`` is a symlink to ``adapters/``).
SOURCE_ROOTS = {"viasd_adapt": "viasd_adapt", "adapters": "viasd_adapt.adapters"}
ADAPTERS = "viasd_adapt.adapters"

#: Containers of modules rather than layers: their modules are each a unit of their own.
CONTAINERS = frozenset({"viasd_adapt", ADAPTERS})

def module_name(path: Path, folder: Path, package: str) -> str:
    """The installed module name of ``path``, a ``.py`` file under ``folder`` (installed as ``package``)."""
    parts = list(path.relative_to(folder).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def project_modules(repo_root: Path = REPO_ROOT) -> dict[str, Path]:
    """Every module of the project: installed name -> source file."""
    modules: dict[str, Path] = {}
    for folder_name, package in SOURCE_ROOTS.items():
        folder = repo_root / folder_name
        for path in sorted(folder.rglob("*.py")):
            modules[module_name(path, folder, package)] = path
    return modules


def _resolve_relative(importer: str, is_package: bool, level: int, module: str | None) -> str:
    """The absolute name of ``from <level dots><module> import ...`` written in ``importer``."""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]  # a plain module's relative imports start at its package
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imported_modules(tree: ast.AST, importer: str, is_package: bool, known: set[str]) -> set[str]:
    """The project modules that the source ``tree`` of module ``importer`` imports, anywhere in it."""
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    targets.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            source = (_resolve_relative(importer, is_package, node.level, node.module)
                      if node.level else node.module or "")
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in known:
                    targets.add(submodule)
                elif source in known:
                    targets.add(source)
    for target in list(targets):  # parent packages initialised on the way (module docstring)
        parts = target.split(".")
        for end in range(1, len(parts)):
            package = ".".join(parts[:end])
            if package in known and not (importer == package or importer.startswith(package + ".")):
                targets.add(package)
    targets.discard(importer)
    return targets


def import_graph(repo_root: Path = REPO_ROOT) -> dict[str, set[str]]:
    """Module -> the project modules it imports (see the module docstring for the rules)."""
    modules = project_modules(repo_root)
    known = set(modules)
    graph = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        graph[name] = imported_modules(tree, name, path.name == "__init__.py", known)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of ``graph`` that has one, as a path
    ``[a, b, ..., a]``. Tarjan's algorithm (iterative, so deep graphs cannot hit the recursion limit),
    then a breadth-first search inside each component for a shortest cycle through its first node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    components.append(sorted(component))
    return [_shortest_cycle(graph, component) for component in sorted(components)]


def _shortest_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest cycle through ``component[0]`` that stays inside ``component``."""
    start, members = component[0], set(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph.get(node, ())):
                if child not in members:
                    continue
                if child == start:  # walk back from node to start, then close the loop
                    chain = [node]
                    while chain[-1] != start:
                        chain.append(previous[chain[-1]])
                    return [*reversed(chain), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle through {start} inside its component {component}")  # pragma: no cover


def unit_of(module: str) -> str:
    """The package-level node of ``module``: its subpackage (``viasd_adapt.routing`` for
    ``viasd_adapt.routing.slim``), or itself when it sits directly in a container."""
    parts = module.split(".")
    for end in range(2, len(parts) + 1):
        prefix = ".".join(parts[:end])
        if prefix not in CONTAINERS:
            return prefix
    return module


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``graph`` collapsed to units (:func:`unit_of`)."""
    units: dict[str, set[str]] = {}
    for node, children in graph.items():
        unit = unit_of(node)
        units.setdefault(unit, set()).update(
            unit_of(child) for child in children if unit_of(child) != unit)
    return units


# ---------------------------------------------------------------------------------------------------
# The cycle finder and the graph builder themselves (so that the architecture tests can fail)


def test_find_cycles_reports_each_cycle_as_a_path():
    graph = {
        "a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(),  # a -> b -> c -> a
        "e": {"f"}, "f": {"e"},                                 # e <-> f
        "g": {"g"},                                             # a self-import
        "h": {"i"}, "i": {"d"},                                 # acyclic
    }
    assert find_cycles(graph) == [["a", "b", "c", "a"], ["e", "f", "e"], ["g", "g"]]


def test_find_cycles_finds_nothing_in_a_dag():
    graph = {"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}
    assert find_cycles(graph) == []


def test_find_cycles_gives_a_shortest_path_through_a_tangled_component():
    graph = {"a": {"b", "x"}, "b": {"c"}, "c": {"d"}, "d": {"a"}, "x": {"a"}}
    assert find_cycles(graph) == [["a", "x", "a"]]


def test_graph_builder_counts_function_level_type_checking_and_package_imports(tmp_path):
    pkg = tmp_path / "viasd_adapt"
    (pkg / "search").mkdir(parents=True)
    (tmp_path / "adapters").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "core.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from viasd_adapt.adapters.fw import Runner\n"
        "def f():\n    import viasd_adapt.search.foo\n"
        "RUNNER = 'viasd_adapt.adapters.fw:run'  # a string, not an import\n")
    (pkg / "search" / "__init__.py").write_text("from viasd_adapt.search.foo import x\n")
    (pkg / "search" / "foo.py").write_text("x = 1\n")
    (pkg / "search" / "bar.py").write_text("from viasd_adapt.search import x\nfrom . import foo\n")
    (pkg / "search" / "baz.py").write_text("def g():\n    from viasd_adapt.search import x\n")
    (tmp_path / "adapters" / "__init__.py").write_text("")
    (tmp_path / "adapters" / "fw.py").write_text("from ..core import f\nimport torch\n")

    graph = import_graph(tmp_path)

    # core is outside both packages, so it also depends on their __init__ (run before the module)
    assert graph["viasd_adapt.core"] == {"viasd_adapt.adapters", "viasd_adapt.adapters.fw", "viasd_adapt.search",
                                         "viasd_adapt.search.foo"}
    assert graph["viasd_adapt.search"] == {"viasd_adapt.search.foo"}
    assert graph["viasd_adapt.search.bar"] == {"viasd_adapt.search", "viasd_adapt.search.foo"}
    assert graph["viasd_adapt.adapters.fw"] == {"viasd_adapt.core"}
    # re-exports alone are no cycle; the adapter importing the core back (via a type hint) is one
    assert find_cycles(graph) == [["viasd_adapt.adapters.fw", "viasd_adapt.core", "viasd_adapt.adapters.fw"]]
    assert core_imports_of_adapters(graph) == ["viasd_adapt.core -> viasd_adapt.adapters",
                                               "viasd_adapt.core -> viasd_adapt.adapters.fw"]
    # search/foo.py importing its own package back closes a cycle through search/__init__.py
    (pkg / "search" / "foo.py").write_text("def h():\n    from viasd_adapt.search import bar\n"
                                           "    from viasd_adapt.search import x\n")
    assert ["viasd_adapt.search", "viasd_adapt.search.foo", "viasd_adapt.search"] in find_cycles(import_graph(tmp_path))


def test_importing_a_submodule_from_outside_runs_its_package_init(tmp_path):
    # checks -> routing.layers looks harmless, but runs routing/__init__, which imports slim -> checks
    pkg = tmp_path / "viasd_adapt"
    (pkg / "routing").mkdir(parents=True)
    (tmp_path / "adapters").mkdir()
    for init in (pkg / "__init__.py", tmp_path / "adapters" / "__init__.py"):
        init.write_text("")
    (pkg / "checks.py").write_text("def f():\n    from viasd_adapt.routing.layers import g\n")
    (pkg / "routing" / "__init__.py").write_text("from viasd_adapt.routing.slim import S\n")
    (pkg / "routing" / "layers.py").write_text("g = 1\n")
    (pkg / "routing" / "slim.py").write_text("from viasd_adapt.checks import f\nfrom viasd_adapt.routing.layers import g\n")

    graph = import_graph(tmp_path)

    assert graph["viasd_adapt.checks"] == {"viasd_adapt.routing", "viasd_adapt.routing.layers"}
    assert graph["viasd_adapt.routing.slim"] == {"viasd_adapt.checks", "viasd_adapt.routing.layers"}  # inside: no init edge
    assert find_cycles(graph) == [["viasd_adapt.checks", "viasd_adapt.routing", "viasd_adapt.routing.slim",
                                   "viasd_adapt.checks"]]


def test_package_view_collapses_subpackages():
    assert [unit_of(m) for m in ("viasd_adapt.routing.slim", "viasd_adapt.checks", "viasd_adapt",
                                 "viasd_adapt.adapters.hf", "viasd_adapt.adapters.eagle.session")] == [
        "viasd_adapt.routing", "viasd_adapt.checks", "viasd_adapt", "viasd_adapt.adapters.hf", "viasd_adapt.adapters.eagle"]
    graph = {"viasd_adapt.bench.a": {"viasd_adapt.tuning.b"}, "viasd_adapt.tuning.b": set(),
             "viasd_adapt.tuning.c": {"viasd_adapt.bench.d"}, "viasd_adapt.bench.d": set(),
             "viasd_adapt.adapters.eagle.x": {"viasd_adapt.adapters.hf"}, "viasd_adapt.adapters.hf": set()}
    assert find_cycles(graph) == []  # no module cycle ...
    assert find_cycles(package_graph(graph)) == [["viasd_adapt.bench", "viasd_adapt.tuning", "viasd_adapt.bench"]]


# ---------------------------------------------------------------------------------------------------
# The project's own graph


def core_imports_of_adapters(graph: dict[str, set[str]]) -> list[str]:
    """``importer -> imported`` for every core module that imports an adapter module."""
    def is_adapter(name: str) -> bool:
        return name == ADAPTERS or name.startswith(ADAPTERS + ".")

    return [f"{node} -> {child}" for node in sorted(graph) if not is_adapter(node)
            for child in sorted(graph[node]) if is_adapter(child)]


@pytest.fixture(scope="module")
def project_graph() -> dict[str, set[str]]:
    return import_graph()


def test_the_graph_covers_the_core_and_the_adapters(project_graph):
    # guards against a graph that is silently empty (a wrong root would make every check pass)
    for name in ("viasd_adapt.engine.loop", "viasd_adapt.routing.slim", "viasd_adapt.adapters.hf",
                 "viasd_adapt.adapters.eagle", "viasd_adapt.adapters.eagle.compat"):
        assert name in project_graph
    assert "viasd_adapt.routing.layers" in project_graph["viasd_adapt.routing.slim"]


def _paths(cycles: list[list[str]]) -> str:
    return "\n".join("  " + " -> ".join(cycle) for cycle in cycles)


def test_no_import_cycles(project_graph):
    cycles = find_cycles(project_graph)
    assert not cycles, ("import cycles between modules (imports inside functions and TYPE_CHECKING blocks count; "
                        "move the shared piece down to a module both can import):\n" + _paths(cycles))


def test_no_import_cycles_between_packages(project_graph):
    cycles = find_cycles(package_graph(project_graph))
    assert not cycles, "import cycles between packages (each subpackage is a layer):\n" + _paths(cycles)


def test_the_core_never_imports_an_adapter(project_graph):
    offending = core_imports_of_adapters(project_graph)
    assert not offending, ("the core imports adapter modules (name them by a registry string instead, or move "
                           "the shared piece into the core):\n  " + "\n  ".join(offending))
