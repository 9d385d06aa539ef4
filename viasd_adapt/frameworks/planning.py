"""The planner: the one set-up of a run, for every command.

A command names its pair (:class:`ChosenPair`: ``--pair``, or ``--target``/``--draft``) and hands
every flag of the run over as one typed, frozen :class:`RunOptions`; :func:`plan_run` does the
rest, in this order, each step once:

1. **resolve** the settings (``config/resolve.py`` :func:`~viasd_adapt.config.resolve.read_settings`:
   defaults < ``tuned.json`` < the tuner's best points < preset < flags), reading each file once;
2. **load** the pair with what was read (``models/pair.py`` :func:`~viasd_adapt.models.pair.load_pair`),
   and the models a framework of the run loads for itself (EAGLE's EaModel, with its head), which
   the pair then holds (:attr:`~viasd_adapt.models.pair.LoadedPair.framework_models`);
3. **check** the settings against the models, once (``engine/context.py``
   :func:`~viasd_adapt.engine.context.spec_for_drafter`): a tuned file made for another model is
   refused, one measured with another drafter or on another kind of device is not applied;
4. **give the notices** of all three steps, once: :func:`plan_run` is the edge of every command.

What one request runs with comes from the plan: :meth:`PlannedRun.context` (the checked settings,
the mask, the tuned evidence for the checked drafter, the request's plugins) and
:meth:`PlannedRun.request`. Nothing of a run is kept anywhere else: the pair holds its models and the
files it read, the plan what was resolved for this command.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, Sequence

from viasd_adapt.config.provenance import Source
from viasd_adapt.config.resolve import DEFAULT, UNREAD, RunSpec, read_settings
from viasd_adapt.config.tuned import EAGLE_HEAD as EAGLE_HEAD_DRAFTER
from viasd_adapt.core.notices import Notice, emit
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import Mode, TierSettings
from viasd_adapt.engine.context import RunContext, resolve_context, spec_for_device, spec_for_drafter
from viasd_adapt.errors import ConfigError
from viasd_adapt.frameworks import registry
from viasd_adapt.frameworks.requests import RunRequest
from viasd_adapt.models.pair import LoadedPair, load_pair, named_dtype, resolve_mask_info

#: ``mode``'s source when the first-run rule chose it (``--explain`` shows it).
NO_MASK_SOURCE = Source.rule("no mask for this target: untiered (viasd models add makes one)")

#: The framework a run follows when none is named: the pair's tuned choice ``ar`` runs the target
#: alone, anything else drafts with HF assisted generation.
DEFAULT_FRAMEWORK = "hf"

#: How a framework that drafts with a model of its own loads it for a pair, by string (this room
#: reaches the adapters only so): the EAGLE head's EaModel.
_OWN_DRAFT_MODEL = ("eagle", "viasd_adapt.adapters.eagle.compat:load_for_pair")


class ChosenPair(Protocol):
    """What a command chose as its pair (``viasd_adapt.cli.options.PairChoice``: ``--pair``, or
    ``--target``/``--draft``): the paths to load, and the registry's record when it was named."""

    paths: Any  # viasd_adapt.models.registry.PairPaths, or None without --pair
    target: Path | None
    draft: Path | str | None
    eagle_head: Path | None

    @property
    def mask(self) -> Path | None: ...


@dataclass(frozen=True)
class ChosenPaths:
    """A pair chosen by its paths (``BenchConfig``'s target, drafter and EAGLE head), with the pair's
    own ``mask.json`` when it has one: a :class:`ChosenPair` that no registry record names."""

    target: Path | None
    draft: Path | str | None
    eagle_head: Path | None = None
    pair_mask: Path | None = None
    paths: Any = None

    @property
    def mask(self) -> Path | None:
        return self.pair_mask


