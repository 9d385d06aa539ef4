"""The import paths of 0.2.0's documentation that moved, kept working until 0.4.0.

(And the modules that built pairs in 0.3.0's ``viasd_adapt.models``, now ``viasd_adapt.training``.)

The package was reorganised into rooms by role (docs/architecture.md): ``viasd_adapt.settings``
became ``viasd_adapt.core.settings``, ``viasd_adapt.engine`` a package, and so on. Code written
against the old paths (a user's script, a test harness) keeps running for one minor version: each
old module is a stand-in that hands out each of its names from where the name lives now, with a
:class:`DeprecationWarning` that names the new path; each old name of a package that still exists
is handed out the same way by the package's ``__getattr__`` (:func:`moved_name`).

Other 0.2 spellings (a module kept for its old names, an attribute, an argument) warn through
:func:`renamed_name` and :func:`deprecated_use`, with the same version. The package itself uses
none of them.

Nothing here imports the new homes until a name is asked for (they are named by string), so the
stand-ins cost nothing to install and the package root stays free of torch.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

#: the first version without these paths
REMOVED_IN = "0.4.0"

#: old module -> the modules its names live in now (the first that has a name hands it out)
MOVED_MODULES: dict[str, tuple[str, ...]] = {
    "viasd_adapt.settings": ("viasd_adapt.core.settings",),
    "viasd_adapt.sampling": ("viasd_adapt.core.sampling",),
    "viasd_adapt.hooks": ("viasd_adapt.core.hooks",),
    "viasd_adapt.tiers": ("viasd_adapt.core.tiers", "viasd_adapt.core.rules"),
    "viasd_adapt.cycle": ("viasd_adapt.core.cycle",),
    "viasd_adapt.rules": ("viasd_adapt.core.rules",),
    "viasd_adapt.plugins": ("viasd_adapt.core.plugins",),
    "viasd_adapt.monitor": ("viasd_adapt.core.monitor",),
    "viasd_adapt.verify_step": ("viasd_adapt.core.verify_step",),
    "viasd_adapt.advice": ("viasd_adapt.config.advice", "viasd_adapt.config.budget", "viasd_adapt.bench.verdict"),
    "viasd_adapt.tuned": ("viasd_adapt.config.tuned",),
    "viasd_adapt.resolve": ("viasd_adapt.config.resolve",),
    "viasd_adapt.schema": ("viasd_adapt.config.schema",),
    "viasd_adapt.pair": ("viasd_adapt.models.pair", "viasd_adapt.frameworks.requests", "viasd_adapt.models.loading"),
    "viasd_adapt.prompt_lookup": ("viasd_adapt.engine.prompt_lookup",),
    "viasd_adapt.seq2seq": ("viasd_adapt.engine.seq2seq", "viasd_adapt.frameworks.seq2seq", "viasd_adapt.routing.seq2seq",
                            "viasd_adapt.model_kind", "viasd_adapt.checks"),
    "viasd_adapt.seq2seq_calibration": ("viasd_adapt.search.seq2seq_windows",),
    "viasd_adapt.search.records": ("viasd_adapt.config.search_record",),
    # 0.3.0's pair-building modules, moved out of the room that loads pairs (docs/architecture.md)
    **{f"viasd_adapt.models.{name}": (f"viasd_adapt.training.{name}",) for name in (
        "build", "corpus", "distill_build", "distill_data", "drafter_distill", "evaluate", "layer_skip", "presets",
        "tokenizer", "train")},
    "viasd_adapt.models.eagle_head": ("viasd_adapt.models.eagle_head_files", "viasd_adapt.training.eagle_head"),
    "viasd_adapt.models.eagle_distill": ("viasd_adapt.models.eagle_head_files", "viasd_adapt.training.eagle_distill"),
}

#: package that still exists -> {old name: the module it lives in now}
MOVED_NAMES: dict[str, dict[str, str]] = {
    "viasd_adapt.engine": {
        "Drafter": "viasd_adapt.engine.drafters",
        "ModelDrafter": "viasd_adapt.engine.drafters",
        "draft_with_ids": "viasd_adapt.engine.drafters",
        "host_draft": "viasd_adapt.engine.drafters",
        "GenerationOutput": "viasd_adapt.engine.loop",
        "speculative_generate": "viasd_adapt.engine.loop",
        "TieredVerifier": "viasd_adapt.engine.verifier",
    },
    "viasd_adapt.routing": {"MaskArtifact": "viasd_adapt.config.mask", "RoutingMask": "viasd_adapt.config.mask"},
    "viasd_adapt.tuning": {
        "TunedForAnotherMaskWarning": "viasd_adapt.config.tuned",
        "TunedSettings": "viasd_adapt.config.tuned",
        "find_tuned": "viasd_adapt.config.tuned",
        "tuned_mask_path": "viasd_adapt.config.resolve",
    },
}


#: module kept only for 0.2's names -> {old name: where it lives now, "module.name"}; the module's
#: ``__getattr__`` hands each out through :func:`renamed_name`
RENAMED_NAMES: dict[str, dict[str, str]] = {
    "viasd_adapt.engine.tier": {
        "OpenTier": "viasd_adapt.engine.context.RunContext",
        "open_tier": "viasd_adapt.engine.context.open_context",
        **{name: f"viasd_adapt.engine.context.{name}" for name in (
            "EAGLE_HEAD", "NO_MASK_MESSAGE", "UntieredWithoutMaskWarning", "check_spec_model", "drafter_identity",
            "tuned_drafter_mismatch")},
    },
}


def _warn(old: str, new: str, stacklevel: int) -> None:
    """``stacklevel`` counts from the caller of ``_warn``: the warning points at the user's line."""
    warnings.warn(f"viasd-adapt: {old} moved to {new}; import it from there (the old path goes in {REMOVED_IN})",
                  DeprecationWarning, stacklevel=stacklevel + 1)


