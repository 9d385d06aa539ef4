"""The mask search scores masks with teacher-forced forwards only: it never imports the decoding
engine or the framework runners, not even through a module it imports (imports inside functions
count, as in ``tests/core/test_import_graph.py``)."""

from __future__ import annotations

from tests.core.test_import_graph import import_graph

FORBIDDEN = ("viasd_adapt.engine", "viasd_adapt.frameworks", "viasd_adapt.adapters")


def reachable(graph: dict[str, set[str]], roots: list[str]) -> dict[str, str | None]:
    """Every module reachable from ``roots``, with the module that first imported it (None: a root)."""
    parent: dict[str, str | None] = {root: None for root in roots}
    stack = list(roots)
    while stack:
        node = stack.pop()
        for child in sorted(graph.get(node, ())):
            if child not in parent:
                parent[child] = node
                stack.append(child)
    return parent


def chain(parent: dict[str, str | None], module: str) -> str:
    links = [module]
    while parent[links[-1]] is not None:
        links.append(parent[links[-1]])
    return " <- ".join(links)


def test_reachable_follows_imports_and_names_the_chain():
    graph = {"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a"}}
    parent = reachable(graph, ["a"])
    assert set(parent) == {"a", "b", "c"} and chain(parent, "c") == "c <- b <- a"


def test_the_search_never_imports_the_decoding_engine():
    graph = import_graph()
    roots = sorted(m for m in graph if m == "viasd_adapt.search" or m.startswith("viasd_adapt.search."))
    assert "viasd_adapt.search.pipeline" in roots and "viasd_adapt.search.guided" in roots
    parent = reachable(graph, roots)
    assert "viasd_adapt.routing.slim" in parent  # the graph is followed, not empty
    offending = sorted(m for m in parent if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))
    chains = "\n  ".join(chain(parent, module) for module in offending)
    assert not offending, "the search imports the decoding engine:\n  " + chains