@dataclass(frozen=True)
class RunOptions:
    """Every flag of one run, typed and named: what a command hands the planner.

    The tier settings (``mode`` ... ``adaptive``) are the resolver's flag layer: None means not
    given (the tuned or default value stands). The rest says where the models load, how the run
    samples, and how the command resolves (the bench's rows take the tuner's best points; ``viasd
    generate`` runs a first run without a mask untiered and refuses a flag its mode does not read;
    ``viasd tune`` reads no ``tuned.json``: it writes it)."""

    mode: str | Mode | None = None
    gamma: int | None = None
    alpha1: float | None = None
    alpha2: float | None = None
    lenience: float | None = None
    adaptive: bool | None = None
    preset: str = "default"
    mask: Path | None = None
    device: str = "auto"
    dtype: str | None = None
    device_map: str | None = None
    seed: int = 0
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    best_points: bool = False
    need_mask: bool | None = None  # None: when the resolved mode runs the slim tier
    untiered_without_mask: bool = False
    refuse_unread_flags: bool = False
    read_tuned: bool = True

    def tier_flags(self) -> dict[str, Any]:
        """The tier settings given, by field name (None: not given), for the resolver's flag layer."""
        mode = self.mode.value if isinstance(self.mode, Mode) else self.mode
        return {"mode": mode, "gamma": self.gamma, "alpha1": self.alpha1, "alpha2": self.alpha2,
                "lenience": self.lenience, "adaptive": self.adaptive}


@dataclass(frozen=True)
class PlannedRun:
    """A command's run, set up: the pair, the settings checked against it, what drafts, what the
    user was told. Immutable; each request builds its context from it (:meth:`context`)."""

    pair: LoadedPair
    spec: RunSpec
    frameworks: tuple[str, ...]
    choice: ChosenPair
    options: RunOptions
    drafter: Any = None
    notices: tuple[Notice, ...] = ()
    #: lines for people that are not warnings (the framework the pair's choice picked, and why)
    notes: tuple[str, ...] = ()

    @property
    def framework(self) -> str:
        """The run's framework (the first, for a bench of several)."""
        return self.frameworks[0]

    @property
    def settings(self) -> TierSettings:
        return self.spec.settings

    def own_spec(self) -> RunSpec:
        """The pair's own settings (its tuned choice, without the flags and the tuner's best points:
        ``viasd demo``'s answer), from the files the plan read, checked against the target's device
        as the plan's were; nothing is read and nothing is said again."""
        own = read_settings(pair_mask=self.choice.mask, tuned=self.spec.tuned, read_masks=self.spec.masks)
        return replace(spec_for_device(own, self.pair.target), notices=())

    def context(self, settings: TierSettings | None = None, plugins: Sequence[object] = (), *,
                advice: bool = False) -> RunContext:
        """The context of one request: ``settings`` (None: the plan's own, with their sources),
        the pair's mask, the tuned evidence the plan's check kept, ``plugins``. Nothing is read and
        the drafter is not checked again (:attr:`drafter` was, by :func:`plan_run`). The notices
        the plan gave are not in it; ``advice``: the mask's Delta advice (a command that runs many
        requests gives it once, in its own report)."""
        info = self.pair.mask
        mask = None if info is None else info.artifact if advice and info.artifact is not None else info.mask
        spec = replace(self.spec, notices=()) if settings is None else None
        context = resolve_context(self.pair.target, settings, spec=spec, mask=mask,
                                  mask_source=info.source if info else "mask", evidence=self.spec.evidence,
                                  plugins=plugins, drafter_model=_drafter_model(self.drafter))
        return replace(context, drafter=self.drafter)

    def request(self, prompt_ids: list[int], max_new_tokens: int, *, framework: str | None = None,
                settings: TierSettings | None = None, **options: Any) -> RunRequest:
        """The request of one generation by ``framework`` (default: the plan's): ``settings``
        (default: the plan's), the plan's seed and sampling unless ``options`` name others, and
        the run context with the request's token stream (:attr:`RunRequest.stream_plugins`) for a
        framework with a tier. A framework without one (``lookup``) runs as shipped."""
        name = framework or self.framework
        settings = settings if settings is not None else self.spec.settings
        options = {"sampling": self.options.sampling, "seed": self.options.seed, **options}
        chosen = registry.get(name)
        if chosen.runs_stock_only:  # stock prompt lookup: the framework as shipped
            return RunRequest.stock_run(prompt_ids, max_new_tokens, settings, **options)
        request = RunRequest.tiered(prompt_ids, max_new_tokens, settings, **options)
        if not chosen.has_tier:
            return request
        own = settings is self.spec.settings  # the plan's own: the context keeps where each came from
        return replace(request, context=self.context(None if own else settings, request.stream_plugins))


