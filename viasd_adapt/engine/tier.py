"""Opening a tier: the one set-up every adapter runs before its first cycle.

HF (``hf.patch``), PEARL (``pearl_generate``) and EAGLE (``eagle.tiered``) all need the same things
before they can build their :class:`~viasd_adapt.core.verify_step.VerifyStep`: the settings to run
(given, or ``viasd tune``'s choice measured with this mask), the routing mask checked against the
target, the slim verifier, and the plugin manager. :func:`open_tier` is the one place that
assembles them, so that each file is read once and every adapter refuses the same bad input with
the same words:

* the mask file is read once (the resolver's read is reused; no second read to check the
  fingerprint, none to look up Delta), and ``tuned.json`` at most once;
* ``settings=None`` runs the tuned choice measured with this mask
  (:func:`viasd_adapt.config.resolve.resolve_settings`), refused when it was tuned on another model;
* a lossy tier opened on a mask whose recorded Delta(u) < 0 warns
  (:class:`~viasd_adapt.config.advice.NegativeDeltaWarning`), from the artifact already read;
* when the settings adapt, the measurements the adaptive tier prices passes and starts from
  (:mod:`viasd_adapt.engine.priors`) are those of ``tuned.json`` beside a mask path (the resolver's
  read reused), or of a tuned file the caller passes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pluggy
from torch import nn

from viasd_adapt.config.advice import warn_if_negative_delta
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.config.resolve import UNREAD, RunSpec, resolve_settings
from viasd_adapt.config.tuned import TunedSettings, find_tuned
from viasd_adapt.core.adaptive import AdaptivePlan
from viasd_adapt.core.hooks import make_plugin_manager
from viasd_adapt.core.settings import Mode, TierSettings, check_settings
from viasd_adapt.core.verify_step import VerifyStep
from viasd_adapt.engine.priors import adaptive_plan
from viasd_adapt.routing.mask import MaskLike, check_tuned_model, resolve_mask
from viasd_adapt.routing.slim import SlimVerifier

@dataclass(frozen=True)
class OpenTier:
    """Everything an adapter needs to build its verify step, resolved and checked once.

    Attributes:
        settings: the settings the tier runs (checked).
        routing: the routing mask, checked against the target (its fingerprint when it came from an
            artifact); None for the modes without a slim verifier (none, lenient).
        slim: the slim verifier over ``routing``; None without a routing mask, or when the adapter
            builds its own from ``routing`` (EAGLE's tree verifier).
        plugin_manager: the run's plugin manager (rules and observers, built-in rules included).
        plugins: the user's plugins it was built with.
        spec: how ``settings=None`` was resolved (its sources, the tuned file); None when the
            settings were given or the mask was not a path.
        artifact: the mask artifact read or given (its Delta, search and fingerprint); None for a
            bare :class:`RoutingMask`, or a path a mode without a slim verifier never needed to read.
        target: the model the tier was opened on (the adaptive tier prices passes against it).
        tuned: the tuned file whose measurements price the adaptive tier's passes and give its
            priors (:mod:`viasd_adapt.engine.priors`); None when there is none or it was not needed.
    """

    settings: TierSettings
    routing: RoutingMask | None
    slim: SlimVerifier | None
    plugin_manager: pluggy.PluginManager
    plugins: tuple = ()
    spec: RunSpec | None = None
    artifact: MaskArtifact | None = None
    target: nn.Module | None = None
    tuned: TunedSettings | None = None

    @property
    def mode(self) -> Mode:
        return self.settings.mode

    def adaptive_plan(self, drafter: nn.Module | None = None, settings: TierSettings | None = None,
                      use_measured: bool = True) -> AdaptivePlan | None:
        """The adaptive tier's prices and priors for a run drafting with ``drafter`` (a model, or
        None: no drafter model), with ``settings`` (default: the tier's); None when they do not
        adapt. ``use_measured=False``: a framework whose cycles the tuned points do not describe."""
        return adaptive_plan(settings or self.settings, self.target, self.routing, self.tuned, drafter, use_measured)

    def verify_step(self, framework: str, drafter: nn.Module | None = None, use_measured: bool = True,
                    **options: Any) -> VerifyStep:
        """A :class:`VerifyStep` with this tier's settings, plugin manager and adaptive plan
        (:meth:`adaptive_plan` with ``drafter``); ``options`` are VerifyStep's own (``greedy``,
        ``bonus_after_block``, ``thresholds``)."""
        return VerifyStep(self.settings, framework, self.plugin_manager,
                          adaptive=self.adaptive_plan(drafter, use_measured=use_measured), **options)


def check_spec_model(spec: RunSpec, model: nn.Module) -> None:
    """Refuses a run whose tuned file was made for another model (naming the file), as a mask is refused."""
    if spec.tuned is not None:
        check_tuned_model(spec.tuned, model, source=f"tuned settings {spec.tuned_path}")


def open_tier(
    target: nn.Module,
    mask: MaskLike | None = None,
    settings: TierSettings | None = None,
    plugins: Iterable[object] = (),
    *,
    plugin_manager: pluggy.PluginManager | None = None,
    build_slim: bool = True,
    stacklevel: int = 2,
    tuned: Any = UNREAD,
) -> OpenTier:
    """Resolves and checks what a tier on ``target`` runs with; every adapter's one set-up call.

    Args:
        target: the full verifier q (for EAGLE, the EaModel's base model).
        mask: a :class:`RoutingMask` (its layer count checked), a :class:`MaskArtifact` or the
            path of a ``mask.json`` (checked against ``target``'s fingerprint). Not needed for
            modes none and lenient, which ignore one that is given.
        settings: the settings to run (checked); None runs the tuned choice measured with this mask
            path (refused when tuned on another model), else :class:`TierSettings` defaults.
        plugins: pluggy plugins for the plugin manager built here.
        plugin_manager: an already built manager to use instead (``plugins`` are then not added).
        build_slim: False when the adapter builds its own slim verifier from ``routing``.
        stacklevel: which frame the warnings name, counted from the caller of this function
            (1: the caller itself; 2, the default: the caller's caller, i.e. the user of an adapter).
        tuned: the tuned file whose measurements the adaptive tier starts from (None: none). By
            default, when the settings adapt, the ``tuned.json`` beside a mask path (read once:
            the resolver's read is reused).

    Raises ConfigError for bad settings, a bad or missing mask file, or a slim mode without a
    mask; ModelMismatchError for a mask or tuned file made for another model.
    """
    spec: RunSpec | None = None
    path = Path(mask).expanduser() if isinstance(mask, (str, os.PathLike)) else None
    if settings is None and path is not None:
        spec = resolve_settings(path, warn_stacklevel=stacklevel + 2)
        check_spec_model(spec, target)
        settings = spec.settings
    settings = check_settings(settings if settings is not None else TierSettings())
    artifact = mask if isinstance(mask, MaskArtifact) else None
    if path is not None and settings.mode.uses_slim:
        # The resolver may have read it already (to compare it with the tuned file's mask).
        artifact = (spec.masks.get(path) if spec is not None else None) or MaskArtifact.load(path)
    warn_if_negative_delta(artifact, settings, stacklevel=stacklevel + 2)
    routing = resolve_mask(target, artifact if artifact is not None else mask, settings.mode,
                           source=str(path) if path is not None else "mask")
    slim = SlimVerifier(target, routing) if build_slim and routing is not None else None
    plugins = tuple(plugins)
    # Built once: fails now on a malformed plugin, and entry-point discovery is not paid per call.
    manager = plugin_manager if plugin_manager is not None else make_plugin_manager(plugins)
    if tuned is UNREAD:
        tuned = None
        if settings.adapts and path is not None:
            tuned = spec.tuned if spec is not None else find_tuned(path)
    return OpenTier(settings, routing, slim, manager, plugins, spec, artifact, target, tuned if settings.adapts else None)


__all__ = ["OpenTier", "check_spec_model", "open_tier"]