def moved_name(package: str, name: str):
    """``package.name`` from where it lives now, with the warning; for a package's ``__getattr__``.
    Raises :class:`AttributeError` for a name that did not move (as ``__getattr__`` must)."""
    home = MOVED_NAMES.get(package, {}).get(name)
    if home is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    _warn(f"{package}.{name}", f"{home}.{name}", stacklevel=3)  # moved_name <- the package's __getattr__ <- user
    return getattr(importlib.import_module(home), name)


def renamed_name(module: str, name: str):
    """``module.name`` (a 0.2 name of :data:`RENAMED_NAMES`) from where it lives now, with the
    warning; for the kept module's ``__getattr__``. :class:`AttributeError` for any other name."""
    new = RENAMED_NAMES.get(module, {}).get(name)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    _warn(f"{module}.{name}", new, stacklevel=3)  # renamed_name <- the module's __getattr__ <- user
    home, _, new_name = new.rpartition(".")
    return getattr(importlib.import_module(home), new_name)


def deprecated_use(old: str, new: str, stacklevel: int = 2) -> None:
    """Warns that a 0.2 spelling (an attribute, an argument) was used: it still works until
    :data:`REMOVED_IN`, and ``new`` is what replaces it. ``stacklevel`` counts as
    :func:`warnings.warn`'s would from the caller of this function (2: that caller's caller, the
    user's line for a property)."""
    warnings.warn(f"viasd-adapt: {old} is deprecated, use {new} (the old spelling goes in {REMOVED_IN})",
                  DeprecationWarning, stacklevel=stacklevel + 1)


class MovedModule(types.ModuleType):
    """The stand-in for an old module: each name is looked up in the new homes, with the warning."""

    def __init__(self, name: str, homes: tuple[str, ...]):
        super().__init__(name, f"Moved: the names of {name} now live in {', '.join(homes)} (until {REMOVED_IN}).")
        self._homes = homes

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        for home in self._homes:
            module = importlib.import_module(home)
            if hasattr(module, name):
                _warn(f"{self.__name__}.{name}", f"{home}.{name}", stacklevel=2)  # __getattr__ <- user
                return getattr(module, name)
        raise AttributeError(f"{self.__name__} (moved to {', '.join(self._homes)}) has no name {name!r}")


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old modules of :data:`MOVED_MODULES` (asked last, so it never hides a real module)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED_MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        return MovedModule(spec.name, MOVED_MODULES[spec.name])

    def exec_module(self, module) -> None:
        """Nothing to run: the stand-in hands out its names on first use."""


def install() -> None:
    """Puts the finder at the end of ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())


__all__ = ["MOVED_MODULES", "MOVED_NAMES", "RENAMED_NAMES", "REMOVED_IN", "MovedModule", "MovedModuleFinder",
           "deprecated_use", "install", "moved_name", "renamed_name"]