def plan_run(choice: ChosenPair, options: RunOptions, framework: str | Sequence[str] | None = None, *,
             loaded: LoadedPair | None = None, tuned: Any = UNREAD) -> PlannedRun:
    """A command's run, set up (module docstring): resolve, load, check, and give the notices once.

    Args:
        choice: the pair (its paths; ``choice.paths`` when it was named by ``--pair``).
        options: every flag of the run (:class:`RunOptions`).
        framework: the framework that runs (a name), the frameworks of a bench (a sequence), or
            None: the one the pair's tuned choice implies (``ar`` when it runs the target alone,
            else :data:`DEFAULT_FRAMEWORK`).
        loaded: the pair, when the caller loaded it already (not loaded again).
        tuned: the tuned file beside the mask, when the caller read it already.
    """
    follows_choice = framework is None
    names = (DEFAULT_FRAMEWORK,) if follows_choice else (framework,) if isinstance(framework, str) else tuple(framework)
    single = isinstance(framework, str) or follows_choice  # a bench's rows run several: none is the resolver's
    notes: list[str] = []
    spec = _resolve(choice, options, names[0] if single else None, tuned)
    if follows_choice and spec.runs_target_alone:
        alone = next(name for name in registry.names() if registry.get(name).runs_target_alone)
        names, reason = (alone,), spec.tuned.target_alone_reason()
        spec = _resolve(choice, replace(options, mode=None), alone, spec.tuned)
        notes.append(f"note: running the target alone (--framework {alone}): {reason}; --framework "
                     f"{DEFAULT_FRAMEWORK} drafts anyway")
    pair = loaded if loaded is not None else _load(choice, options, names[0] if single else None, spec)
    drafter = drafter_of(names, pair)
    checked = spec_for_drafter(spec, pair.target, drafter)  # the one check of the settings against the models
    notices = spec.notices + tuple(n for n in checked.notices if n not in spec.notices)  # each once
    if options.need_mask is None and checked.settings.mode.uses_slim and pair.mask is None:
        # the tuned choice needed no mask, the defaults it was set aside for do (a bench says what its rows need)
        pair = replace(pair, mask=resolve_mask_info(pair.target, checked.mask_path, checked.settings.ratio,
                                                    read_masks=checked.masks))
    pair = _with_framework_models(pair, names)
    emit(notices)
    return PlannedRun(pair, replace(checked, notices=()), names, choice, options, drafter, notices, tuple(notes))


def _resolve(choice: ChosenPair, options: RunOptions, framework: str | None, tuned: Any) -> RunSpec:
    """The run's settings and mask (step 1), each file read once; the notices stay in the spec.
    ``framework``: the one framework of the run (None: a bench's several)."""
    if framework is not None and registry.get(framework).honours(registry.DRAFTER) and choice.draft is None:
        raise ConfigError(f"--framework {framework} needs --draft")
    if not options.read_tuned:
        tuned = None
    has_tier = framework is None or registry.get(framework).has_tier  # no tier: untiered, whatever the pair's choice
    spec = read_settings(options.mask, pair_mask=choice.mask if options.mask is None else None, framework=framework,
                         has_tier=has_tier, best_points=options.best_points, preset=options.preset,
                         flags=options.tier_flags(), tuned=tuned)
    if options.untiered_without_mask:
        spec = without_mask(spec) or spec  # a first run on the user's own target: untiered
    if options.refuse_unread_flags:
        spec.refuse_unread_flags()  # --mode lenient --no-adaptive would change nothing: refused by name
    if options.need_mask is None and spec.settings.mode.uses_slim and spec.mask_path is None:
        raise ConfigError(f"--mode {spec.settings.mode.value} needs --mask (a mask.json searched for this target)")
    return spec


