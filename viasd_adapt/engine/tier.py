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

Tuned settings belong to a pair (:mod:`viasd_adapt.config.tuned`): where the drafter is known they
are checked against the drafter they were measured with (:func:`tuned_drafter_mismatch`). The
commands check after loading the pair (:func:`check_spec_model`), :func:`~viasd_adapt.adapters.pearl.pearl_generate`
and the EAGLE adapter when the tier opens (:func:`check_tier_drafter`), the HF adapter per call,
when the assistant model arrives (:class:`TunedDrafterCheck`). Another drafter: the tuned settings
are not applied (the defaults run), with a :class:`~viasd_adapt.config.tuned.TunedForAnotherDrafterWarning`,
and their measurements do not price the adaptive tier either.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable

import pluggy
from torch import nn

from viasd_adapt.config.advice import warn_if_negative_delta
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.config.resolve import UNREAD, RunSpec, resolve_settings
from viasd_adapt.config.tuned import (DRAFTER_MODEL, EAGLE_HEAD, PROMPT_LOOKUP_DRAFTER, TunedForAnotherDrafterWarning,
                                      TunedSettings, drafter_mismatch, find_tuned)
from viasd_adapt.core.adaptive import AdaptivePlan
from viasd_adapt.core.hooks import make_plugin_manager
from viasd_adapt.core.settings import Mode, TierSettings, check_settings
from viasd_adapt.core.verify_step import VerifyStep
from viasd_adapt.engine.priors import adaptive_plan
from viasd_adapt.routing.mask import MaskLike, check_tuned_model, model_mismatches, resolve_mask
from viasd_adapt.routing.slim import SlimVerifier

#: What a run drafts with, for the check: a drafter model, :data:`PROMPT_LOOKUP_DRAFTER`, :data:`EAGLE_HEAD`,
#: or another object with a ``propose`` method (a drafter the check cannot identify).
DrafterLike = Any

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

    @property
    def runs_tuned(self) -> bool:
        """Whether its settings are a tuned file's (``settings=None``), so that they belong to the
        drafter the file was measured with."""
        return self.spec is not None and self.spec.tuned is not None and self.spec.tuned_applied

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


def drafter_identity(drafter: DrafterLike) -> DrafterLike:
    """What a run drafts with, as :func:`tuned_drafter_mismatch` compares it: a model as is, the
    prompt-lookup drafter (its name, or a drafter object of the prompt-lookup kind) as
    :data:`PROMPT_LOOKUP_DRAFTER`, an EAGLE head as :data:`EAGLE_HEAD`."""
    from viasd_adapt.engine.prompt_lookup import PromptLookupDrafter, PromptLookupSpec

    if isinstance(drafter, (PromptLookupDrafter, PromptLookupSpec)) or drafter == PROMPT_LOOKUP_DRAFTER:
        return PROMPT_LOOKUP_DRAFTER
    return drafter


def tuned_drafter_mismatch(tuned: TunedSettings, drafter: DrafterLike) -> str | None:
    """Why ``tuned`` was not measured with ``drafter`` ("measured with another drafter: ..."), or
    None when it was, or when the file records no drafter: :func:`~viasd_adapt.config.tuned.drafter_mismatch`
    for what this run drafts with (a model is compared by its fingerprint)."""
    drafter = drafter_identity(drafter)
    if drafter is EAGLE_HEAD or drafter == EAGLE_HEAD or drafter == PROMPT_LOOKUP_DRAFTER:
        return drafter_mismatch(tuned.drafter, tuned.measured_on, drafter)
    if not isinstance(drafter, nn.Module):
        return drafter_mismatch(tuned.drafter, tuned.measured_on, f"a {type(drafter).__name__}")
    return drafter_mismatch(tuned.drafter, tuned.measured_on, DRAFTER_MODEL,
                            lambda: model_mismatches(tuned.drafter, drafter))


def check_spec_model(spec: RunSpec, model: nn.Module, drafter: DrafterLike = None, *, stacklevel: int = 2) -> RunSpec:
    """Refuses a run whose tuned file was made for another model (naming the file), as a mask is
    refused; returns ``spec``. With ``drafter`` (what the run drafts with: :func:`drafter_identity`),
    tuned settings measured with another drafter are not applied: the spec without them is returned
    (:meth:`~viasd_adapt.config.resolve.RunSpec.without_tuned`), with a
    :class:`~viasd_adapt.config.tuned.TunedForAnotherDrafterWarning`."""
    if spec.tuned is None:
        return spec
    check_tuned_model(spec.tuned, model, source=f"tuned settings {spec.tuned_path}")
    if drafter is None:
        return spec
    mismatch = tuned_drafter_mismatch(spec.tuned, drafter)
    if mismatch is None:
        note = ("not recorded (a file written before drafters were recorded): not checked"
                if spec.tuned.drafter is None else "the run's drafter")
        return replace(spec, drafter_note=note)
    note = mismatch.split(": ", 1)[-1]
    if not (spec.tuned_applied or any(source.startswith("tuned.json") for source in spec.sources.values())):
        return replace(spec, drafter_note=note)  # nothing of it was applied (another mask): nothing to take back
    warn_other_drafter(spec.tuned_path, mismatch, stacklevel=stacklevel + 1)
    return spec.without_tuned(mismatch)  # --explain says why in its "not applied" clause


