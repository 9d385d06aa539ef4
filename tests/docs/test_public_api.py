"""The public API: what docs/api.md lists, ``viasd_adapt.__all__``, and a snapshot of both.

The snapshot (:data:`SNAPSHOT`) is the API as released: a change to docs/api.md or to the package's
``__all__`` fails here until the snapshot is changed with it, in the same reviewed diff, and a
removal or move then needs its deprecation path (tests/docs/test_moved_paths.py) and a changelog
entry. Each listed module's ``__all__`` is its row of the page, no more and no less. Every listed name must import from its module without a warning, and every import that the
README, docs/ and examples/ show must be of a listed name (so the documentation teaches only
the public API). Each checker has a control.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import warnings

import pytest

import viasd_adapt
from tests.support import REPO_ROOT

API_PAGE = REPO_ROOT / "docs" / "api.md"

#: The public API of 0.3.0: module -> names.
SNAPSHOT: dict[str, set[str]] = {
    "viasd_adapt": {"__version__", "load_pair", "LoadedPair", "TierSettings", "Mode", "context", "RunContext"},
    "viasd_adapt.adapters.hf": {"tiered", "patch", "unpatch", "TierSession", "ViasdCacheWarning", "ViasdFallbackWarning"},
    "viasd_adapt.adapters.eagle": {"tiered", "generate", "load_ea_model", "EagleOptions", "EagleTierSession"},
    "viasd_adapt.adapters.pearl": {"generate", "pearl_generate"},
    "viasd_adapt.core.settings": {"TierSettings", "Mode"},
    "viasd_adapt.core.sampling": {"SamplingConfig"},
    "viasd_adapt.core.hooks": {"hookimpl", "make_plugin_manager", "TokenEvent"},
    "viasd_adapt.core.rules": {"TierRules", "BUILTIN_RULES", "rule_for"},
    "viasd_adapt.core.modes": {"Mode", "ModeRow", "ModeRules", "Check", "CyclePath", "mode_row", "register_mode",
                               "registered_mode"},
    "viasd_adapt.core.plugins": {"GreedyArgmaxAcceptance"},
    "viasd_adapt.core.tiers": {"Tier"},
    "viasd_adapt.core.metrics": {"TierMetrics"},
    "viasd_adapt.core.monitor": {"ViasdQualityWarning"},
    "viasd_adapt.config.mask": {"RoutingMask", "MaskArtifact"},
    "viasd_adapt.models.registry": {"resolve_pair"},
    "viasd_adapt.models.tiny": {"tiny_model"},
    "viasd_adapt.routing": {"SlimVerifier"},
    "viasd_adapt.engine.context": {"RunContext", "context", "open_context"},
    "viasd_adapt.engine.drafters": {"ModelDrafter"},
    "viasd_adapt.engine.verifier": {"TieredVerifier"},
    "viasd_adapt.engine.loop": {"speculative_generate", "GenerationOutput"},
    "viasd_adapt.search.config": {"CalibrationConfig", "GuidedConfig", "SearchConfig", "BOConfig"},
    "viasd_adapt.search.pipeline": {"search_pair", "SearchOutcome"},
    "viasd_adapt.tuning.onboard": {"add_pair", "AddRequest"},
    "viasd_adapt.search.report": {"ReportInput"},
    "viasd_adapt.bench.session": {"BenchConfig", "run_bench_session"},
    "viasd_adapt.prompts.chat": {"encode_prompt"},
    "viasd_adapt.serving.vllm_plugin": {"engine_config", "VllmVersionError"},
    "viasd_adapt.errors": {"ViasdError", "ConfigError", "ModelMismatchError", "UnsupportedModelError"},
}


def listed_api(page: str) -> dict[str, set[str]]:
    """module -> names, from the ``| `module` | `name`, ... |`` rows of docs/api.md."""
    api: dict[str, set[str]] = {}
    for module, names in re.findall(r"^\| `(viasd_adapt[\w.]*)` \| (.+) \|$", page, flags=re.M):
        api.setdefault(module, set()).update(re.findall(r"`(\w+)`", names))
    return api


def api_drift(listed: dict[str, set[str]], package_all: list[str], snapshot: dict[str, set[str]]) -> list[str]:
    """What differs between the page, the package's ``__all__`` and the snapshot."""
    problems = []
    for module in sorted(set(listed) | set(snapshot)):
        added, removed = listed.get(module, set()) - snapshot.get(module, set()), snapshot.get(module, set()) - listed.get(module, set())
        problems += [f"docs/api.md lists {module}.{name}, the snapshot does not" for name in sorted(added)]
        problems += [f"docs/api.md no longer lists {module}.{name}" for name in sorted(removed)]
    if set(package_all) != listed.get("viasd_adapt", set()):
        problems.append(f"viasd_adapt.__all__ {sorted(package_all)} is not what docs/api.md lists for the package")
    return problems


def all_drift(listed: dict[str, set[str]], import_module=importlib.import_module) -> list[str]:
    """Where a listed module's ``__all__`` is not the page's row for it: every listed module has an
    ``__all__``, and it names exactly what the page lists (no more: a name a module imports for its
    own use is not public by being importable; no less: a listed name is exported)."""
    problems = []
    for module in sorted(listed):
        exported = getattr(import_module(module), "__all__", None)
        if exported is None:
            problems.append(f"{module} has no __all__")
            continue
        problems += [f"{module}.__all__ has {name}, which docs/api.md does not list" for name in sorted(set(exported) - listed[module])]
        problems += [f"{module}.__all__ lacks {name}, which docs/api.md lists" for name in sorted(listed[module] - set(exported))]
        if len(exported) != len(set(exported)):
            problems.append(f"{module}.__all__ names a name twice")
    return problems


