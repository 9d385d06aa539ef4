"""0.2's spellings that are not import paths keep working until 0.4.0, each with a
``DeprecationWarning`` that names its replacement and points at the user's line
(:func:`viasd_adapt.deprecated.deprecated_use`, :func:`~viasd_adapt.deprecated.renamed_name`):

* the module ``viasd_adapt.engine.tier`` (``open_tier``, ``OpenTier`` and the set-up names it
  repeated) -> :mod:`viasd_adapt.engine.context`;
* ``RunContext.tuned`` -> ``RunContext.evidence``;
* ``TierSession.tier`` -> ``TierSession.context``;
* ``LoadedPair(loaded=...)`` -> the framework's object given to its adapter;
* ``TieredVerifier(target, settings, sampling, ...)`` without a verify step ->
  ``TieredVerifier.of(context, context.verify_step(...), sampling)``.

For each: the old spelling warns and still gives what the new one gives; the new spelling does not
warn (control); and the package's own code (``viasd_adapt/`` and ``adapters/``) does not use the
old spelling (a scan of its syntax trees, with a control: the scan finds each spelling in a snippet
that uses it). Every other test also runs with the project's warnings as errors, so a use of an old
spelling on any tested path fails there too.
"""

from __future__ import annotations

import ast
import importlib
import warnings

import pytest
import torch

import viasd_adapt
from tests.support import REPO_ROOT
from tests.support.pairs import truncated_pair
from viasd_adapt.adapters import hf
from viasd_adapt.deprecated import RENAMED_NAMES
from viasd_adapt.engine import context as context_module
from viasd_adapt.engine.context import RunContext, open_context
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.engine.verifier import TieredVerifier
from viasd_adapt.models.pair import LoadedPair, MaskInfo

OLD_MODULE = "viasd_adapt.engine.tier"


@pytest.fixture(scope="module")
def tiny():
    return truncated_pair("llama", layers=4, sharpness=8.0)


def _no_project_warning():
    """A scope in which any warning of the project's (``viasd-adapt: ...``) is an error."""
    scope = warnings.catch_warnings()
    scope.__enter__()
    warnings.simplefilter("error", DeprecationWarning)
    warnings.filterwarnings("error", message="viasd-adapt")
    return scope