def warn_other_drafter(tuned_path: Path | None, mismatch: str, stacklevel: int = 2) -> None:
    """The one warning for tuned settings that are not applied because of the drafter."""
    warnings.warn(f"viasd-adapt: {tuned_path} was {mismatch}; its settings are not applied (running the "
                  "TierSettings() defaults). Run viasd tune with this drafter to tune this pair.",
                  TunedForAnotherDrafterWarning, stacklevel=stacklevel + 1)


def _without_tuned(tier: OpenTier, target: nn.Module, mask: MaskLike | None, mismatch: str, *,
                   build_slim: bool = True, stacklevel: int = 2) -> OpenTier:
    """``tier`` opened again without its tuned settings, because of the drafter (``mismatch``): the
    defaults, the same plugin manager, no tuned measurements for the adaptive tier; its ``spec``
    says why (``--explain``'s "not applied")."""
    untuned = tier.spec.without_tuned(mismatch)
    reopened = open_tier(target, mask, untuned.settings, tier.plugins, plugin_manager=tier.plugin_manager,
                         build_slim=build_slim, stacklevel=stacklevel + 1, tuned=None)
    return replace(reopened, spec=untuned)


def check_tier_drafter(tier: OpenTier, target: nn.Module, mask: MaskLike | None, drafter: DrafterLike, *,
                       build_slim: bool = True, stacklevel: int = 2) -> OpenTier:
    """``tier`` as is, unless its settings are a tuned file's (``settings=None``) measured with another
    drafter than ``drafter``: then the warning, and the tier opened again without them."""
    mismatch = tuned_drafter_mismatch(tier.spec.tuned, drafter) if tier.runs_tuned else None
    if mismatch is None:
        return tier
    warn_other_drafter(tier.spec.tuned_path, mismatch, stacklevel=stacklevel + 1)
    return _without_tuned(tier, target, mask, mismatch, build_slim=build_slim, stacklevel=stacklevel + 1)


class TunedDrafterCheck:
    """For an adapter whose drafter arrives per call (HF's ``assistant_model``): the tier to run
    with each drafter, the tuned one or, for another drafter, the one without the tuned settings
    (opened once, warned once per drafter). The check is by object for a model (``id``): a model
    object is fingerprinted once per session."""

    def __init__(self, tier: OpenTier, target: nn.Module, mask: MaskLike | None):
        self.tier, self.target, self.mask = tier, target, mask
        self._untuned: OpenTier | None = None
        self._checked: dict[int, bool] = {}

    @property
    def needed(self) -> bool:
        """Whether there is anything to check (the settings came from a tuned file)."""
        return self.tier.runs_tuned

    def tier_for(self, drafter: DrafterLike, stacklevel: int = 2) -> OpenTier:
        if not self.needed:
            return self.tier
        key = id(drafter) if isinstance(drafter, nn.Module) else hash(drafter_identity(drafter))
        if key not in self._checked:
            mismatch = tuned_drafter_mismatch(self.tier.spec.tuned, drafter)
            self._checked[key] = mismatch is None
            if mismatch is not None:
                warn_other_drafter(self.tier.spec.tuned_path, mismatch, stacklevel=stacklevel + 1)
                if self._untuned is None:
                    self._untuned = _without_tuned(self.tier, self.target, self.mask, mismatch,
                                                   stacklevel=stacklevel + 1)
        return self.tier if self._checked[key] else self._untuned


class UntieredWithoutMaskWarning(UserWarning):
    """An adapter was set up with neither settings nor a mask: it runs untiered SD (mode none)."""


NO_MASK_MESSAGE = ("viasd-adapt: no mask and no settings given, so this runs untiered SD (mode none, the target's own "
                   "output); for the tier, `viasd models add NAME --target ... --draft ...` searches a mask and tunes it "
                   "(its --minutes budget, 30 by default), then pass mask= the pair's mask or load_pair('NAME')")


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
    drafter: DrafterLike = None,
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
        drafter: what the run drafts with, when it is known at set-up (PEARL's drafter, EAGLE's
            :data:`EAGLE_HEAD`): tuned settings (``settings=None``) measured with another drafter
            are then not applied (:func:`check_tier_drafter`). None: not known here (an adapter
            whose drafter arrives per call, HF, checks it then: :class:`TunedDrafterCheck`).

    Raises ConfigError for bad settings, a bad or missing mask file, or a slim mode without a
    mask; ModelMismatchError for a mask or tuned file made for another model.
    """
    spec: RunSpec | None = None
    path = Path(mask).expanduser() if isinstance(mask, (str, os.PathLike)) else None
    if settings is None and mask is None:  # a first run on the user's own target: untiered, and how to get the tier
        settings = TierSettings(mode=Mode.NONE)
        warnings.warn(NO_MASK_MESSAGE, UntieredWithoutMaskWarning, stacklevel=stacklevel + 1)
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
    tier = OpenTier(settings, routing, slim, manager, plugins, spec, artifact, target, tuned if settings.adapts else None)
    if drafter is not None:
        tier = check_tier_drafter(tier, target, mask, drafter, build_slim=build_slim, stacklevel=stacklevel + 1)
    return tier


__all__ = ["EAGLE_HEAD", "NO_MASK_MESSAGE", "OpenTier", "UntieredWithoutMaskWarning", "TunedDrafterCheck", "check_spec_model", "check_tier_drafter", "drafter_identity",
           "open_tier", "tuned_drafter_mismatch", "warn_other_drafter"]