def documented_imports(text: str) -> set[tuple[str, str | None]]:
    """``(module, name)`` for each ``from viasd_adapt... import name`` (a submodule import is
    ``(module.name, None)``) and ``(module, None)`` for each ``import viasd_adapt...`` in ``text``."""
    found: set[tuple[str, str | None]] = set()
    for module, names in re.findall(r"^\s*(?:>>> )?from (viasd_adapt[\w.]*) import \(?([\w, ]+)", text, flags=re.M):
        for name in (n.strip().split(" as ")[0] for n in names.split(",") if n.strip()):
            submodule = f"{module}.{name}"
            is_module = importlib.util.find_spec(module) is not None and _is_module(submodule)
            found.add((submodule, None) if is_module else (module, name))
    found |= {(module, None) for module in re.findall(r"^\s*(?:>>> )?import (viasd_adapt[\w.]*)", text, flags=re.M)}
    return found


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def unlisted(imports: set[tuple[str, str | None]], api: dict[str, set[str]]) -> list[str]:
    return sorted(f"{module}{'.' + name if name else ''}" for module, name in imports
                  if module not in api or (name is not None and name not in api[module]))


def _documentation() -> dict[str, str]:
    files = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")), *sorted((REPO_ROOT / "examples").glob("*.py"))]
    return {str(path.relative_to(REPO_ROOT)): path.read_text(encoding="utf-8") for path in files}


# ----------------------------------------------------------------------------- the checks


def test_the_api_page_the_package_and_the_snapshot_agree():
    listed = listed_api(API_PAGE.read_text(encoding="utf-8"))
    assert len(listed) >= 20  # the page's tables were read
    assert api_drift(listed, viasd_adapt.__all__, SNAPSHOT) == []


def test_a_changed_api_is_caught():
    """Control: a name added to the page, one removed, and an ``__all__`` that differs."""
    listed = {module: set(names) for module, names in SNAPSHOT.items()}
    listed["viasd_adapt.core.rules"].add("tolerant_accept_prob")
    listed["viasd_adapt.adapters.hf"].discard("patch")
    assert api_drift(listed, [*viasd_adapt.__all__, "decide_cycle"], SNAPSHOT) == [
        "docs/api.md no longer lists viasd_adapt.adapters.hf.patch",
        "docs/api.md lists viasd_adapt.core.rules.tolerant_accept_prob, the snapshot does not",
        f"viasd_adapt.__all__ {sorted([*viasd_adapt.__all__, 'decide_cycle'])} is not what docs/api.md lists for the package",
    ]


def test_every_listed_module_exports_what_the_page_lists():
    listed = listed_api(API_PAGE.read_text(encoding="utf-8"))
    assert len(listed) >= 20
    assert all_drift(listed) == []


def test_an_export_the_page_does_not_list_is_caught():
    """Control: the real modules, one of whose ``__all__`` gains a name not on the page, one loses a
    listed name, and one has no ``__all__``."""
    import types

    listed = listed_api(API_PAGE.read_text(encoding="utf-8"))
    changed = {
        "viasd_adapt.adapters.hf": [*importlib.import_module("viasd_adapt.adapters.hf").__all__, "run"],
        "viasd_adapt.core.rules": [n for n in importlib.import_module("viasd_adapt.core.rules").__all__ if n != "rule_for"],
    }

    def import_module(name):
        real = importlib.import_module(name)
        if name == "viasd_adapt.errors":
            return types.SimpleNamespace()
        return types.SimpleNamespace(__all__=changed[name]) if name in changed else real

    assert all_drift(listed, import_module) == [
        "viasd_adapt.adapters.hf.__all__ has run, which docs/api.md does not list",
        "viasd_adapt.core.rules.__all__ lacks rule_for, which docs/api.md lists",
        "viasd_adapt.errors has no __all__",
    ]


@pytest.mark.parametrize("module", sorted(SNAPSHOT))
def test_every_public_name_imports_from_its_listed_module_without_a_warning(module):
    """No listed path is one of the moved ones (the project's warnings are errors in the test run;
    a third party's, such as linear_operator's at import, are not the API's business)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="viasd-adapt")
        imported = importlib.import_module(module)
        for name in sorted(SNAPSHOT[module]):
            assert getattr(imported, name) is not None, f"{module}.{name}"


def test_the_documentation_imports_only_the_public_api():
    problems = {path: found for path, text in _documentation().items() if (found := unlisted(documented_imports(text), SNAPSHOT))}
    assert problems == {}


def test_an_import_of_a_private_name_in_the_documentation_is_caught():
    text = ("from viasd_adapt import load_pair, TierSettings\n"
            "from viasd_adapt.adapters import hf\n"
            "from viasd_adapt.core.cycle import decide_cycle\n"
            "import viasd_adapt.routing.view\n"
            "    from viasd_adapt.core.rules import (rule_for, tolerant_accept_prob)\n")
    assert unlisted(documented_imports(text), SNAPSHOT) == [
        "viasd_adapt.core.cycle.decide_cycle", "viasd_adapt.core.rules.tolerant_accept_prob", "viasd_adapt.routing.view"]