def _one_warning_here(record) -> warnings.WarningMessage:
    """The single deprecation warning recorded, which must point at this file (the user's line)."""
    deprecations = [w for w in record if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1, [str(w.message) for w in deprecations]
    assert deprecations[0].filename == __file__
    assert "0.4.0" in str(deprecations[0].message)
    return deprecations[0]


# ----------------------------------------------------------------------------- engine.tier


@pytest.mark.parametrize("name", sorted(RENAMED_NAMES[OLD_MODULE]))
def test_each_name_of_engine_tier_warns_and_is_the_new_object(name):
    old = importlib.import_module(OLD_MODULE)
    new_path = RENAMED_NAMES[OLD_MODULE][name]
    home, _, new_name = new_path.rpartition(".")
    with pytest.warns(DeprecationWarning, match=rf"viasd-adapt: {OLD_MODULE}\.{name} moved to {new_path}\b") as record:
        value = getattr(old, name)
    _one_warning_here(record)
    assert value is getattr(importlib.import_module(home), new_name)


def test_a_from_import_of_engine_tier_warns_at_the_importing_line():
    with pytest.warns(DeprecationWarning, match="engine.context.open_context") as record:
        from viasd_adapt.engine.tier import open_tier
    _one_warning_here(record)
    assert open_tier is open_context


def test_the_new_home_of_engine_tiers_names_does_not_warn_and_engine_tier_has_no_other_name():
    """Control: the same names from engine.context are silent; a name engine.tier never had fails."""
    scope = _no_project_warning()
    try:
        from viasd_adapt.engine.context import EAGLE_HEAD, check_spec_model  # noqa: F401
        assert context_module.open_context is open_context
    finally:
        scope.__exit__(None, None, None)
    with pytest.raises(AttributeError, match="no attribute 'open_context'"):
        importlib.import_module(OLD_MODULE).open_context


# ----------------------------------------------------------------------------- attributes and arguments


def test_run_context_tuned_warns_and_is_the_evidence(tiny):
    context = open_context(tiny.target, tiny.mask)
    with pytest.warns(DeprecationWarning, match=r"RunContext\.tuned is deprecated, use RunContext\.evidence") as record:
        tuned = context.tuned
    _one_warning_here(record)
    assert tuned is context.evidence
    marked = RunContext.__dataclass_fields__  # the property is not a field: the context stays as it was
    assert "tuned" not in marked


def test_tier_session_tier_warns_and_is_the_context(tiny):
    with hf.tiered(tiny.target, context=viasd_adapt.context(tiny.target, mask=tiny.mask)) as session:
        with pytest.warns(DeprecationWarning, match=r"TierSession\.tier is deprecated, use TierSession\.context") as record:
            tier = session.tier
        _one_warning_here(record)
        assert tier is session.context


def test_loaded_pair_loaded_warns_and_still_hands_the_object_over(tiny):
    handed = object()
    with pytest.warns(DeprecationWarning, match=r"LoadedPair\(loaded=\.\.\.\) is deprecated, use .*adapter") as record:
        pair = LoadedPair(tiny.target, None, None, None, torch.device("cpu"), eagle_head="head", loaded={"eagle": handed})
    _one_warning_here(record)
    assert pair.framework_models["eagle"] is handed  # held by the pair itself: nothing is kept beside it


def test_loaded_pair_spec_and_evidence_warn_and_read_the_pairs_own_files(tiny, tmp_path):
    """0.2's per-run fields of the pair read what the pair's files resolve to, with a warning; the
    pair holds the files (``pair.files``), not a resolution."""
    from viasd_adapt.config.tuned import TunedSettings
    from viasd_adapt.models.pair import PairFiles

    tuned = TunedSettings(choice="lenient", settings=TierSettings(mode="lenient", lenience=0.25))
    mask_file = tmp_path / "mask.json"
    mask_file.write_text("{}")
    pair = LoadedPair(tiny.target, tiny.drafter, None, MaskInfo(tiny.mask, "test mask", False), torch.device("cpu"),
                      files=PairFiles(mask_file, tuned))
    with pytest.warns(DeprecationWarning, match=r"LoadedPair\.spec is deprecated, use LoadedPair\.run_context\(\)\.spec") as record:
        spec = pair.spec
    _one_warning_here(record)
    assert spec.settings.mode.value == "lenient" and spec.settings.lenience == 0.25
    with pytest.warns(DeprecationWarning, match=r"LoadedPair\.evidence is deprecated") as record:
        evidence = pair.evidence
    _one_warning_here(record)
    assert evidence is tuned
    assert "spec" not in LoadedPair.__dataclass_fields__ and "evidence" not in LoadedPair.__dataclass_fields__


def test_tiered_verifiers_0_2_constructor_warns_and_builds_the_same_step(tiny):
    settings = TierSettings(mode="lossy", gamma=3, adaptive=False)
    with pytest.warns(DeprecationWarning, match=r"TieredVerifier\(target, settings, sampling, \.\.\.\) without a step "
                                                r"is deprecated, use TieredVerifier\.of\(context") as record:
        old = TieredVerifier(tiny.target, settings, SamplingConfig(), slim=open_context(tiny.target, tiny.mask, settings).slim)
    _one_warning_here(record)
    assert old.step.settings == settings and old.settings == settings and old.slim is not None


def test_the_new_spellings_do_not_warn(tiny):
    """Control: the replacements of the four spellings above, with the project's warnings as errors."""
    scope = _no_project_warning()
    try:
        settings = TierSettings(mode="lossy", gamma=3, adaptive=False)
        context = open_context(tiny.target, tiny.mask, settings)
        verifier = TieredVerifier.of(context, context.verify_step("engine"), SamplingConfig())
        assert verifier.step.settings == settings and verifier.slim is context.slim
        context = open_context(tiny.target, tiny.mask)
        assert context.evidence is None
        with hf.tiered(tiny.target, context=viasd_adapt.context(tiny.target, mask=tiny.mask)) as session:
            assert session.context.mask is not None
        pair = LoadedPair(tiny.target, tiny.drafter, None, MaskInfo(tiny.mask, "test mask", False), torch.device("cpu"))
        assert pair.run_context().mask is not None
    finally:
        scope.__exit__(None, None, None)


# ----------------------------------------------------------------------------- the package uses none


def old_spellings(source: str) -> list[str]:
    """Each use of an old spelling in ``source`` that its syntax tree shows: an import of
    ``viasd_adapt.engine.tier`` (absolute, relative from the engine, or as ``engine import tier``),
    a ``LoadedPair(..., loaded=...)`` call, a ``TieredVerifier(...)`` call without a ``step``, ``<...>.tier`` read off a session and ``<...>.tuned``
    read off a run context (by the receiver's name: ``session``, ``context``, ``ctx``, ``run_context``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name == OLD_MODULE]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module == OLD_MODULE or (node.level and module == "tier") or (
                    module in ("viasd_adapt.engine", "") and any(a.name == "tier" for a in node.names)):
                found.append(f"from {'.' * node.level}{module} import ...")
        elif isinstance(node, ast.Call):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if callee == "LoadedPair" and any(k.arg == "loaded" for k in node.keywords):
                found.append("LoadedPair(loaded=...)")
            if callee == "TieredVerifier" and not any(k.arg == "step" for k in node.keywords) and len(node.args) < 10:
                found.append("TieredVerifier(...) without a step")
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            receiver = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(node.value, "id", "")
            if node.attr == "tier" and receiver.endswith("session"):
                found.append(f"{receiver}.tier")
            if node.attr == "tuned" and receiver in ("context", "ctx", "run_context"):
                found.append(f"{receiver}.tuned")
    return found


def _package_sources() -> dict[str, str]:
    """The package's files (``viasd_adapt/adapters`` is a link to ``adapters/``: read once, there)."""
    package = [p for p in sorted((REPO_ROOT / "viasd_adapt").rglob("*.py")) if p.relative_to(REPO_ROOT / "viasd_adapt").parts[0] != "adapters"]
    paths = [*package, *sorted((REPO_ROOT / "adapters").rglob("*.py"))]
    return {str(p.relative_to(REPO_ROOT)): p.read_text(encoding="utf-8") for p in paths}


def test_the_package_uses_no_old_spelling():
    sources = _package_sources()
    assert len(sources) > 100 and "viasd_adapt/engine/context.py" in sources and "adapters/hf/session.py" in sources
    uses = {path: found for path, text in sources.items() if (found := old_spellings(text))}
    assert uses == {}


def test_the_scan_finds_each_old_spelling():
    """Control: a snippet with each old spelling, and one with the new spellings only."""
    old = ("import viasd_adapt.engine.tier\n"
           "from viasd_adapt.engine.tier import open_tier\n"
           "from .tier import OpenTier\n"
           "from viasd_adapt.engine import tier\n"
           "pair = LoadedPair(target, None, None, None, device, loaded={'eagle': ea})\n"
           "verifier = TieredVerifier(target, settings, sampling, slim=slim)\n"
           "print(session.tier, self.session.tier, context.tuned)\n")
    assert old_spellings(old) == [
        "import viasd_adapt.engine.tier", "from viasd_adapt.engine.tier import ...", "from .tier import ...",
        "from viasd_adapt.engine import ...", "LoadedPair(loaded=...)",
        "TieredVerifier(...) without a step", "session.tier", "session.tier", "context.tuned"]
    new = ("from viasd_adapt.engine.context import open_context, RunContext\n"
           "pair = LoadedPair(target, None, None, None, device)\n"
           "verifier = TieredVerifier.of(context, context.verify_step('engine'), sampling)\n"
           "cls(context.target, None, sampling, step=step)\n"
           "print(session.context, context.evidence, config.tier(), spec.tuned)\n")
    assert old_spellings(new) == []