def _load(choice: ChosenPair, options: RunOptions, framework: str | None, spec: RunSpec) -> LoadedPair:
    """The pair, loaded once with what ``spec`` read (step 2). A single ``framework`` that reads no
    drafter does not load one (a bench, ``framework`` None, keeps it: its rows price the drafter)."""
    draft = choice.draft
    if framework is not None and not registry.get(framework).honours(registry.DRAFTER):
        draft = None
    need_mask = options.need_mask if options.need_mask is not None else spec.settings.mode.uses_slim
    return load_pair(choice.target, draft, spec.mask_path, need_mask=need_mask, device=options.device,
                     eagle_head=choice.eagle_head, ratio=spec.settings.ratio, spec=spec,
                     dtype=named_dtype(choice.paths, options.dtype), device_map=options.device_map)


def _with_framework_models(pair: LoadedPair, names: tuple[str, ...]) -> LoadedPair:
    """The pair with the models its frameworks load for themselves (EAGLE's EaModel), loaded once
    here for every request of the run; a framework that cannot run on this pair loads nothing (the
    command says why when it would run it)."""
    kind, loader = _OWN_DRAFT_MODEL
    wanted = [name for name in names if registry.get(name).drafts_with_head and registry.get(name).unavailable(pair) is None]
    if not wanted or kind in pair.framework_models:
        return pair
    module, _, function = loader.partition(":")
    model = getattr(importlib.import_module(module), function)(pair)
    return replace(pair, framework_models={**pair.framework_models, kind: model})


def drafter_of(framework: str | Sequence[str], pair: LoadedPair) -> Any:
    """What ``framework`` (or every framework of a bench) drafts with on ``pair``, as the tuned
    file's drafter is checked: its EAGLE head, prompt lookup, the drafter model, or None for the
    target alone (no framework reads a drafter)."""
    names = (framework,) if isinstance(framework, str) else tuple(framework)
    frameworks = [registry.get(name) for name in names]
    if frameworks and all(f.drafts_with_head for f in frameworks):
        return EAGLE_HEAD_DRAFTER
    if not any(f.honours(registry.DRAFTER) for f in frameworks):
        return None
    return pair.lookup if pair.lookup is not None else pair.draft


def without_mask(spec: RunSpec) -> RunSpec | None:
    """``spec`` run untiered when it needs a mask it lacks and its mode is only the default; None when it
    needs nothing changed (it has a mask, or needs none) or when the user asked for the mode."""
    if not spec.settings.mode.uses_slim or spec.mask_path is not None:
        return None
    if spec.sources.get("mode", DEFAULT) != DEFAULT:
        return None
    return replace(spec, settings=spec.settings.with_(mode=Mode.NONE), sources={**spec.sources, "mode": NO_MASK_SOURCE})


def _drafter_model(drafter: Any) -> Any:
    """The drafter model the adaptive tier prices (None for an EAGLE head, prompt lookup or none)."""
    from torch import nn

    return drafter if isinstance(drafter, nn.Module) else None


__all__ = ["DEFAULT_FRAMEWORK", "NO_MASK_SOURCE", "ChosenPair", "ChosenPaths", "PlannedRun", "RunOptions", "drafter_of", "plan_run",
           "without_mask"]
