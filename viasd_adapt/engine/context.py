"""The run context: what one run uses, decided once and held in one immutable object.

Every adapter (HF, EAGLE, PEARL), the engine's own runner, the bench, the tuner and ``viasd
generate`` run with a :class:`RunContext`: the settings (each with its source), the routing mask
checked against the target, the slim verifier over it, the tuned evidence that prices the adaptive
tier's passes for this drafter, the plugin manager, and the adaptive plan. Nothing a run uses is
read from or written to a shared object: two runs on one pair, in two threads, each hold their own
context.

A program builds one with :func:`context` (``viasd_adapt.context``), the one public builder: from a
pair (what it read when it loaded) or from a model (reading its mask and tuned files), its notices
given once; every adapter takes it as ``context=``, beside the framework's own options only
(:func:`loose_run_options` refuses the run's options beside it). Underneath, it is built in two
steps, so that the decision is a pure function:

* :func:`open_context` is the **edge**: it reads the files (``mask.json`` once, ``tuned.json`` at
  most once), calls the resolver, and gives the resolver's notices as warnings
  (:func:`viasd_adapt.core.notices.emit`: they name the user's line);
* :func:`resolve_context` is the **resolver**: from artifacts already read and the models, it
  checks the settings, the mask (fingerprint) and the tuned file (model), and returns the context
  with its notices (a negative Delta, tuned settings set aside) instead of warning mid-way.

Tuned settings belong to a pair (:mod:`viasd_adapt.config.tuned`): measured with one drafter, they
are not applied to a run drafting with another. :meth:`RunContext.for_drafter` is the context for
a given drafter, without reopening anything: the same context when the tuned settings belong to
it, else the defaults with a :class:`~viasd_adapt.config.tuned.TunedForAnotherDrafterWarning`
notice. An adapter whose drafter is known at set-up (PEARL's, EAGLE's head) passes it to
:func:`open_context`; HF, whose drafter arrives per call, asks per call.

The one builder of the verify step is :meth:`RunContext.verify_step`: the step's settings, plugin
manager and adaptive plan are the context's, so they cannot disagree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, runtime_checkable

import pluggy
from torch import nn

from viasd_adapt.config.advice import negative_delta_notice
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.config.provenance import GIVEN_SOURCE, Source, SourceKind
from viasd_adapt.config.resolve import UNREAD, RunSpec, read_settings
from viasd_adapt.config.hardware import device_mismatch, retune_hint, unknown_device
from viasd_adapt.config.tuned import (DRAFTER_MODEL, EAGLE_HEAD, OTHER_DEVICE, PROMPT_LOOKUP_DRAFTER,
                                      TunedForAnotherDeviceWarning, TunedForAnotherDrafterWarning,
                                      TunedOnUnknownDeviceWarning, TunedSettings, drafter_mismatch, find_tuned)
from viasd_adapt.core.adaptive import AdaptivePlan
from viasd_adapt.core.hooks import make_plugin_manager
from viasd_adapt.core.notices import Notice, emit
from viasd_adapt.core.settings import Mode, TierSettings, check_settings
from viasd_adapt.core.verify_step import VerifyStep
from viasd_adapt.errors import ConfigError
from viasd_adapt.engine.priors import adaptive_plan
from viasd_adapt.routing.hardware import run_device_kind
from viasd_adapt.routing.mask import MaskLike, check_tuned_model, model_mismatches, resolve_mask
from viasd_adapt.routing.slim import SlimVerifier

#: What a run drafts with, for the tuned-drafter check: a drafter model, :data:`PROMPT_LOOKUP_DRAFTER`,
#: :data:`EAGLE_HEAD`, or another object with a ``propose`` method (a drafter the check cannot identify).
DrafterLike = Any
#: ``RunContext.sources`` of a setting the caller gave (no resolution: ``settings=`` was passed).
GIVEN = GIVEN_SOURCE


class UntieredWithoutMaskWarning(UserWarning):
    """An adapter was set up with neither settings nor a mask: it runs untiered SD (mode none)."""


NO_MASK_MESSAGE = ("viasd-adapt: no mask and no settings given, so this runs untiered SD (mode none, the target's own "
                   "output); for the tier, `viasd models add NAME --target ... --draft ...` searches a mask and tunes it "
                   "(its --minutes budget, 30 by default), then pass mask= the pair's mask or load_pair('NAME')")


def no_mask_default(mask: MaskLike | None, settings: TierSettings | None) -> tuple[TierSettings | None, Notice | None]:
    """The settings a set-up call with neither ``mask`` nor ``settings`` runs (mode none: a first run
    on the user's own target is untiered SD, not a tier over a mask nobody searched), with the notice
    that says so and how to get the tier; otherwise ``settings`` unchanged and no notice."""
    if settings is None and mask is None:
        return TierSettings(mode=Mode.NONE), Notice(UntieredWithoutMaskWarning, NO_MASK_MESSAGE)
    return settings, None


@dataclass(frozen=True)
class RunContext:
    """Everything a run uses, resolved and checked once (module docstring).

    Attributes:
        target: the full verifier q the run verifies with (for EAGLE, the EaModel's base model).
        settings: the settings the run uses (checked).
        plugin_manager: the run's plugin manager (rules and observers, built-in rules included).
        routing: the routing mask, checked against the target; None for the modes without a slim
            verifier (none, lenient).
        slim: the slim verifier over ``routing``; None without one, or when the adapter builds its
            own from ``routing`` (EAGLE's tree verifier).
        evidence: the tuned file whose measurements (points and prices) price the adaptive tier's
            passes and give its priors (:mod:`viasd_adapt.engine.priors`); None when there is none,
            or when it was measured with another drafter.
        plan: the adaptive tier's prices and priors for :attr:`drafter`; None when the settings do
            not adapt.
        spec: how ``settings=None`` was resolved (the sources, the tuned file); None when the
            settings were given.
        mask: the mask as read or given (a :class:`MaskArtifact`, with its Delta and fingerprint, or a
            bare :class:`RoutingMask`), kept also where the settings need none: the defaults that
            another drafter runs may (:meth:`for_drafter`).
        plugins: the user's plugins the manager was built with.
        drafter: what the run drafts with (:data:`DrafterLike`); None while it is not known.
        notices: what the resolution has to tell the user, given as warnings by the edge.
        build_slim: False when the adapter builds its own slim verifier from ``routing``.
        use_measured: False for a framework whose cycles the tuned points do not describe (EAGLE).
        mask_source: how errors name the mask (its file).
        watch_drafter: False leaves the drafter-quality monitor out of the run's verify step (a
            tuning sweep: its candidates are no verdict on the drafter, and no warning filter is
            changed to hide them).
    """

    target: nn.Module
    settings: TierSettings
    plugin_manager: pluggy.PluginManager
    routing: RoutingMask | None = None
    slim: SlimVerifier | None = None
    evidence: TunedSettings | None = None
    plan: AdaptivePlan | None = None
    spec: RunSpec | None = None
    mask: RoutingMask | MaskArtifact | None = None
    plugins: tuple = ()
    drafter: DrafterLike = None
    notices: tuple[Notice, ...] = ()
    build_slim: bool = True
    use_measured: bool = True
    mask_source: str = "mask"
    watch_drafter: bool = True

    @property
    def mode(self) -> Mode:
        return self.settings.mode

    @property
    def sources(self) -> dict[str, Source]:
        """Where each setting came from (``viasd generate --explain``'s column)."""
        if self.spec is not None:
            return dict(self.spec.sources)
        return {f.name: GIVEN for f in fields(TierSettings)}

    @property
    def artifact(self) -> MaskArtifact | None:
        """The mask artifact read or given (its Delta, search and fingerprint); None for a bare mask."""
        return self.mask if isinstance(self.mask, MaskArtifact) else None

    @property
    def tuned(self) -> TunedSettings | None:
        """The tuned evidence by its 0.2 name; deprecated (until 0.4.0): :attr:`evidence`."""
        from viasd_adapt.deprecated import deprecated_use

        deprecated_use("RunContext.tuned", "RunContext.evidence")
        return self.evidence

    @property
    def runs_tuned(self) -> bool:
        """Whether its settings are a tuned file's (``settings=None``), so that they belong to the
        drafter the file was measured with."""
        return self.spec is not None and self.spec.tuned is not None and self.spec.tuned_applied

    def for_drafter(self, drafter: DrafterLike, model: nn.Module | None = None) -> "RunContext":
        """The context of a run drafting with ``drafter``, built from this one (nothing is read).

        ``model``: the drafter model the adaptive tier prices, when it is not ``drafter`` itself
        (EAGLE: the head's layer, while the check knows the drafter as :data:`EAGLE_HEAD`). When the
        settings are a tuned file's measured with another drafter, the defaults run instead, with
        a notice, and the file's measurements do not price the adaptive tier either."""
        priced = model if model is not None else _drafter_model(drafter)
        checked = _same_drafter(drafter, self.drafter)  # the one this context was checked for: not checked again
        mismatch = (tuned_drafter_mismatch(self.spec.tuned, drafter) if self.runs_tuned and drafter is not None
                    and not checked else None)
        if mismatch is None:
            plan = adaptive_plan(self.settings, self.target, self.routing, self.evidence, priced, self.use_measured)
            return replace(self, drafter=drafter, plan=plan, notices=())
        spec = replace(self.spec.without_tuned(mismatch), notices=())
        settings = check_settings(spec.settings)
        if settings.mode.uses_slim and self.routing is not None:
            routing, slim = self.routing, self.slim  # checked already
        else:  # the mask the tuned choice did not need (read, not yet checked), or none for a mode without one
            routing = resolve_mask(self.target, self.mask, settings.mode, source=self.mask_source)
            slim = _slim_over(self.target, routing, self.build_slim)
        notices = [other_drafter_notice(self.spec.tuned_path, mismatch), negative_delta_notice(self.artifact, settings)]
        plan = adaptive_plan(settings, self.target, routing, None, priced, self.use_measured)
        return replace(self, settings=settings, spec=spec, routing=routing, slim=slim, evidence=None, drafter=drafter,
                       plan=plan, notices=tuple(n for n in notices if n is not None))

    def with_block_length(self, gamma: int) -> "RunContext":
        """The same context drafting ``gamma`` tokens per cycle (HF's ``prompt_lookup_num_tokens``),
        its adaptive plan priced again for it."""
        if gamma == self.settings.gamma:
            return self
        settings = self.settings.with_(gamma=gamma)
        plan = adaptive_plan(settings, self.target, self.routing, self.evidence, _drafter_model(self.drafter),
                             self.use_measured)
        return replace(self, settings=settings, plan=plan, notices=())

    def on_target(self, target: nn.Module, *, build_slim: bool | None = None, use_measured: bool | None = None,
                  drafter: DrafterLike = None, drafter_model: nn.Module | None = None) -> "RunContext":
        """The same run on another copy of its target (EAGLE's EaModel loads its own base model): the
        mask checked against it, the slim verifier and the adaptive plan built for it; nothing read."""
        build = self.build_slim if build_slim is None else build_slim
        measured = self.use_measured if use_measured is None else use_measured
        routing = resolve_mask(target, self.mask if self.routing is not None else None, self.settings.mode,
                               source=self.mask_source)
        moved = replace(self, target=target, routing=routing, slim=_slim_over(target, routing, build), build_slim=build,
                        use_measured=measured, evidence=self.evidence if measured else None, notices=())
        drafted = moved.for_drafter(drafter if drafter is not None else self.drafter, drafter_model)
        return replace(drafted, notices=self.notices + drafted.notices)  # what this context had to say still stands

    def verify_step(self, framework: str, *, make: Callable[..., VerifyStep] = VerifyStep, **options: Any) -> VerifyStep:
        """The run's :class:`VerifyStep`: this context's settings, plugin manager and adaptive plan.
        ``options`` are VerifyStep's own (``greedy``, ``bonus_after_block``, ``thresholds``);
        ``make`` is the class to build (a subclass, or a wrapper that records each step)."""
        return make(self.settings, framework, self.plugin_manager, adaptive=self.plan, watch_drafter=self.watch_drafter,
                    **options)


def _same_drafter(drafter: DrafterLike, checked: DrafterLike) -> bool:
    """Whether ``drafter`` is ``checked``, the drafter a context's settings were checked for: the same
    object, or a shallow copy of the same model (its submodules, so its weights, are the same
    objects: HF's block-length view of the drafter, ``adapters/hf/runner.py``)."""
    if drafter is None or checked is None:
        return False
    if drafter is checked:
        return True
    return isinstance(drafter, nn.Module) and isinstance(checked, nn.Module) and drafter._modules is checked._modules


def _drafter_model(drafter: DrafterLike) -> nn.Module | None:
    """The drafter model a run drafts with (a model, or a drafter object's model), else None."""
    if isinstance(drafter, nn.Module):
        return drafter
    return getattr(getattr(drafter, "runner", None), "model", None)


def _slim_over(target: nn.Module, routing: RoutingMask | None, build: bool) -> SlimVerifier | None:
    return SlimVerifier(target, routing) if build and routing is not None else None


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


def other_drafter_notice(tuned_path: Path | None, mismatch: str) -> Notice:
    """The one notice for tuned settings that are not applied because of the drafter."""
    return Notice(TunedForAnotherDrafterWarning, (
        f"viasd-adapt: {tuned_path} was {mismatch}; its settings are not applied (running the TierSettings() "
        "defaults). Run viasd tune with this drafter to tune this pair."))


def _pair_name(spec: RunSpec) -> str:
    """The pair a tuned file belongs to, for the re-tune command: its folder's name."""
    return spec.tuned_path.parent.name if spec.tuned_path is not None else "NAME"


def spec_for_device(spec: RunSpec, model: nn.Module) -> RunSpec:
    """``spec`` checked against the device kind ``model`` (the run's target) computes on (pure: the
    notice is in ``notices``; :mod:`viasd_adapt.config.hardware`).

    Tuned settings measured on another kind of device are not applied: the spec without them (the
    default mode, the mask the pair loaded), with a :class:`~viasd_adapt.config.tuned.TunedForAnotherDeviceWarning`
    that says how to tune here. A file that records no device is applied, with one
    :class:`~viasd_adapt.config.tuned.TunedOnUnknownDeviceWarning`. Checked once: a spec that says
    where its settings were measured (``device_note``) is returned as it is. The returned spec's
    ``notices`` are this check's only (the resolution's own were the resolver's to give)."""
    if spec.tuned is None or spec.device_note:
        return replace(spec, notices=())
    kind = run_device_kind(model)
    hint = retune_hint(_pair_name(spec), kind)
    recorded = spec.tuned.hardware
    applied = spec.tuned_applied or any(source.kind is SourceKind.TUNED for source in spec.sources.values())
    if unknown_device(recorded):
        note = "not recorded (a file written before devices were recorded): applied unchecked"
        notice = Notice(TunedOnUnknownDeviceWarning, (
            f"viasd-adapt: {spec.tuned_path} does not say which device it was measured on (written before files "
            f"recorded it); its choice ({spec.tuned.choice}) is applied unchecked on {kind}. To record it, tune here: "
            f"{hint}"))
        return replace(spec, device_note=note, notices=(notice,) if applied else ())
    mismatch = device_mismatch(recorded, kind)
    if mismatch is None:
        return replace(spec, device_note=f"{recorded.describe()}, as this run", notices=())
    if not applied:
        return replace(spec, device_note=mismatch, notices=())  # nothing of it was applied (another mask): nothing to take back
    untuned = spec.without_tuned(f"{OTHER_DEVICE}: {mismatch}")
    notice = Notice(TunedForAnotherDeviceWarning, (
        f"viasd-adapt: {spec.tuned_path} was {mismatch}; its choice ({spec.tuned.choice}) is not applied (running "
        f"the default mode with the pair's mask). Tune here: {hint}"))
    return replace(untuned, device_note=mismatch, notices=(notice,))


def spec_for_drafter(spec: RunSpec, model: nn.Module, drafter: DrafterLike = None) -> RunSpec:
    """``spec`` checked against the models of the run (pure: the notice is in ``notices``).

    Refuses a run whose tuned file was made for another model (naming the file), as a mask is
    refused. With ``drafter`` (what the run drafts with: :func:`drafter_identity`), tuned settings
    measured with another drafter are not applied: the spec without them is returned
    (:meth:`~viasd_adapt.config.resolve.RunSpec.without_tuned`), with a
    :class:`~viasd_adapt.config.tuned.TunedForAnotherDrafterWarning` notice."""
    if spec.tuned is None:
        return spec
    check_tuned_model(spec.tuned, model, source=f"tuned settings {spec.tuned_path}")
    spec = spec_for_device(spec, model)  # its notice (if any) is the only one in spec.notices now
    if drafter is None or spec.not_applied.startswith(OTHER_DEVICE):
        return spec
    mismatch = tuned_drafter_mismatch(spec.tuned, drafter)
    if mismatch is None:
        note = ("not recorded (a file written before drafters were recorded): not checked"
                if spec.tuned.drafter is None else "the run's drafter")
        return replace(spec, drafter_note=note)
    note = mismatch.split(": ", 1)[-1]
    if not (spec.tuned_applied or any(source.kind is SourceKind.TUNED for source in spec.sources.values())):
        return replace(spec, drafter_note=note)  # nothing of it was applied (another mask): nothing to take back
    untuned = spec.without_tuned(mismatch)  # --explain says why in its "not applied" clause
    return replace(untuned, notices=(*spec.notices, other_drafter_notice(spec.tuned_path, mismatch)))


def check_spec_model(spec: RunSpec, model: nn.Module, drafter: DrafterLike = None) -> RunSpec:
    """:func:`spec_for_drafter`, its notice given as a warning: for the commands, which read the
    files themselves."""
    checked = spec_for_drafter(spec, model, drafter)
    if checked is not spec and checked.notices != spec.notices:
        emit(checked.notices)
    return checked


def resolve_context(
    target: nn.Module,
    settings: TierSettings | None = None,
    *,
    spec: RunSpec | None = None,
    mask: RoutingMask | MaskArtifact | None = None,
    mask_source: str = "mask",
    evidence: TunedSettings | None = None,
    plugins: Iterable[object] = (),
    plugin_manager: pluggy.PluginManager | None = None,
    drafter: DrafterLike = None,
    drafter_model: nn.Module | None = None,
    build_slim: bool = True,
    use_measured: bool = True,
    watch_drafter: bool = True,
) -> RunContext:
    """The context of a run on ``target``, from what is already read (pure: it reads no file and
    warns nothing; what the user should hear is in ``notices``).

    Args:
        settings: the settings to run; None runs ``spec``'s (refused when its tuned file was made
            for another model), else :class:`TierSettings` defaults.
        spec: the resolution of the settings (:func:`viasd_adapt.config.resolve.read_settings`).
        mask: a :class:`RoutingMask` (its layer count checked) or a :class:`MaskArtifact` (its
            fingerprint checked); not needed for modes none and lenient, which ignore one.
        mask_source: how errors name the mask.
        evidence: the tuned file that prices the adaptive tier (None: none).
        plugins, plugin_manager: the plugins, or an already built manager (``plugins`` then unused).
        drafter, drafter_model: what the run drafts with, when known (:meth:`RunContext.for_drafter`).
        build_slim: False when the adapter builds its own slim verifier from the routing mask.
        use_measured: False for a framework whose cycles the tuned points do not describe (EAGLE).
        watch_drafter: False leaves the drafter-quality monitor out (:attr:`RunContext.watch_drafter`).

    Raises ConfigError for bad settings or a slim mode without a mask; ModelMismatchError for a
    mask or tuned file made for another model.
    """
    if settings is None and spec is not None:
        if spec.tuned is not None:
            check_tuned_model(spec.tuned, target, source=f"tuned settings {spec.tuned_path}")
            checked = spec_for_device(spec, target)
            spec = replace(checked, notices=spec.notices + checked.notices)
            evidence = None if spec.not_applied.startswith(OTHER_DEVICE) else evidence
        settings = spec.settings
    settings = check_settings(settings if settings is not None else TierSettings())
    routing = resolve_mask(target, mask, settings.mode, source=mask_source)
    plugins = tuple(plugins)
    # Built once: fails now on a malformed plugin, and entry-point discovery is not paid per call.
    manager = plugin_manager if plugin_manager is not None else make_plugin_manager(plugins)
    notices = [*(spec.notices if spec is not None else ()), negative_delta_notice(mask, settings)]
    context = RunContext(target, settings, manager, routing, _slim_over(target, routing, build_slim), evidence,
                         spec=spec, mask=mask, plugins=plugins, build_slim=build_slim,
                         use_measured=use_measured, mask_source=mask_source, watch_drafter=watch_drafter)
    drafted = context.for_drafter(drafter, drafter_model)
    return replace(drafted, notices=tuple(n for n in notices if n is not None) + drafted.notices)


def open_context(
    target: nn.Module,
    mask: MaskLike | None = None,
    settings: TierSettings | None = None,
    plugins: Iterable[object] = (),
    *,
    plugin_manager: pluggy.PluginManager | None = None,
    build_slim: bool = True,
    tuned: Any = UNREAD,
    drafter: DrafterLike = None,
    drafter_model: nn.Module | None = None,
    use_measured: bool = True,
) -> RunContext:
    """Reads what a run on ``target`` needs, resolves its context and gives its notices: the model
    form of :func:`context` (which programs call), with the adapters' own switches.

    Args:
        target: the full verifier q (for EAGLE, the EaModel's base model).
        mask: a :class:`RoutingMask`, a :class:`MaskArtifact` or the path of a ``mask.json`` (read
            once; checked against ``target``'s fingerprint). Not needed for modes none and lenient.
        settings: the settings to run (checked); None runs the tuned choice measured with this mask
            path (refused when tuned on another model), else :class:`TierSettings` defaults.
        plugins, plugin_manager: as :func:`resolve_context`.
        build_slim: False when the adapter builds its own slim verifier from the routing mask.
        tuned: the tuned file whose measurements the adaptive tier starts from (None: none). By
            default, when the settings adapt, the ``tuned.json`` beside a mask path (read once:
            the settings resolver's read is reused).
        drafter, drafter_model: what the run drafts with, when it is known at set-up (PEARL's
            drafter, EAGLE's :data:`EAGLE_HEAD` and its layer): tuned settings measured with another
            drafter are then not applied. None: not known here (HF asks per call).
        use_measured: False for a framework whose cycles the tuned points do not describe (EAGLE).
    """
    context = _opened(target, mask, settings, plugins, plugin_manager=plugin_manager, build_slim=build_slim,
                      tuned=tuned, drafter=drafter, drafter_model=drafter_model, use_measured=use_measured)
    emit(context.notices)
    return context


def _opened(target: nn.Module, mask: MaskLike | None, settings: TierSettings | None, plugins: Iterable[object], *,
            tuned: Any = UNREAD, **options: Any) -> RunContext:
    """:func:`open_context` without giving the notices: the files read, the context resolved, what
    the user should hear in its ``notices``."""
    settings, no_mask = no_mask_default(mask, settings)
    path = Path(mask).expanduser() if isinstance(mask, (str, os.PathLike)) else None
    spec = read_settings(path) if settings is None and path is not None else None
    mode = (spec.settings if spec is not None else check_settings(settings or TierSettings())).mode
    artifact: MaskLike | None = mask if path is None else None
    if path is not None and (mode.uses_slim or (spec is not None and spec.tuned_applied)):
        # The resolver may have read it already (to compare it with the tuned file's mask); a tuned
        # choice without a slim verifier keeps it for the defaults another drafter runs.
        artifact = spec.masks.get(path) if spec is not None else None
        artifact = artifact if artifact is not None else MaskArtifact.load(path)
    if tuned is UNREAD:
        tuned = spec.evidence if spec is not None else (find_tuned(path) if path is not None and _adapts(settings) else None)
    context = resolve_context(target, settings, spec=spec, mask=artifact, mask_source=str(path) if path else "mask",
                              evidence=tuned, plugins=plugins, **options)
    if no_mask is not None:
        context = replace(context, notices=(no_mask, *context.notices))
    return context


def _adapts(settings: TierSettings | None) -> bool:
    return check_settings(settings if settings is not None else TierSettings()).adapts


# ============================================================================ the one public builder


@runtime_checkable
class PairLike(Protocol):
    """What :func:`context` reads of a pair from :func:`viasd_adapt.load_pair` (a
    :class:`~viasd_adapt.models.pair.LoadedPair`, which this room may not import): its target, and
    the context of a run on it from what it read when it loaded."""

    target: nn.Module

    def run_context(self, settings: TierSettings | None = None, plugins: Iterable[object] = (), *,
                    drafter: DrafterLike = None, advice: bool = True, **options: Any) -> RunContext: ...


def build_context(
    target_or_pair: nn.Module | PairLike,
    *,
    mask: MaskLike | None = None,
    settings: TierSettings | None = None,
    plugins: Iterable[object] = (),
    tuned: Any = UNREAD,
    drafter: DrafterLike = None,
    plugin_manager: pluggy.PluginManager | None = None,
) -> RunContext:
    """:func:`context` without giving the notices (they are in the returned context's ``notices``):
    for a caller that collects every notice of a run and gives them at its own edge."""
    if _is_eagle_model(target_or_pair):  # the run is its base model's, drafted by its head
        return _opened(target_or_pair.base_model, mask, settings, plugins, plugin_manager=plugin_manager,
                       **eagle_switches(target_or_pair))
    if isinstance(target_or_pair, nn.Module):
        return _opened(target_or_pair, mask, settings, plugins, plugin_manager=plugin_manager, tuned=tuned,
                       drafter=drafter)
    if not isinstance(target_or_pair, PairLike):
        raise ConfigError(f"viasd_adapt.context takes a model (an nn.Module) or a pair from viasd_adapt.load_pair, "
                          f"got {type(target_or_pair).__name__}")
    pair = target_or_pair
    if mask is not None:  # another mask than the pair's: read as for a model (the pair's tuned choice is its own mask's)
        return _opened(pair.target, mask, settings, plugins, plugin_manager=plugin_manager, tuned=tuned,
                       drafter=drafter)
    options: dict[str, Any] = {} if tuned is UNREAD else {"evidence": tuned}
    # what the pair read when it loaded: nothing is read again
    return pair.run_context(settings, plugins, drafter=drafter, plugin_manager=plugin_manager, **options)


def _is_eagle_model(model: Any) -> bool:
    """Whether ``model`` is an eagle-llm ``EaModel``: an EAGLE head (``ea_layer``) over the target (``base_model``)."""
    return isinstance(model, nn.Module) and hasattr(model, "ea_layer") and hasattr(model, "base_model")


def eagle_switches(ea_model: nn.Module) -> dict[str, Any]:
    """How a run of an EaModel is set up on its base model: EAGLE drafts with its head (tuned settings
    measured with a drafter model are not its own), builds its own tree variant of the slim verifier,
    and tuned.json's points, which measure the engine's loop and not EAGLE's tree, do not price it."""
    return dict(build_slim=False, use_measured=False, tuned=None, drafter=EAGLE_HEAD, drafter_model=ea_model.ea_layer)


def context(
    target_or_pair: nn.Module | PairLike,
    *,
    mask: MaskLike | None = None,
    settings: TierSettings | None = None,
    plugins: Iterable[object] = (),
    tuned: Any = UNREAD,
    drafter: DrafterLike = None,
    plugin_manager: pluggy.PluginManager | None = None,
) -> RunContext:
    """The :class:`RunContext` of a run: the one way to configure every adapter
    (``hf.tiered(target, context=...)``, ``eagle.tiered``, ``pearl_generate``).

    Its notices (tuned settings not applied, a negative Delta, no mask given) are given here, as
    warnings naming the caller's line, once; the returned context holds none, so no adapter repeats
    them.

    Args:
        target_or_pair: the target (the full verifier q: a transformers model), an eagle-llm
            ``EaModel`` (the run is its base model's, drafted by its head: ``tuned`` and ``drafter``
            are then EAGLE's own), or a pair from :func:`viasd_adapt.load_pair`, whose mask, tuned
            choice and evidence are used as the pair read them (no file is read again).
        mask: a :class:`~viasd_adapt.config.mask.RoutingMask`, a
            :class:`~viasd_adapt.config.mask.MaskArtifact` or the path of a ``mask.json`` (read once,
            checked against the target's fingerprint); for a pair, instead of its own. Not needed
            for modes none and lenient.
        settings: the settings to run (checked); None runs the tuned choice (the pair's, or the
            ``tuned.json`` measured with a mask path), else :class:`TierSettings` defaults. With
            neither a mask nor settings a model runs untiered SD (mode none), with a notice.
        plugins: pluggy plugins (rules and observers, :mod:`viasd_adapt.core.hooks`).
        tuned: the tuned file the adaptive tier's prices and priors come from (None: none); by
            default the pair's, or the ``tuned.json`` beside a mask path.
        drafter: what the run drafts with, when known at set-up (a drafter model, or
            ``"prompt-lookup"``): tuned settings measured with another drafter are then not applied.
            HF checks each call's drafter itself.
        plugin_manager: an already built plugin manager (``plugins`` are then unused).

    Raises :class:`~viasd_adapt.errors.ConfigError` for bad settings or a slim mode without a mask,
    :class:`~viasd_adapt.errors.ModelMismatchError` for a mask or tuned file made for another model.
    """
    built = build_context(target_or_pair, mask=mask, settings=settings, plugins=plugins, tuned=tuned, drafter=drafter,
                          plugin_manager=plugin_manager)
    emit(built.notices)
    return replace(built, notices=())


# ============================================================================ the adapters' 0.2 arguments

#: The run's configuration that adapters took as their own arguments in 0.2; it comes through
#: :func:`context` now, and each adapter takes the context beside the framework's own options only.
RUN_OPTIONS = ("mask", "settings", "plugins", "plugin_manager", "tuned")


def loose_run_options(adapter: str, context: Any, given: dict[str, Any], *, accepted: Iterable[str] = RUN_OPTIONS,
                      slot: str = "mask", stacklevel: int = 3) -> tuple[RunContext | None, dict[str, Any]]:
    """The context an adapter was given, and the run options it was given loosely (0.2's way).

    Beside a context, any of :data:`RUN_OPTIONS` is refused by name (a :class:`ConfigError`): the
    context already says what the run uses, and a silent precedence would drop one of the two.
    Without a context, the loose ones still work until 0.4.0 with a :class:`DeprecationWarning`
    naming :func:`context`, pointing ``stacklevel`` frames up (:func:`~viasd_adapt.deprecated.deprecated_use`).
    ``accepted``: the names this adapter took (others are unexpected keywords, as before).
    ``slot``: the option 0.2 took in the position ``context`` holds now (``mask`` for HF and EAGLE,
    ``settings`` for PEARL): a value of that kind there is read as it, with the same warning."""
    from viasd_adapt.deprecated import deprecated_use

    unexpected = [name for name in given if name not in RUN_OPTIONS or (context is None and name not in accepted)]
    if unexpected:
        raise TypeError(f"{adapter}() got an unexpected keyword argument {unexpected[0]!r}")
    given = dict(given)
    if context is not None and not isinstance(context, RunContext):
        if not _fits_slot(context, slot) or slot in given:
            raise ConfigError(f"{adapter}: context= takes a RunContext from viasd_adapt.context(...), "
                              f"got {type(context).__name__}")
        context, given = None, {slot: context, **given}  # 0.2's positional mask (or settings)
    if not given:
        return context, {}
    names = [name for name in RUN_OPTIONS if name in given]
    if context is not None:
        raise ConfigError(f"{adapter}: pass {', '.join(names)} through viasd_adapt.context(...), not beside context=")
    spelled = ", ".join(f"{name}=..." for name in names)
    deprecated_use(f"{adapter}(..., {spelled}) without a context",
                   f"{adapter}(..., context=viasd_adapt.context(target, {spelled}))", stacklevel=stacklevel)
    return None, given


def _fits_slot(value: Any, slot: str) -> bool:
    if slot == "settings":
        return isinstance(value, TierSettings)
    return isinstance(value, (str, os.PathLike, RoutingMask, MaskArtifact))


__all__ = ["RunContext", "context", "open_context"]
