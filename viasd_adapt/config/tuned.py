"""The tuned-settings artifact, ``tuned.json``: what ``viasd tune`` chose for a pair, beside its mask.

``tuned.json`` holds the chosen :class:`~viasd_adapt.core.settings.TierSettings` (the mode among them:
lossy VIA-SD, the lenient baseline, or plain lossless SD when nothing beats it at the budget),
the fidelity budget it was chosen under, what was measured for it, on which framework's loop it
was measured (``measured_on``), and the target's fingerprint, so it is refused for another model
like a mask is.

It lives here, below both :mod:`viasd_adapt.tuning` (which writes it) and :mod:`viasd_adapt.bench`
(which reads it), so that neither package imports the other for it. Settings are *resolved* from
it by :func:`viasd_adapt.config.resolve.resolve_settings`, the one place that stacks the layers;
the vLLM plugin (:mod:`viasd_adapt.serving.config`) reads the same class, so both see one version
check, one set of defaults and one list of frameworks a setting can have been measured on. This
module imports neither torch nor any model code: the plugin reads it in every vLLM process.

A setting the file leaves out is :class:`~viasd_adapt.core.settings.TierSettings`' default, the
lenient tolerance included: a ``lenient`` choice that states no ``lenience`` runs at
``TierSettings().lenience`` (0.5) in ``viasd generate`` and in the vLLM plugin alike. Why the default
and not 0: the file's ``settings`` are a TierSettings, and every other omitted setting (alpha1,
gamma, ...) is read as its default; and a lenient choice at tolerance 0 would be plain SD, which
the tuner records as the choice ``none``, so reading a missing tolerance as 0 would silently turn a
lenient choice into another one. ``viasd generate --explain`` credits such a value to the
default, not to the file (:attr:`TunedSettings.stated_settings`).

Settings belong to a pair, not to a target: how often gate 1 accepts, what the lenient tolerance
costs in regret, which setting is cheapest, all depend on the drafter as much as on the target.
So the file also records the drafter it was measured with (``drafter``): the drafter model's
fingerprint (:class:`~viasd_adapt.config.fingerprint.ModelFingerprint`, the record a mask carries
for its target), or :data:`PROMPT_LOOKUP_DRAFTER` for the prompt-lookup drafter. A run whose
drafter is another one does not apply the tuned settings (it runs the defaults, with a
:class:`TunedForAnotherDrafterWarning`; ``--explain`` says "not applied: measured with another
drafter"), and neither does an EAGLE run (EAGLE drafts with its head) of settings that record a
drafter model or prompt lookup, unless they were measured on EAGLE (``measured_on``). A file
written before the record existed (no ``drafter``) names no drafter: it cannot be checked, so it
is applied as before, with whatever drafter the run has (EAGLE's head included), and ``--explain``
says that its drafter was not recorded. Run ``viasd tune`` again to record it; the shipped
``tuned.json`` files record their pair's drafter.

Values a hand-edited file can get wrong, and what each gets (the adaptive tier reads the forward
costs as its prices and the measured points as its priors, :mod:`viasd_adapt.engine.priors`):

* ``choice`` is required, a non-empty name (``none``, ``lenient``, ``lossless``, ``lossy``, or
  ``lossless-fixed``, ``lossy-fixed``; or ``ar``, :data:`PLAIN_DECODING_CHOICE`, when the target alone was
  cheaper than every drafting setting: ``settings`` then hold the cheapest drafting setting, for a
  run that asks to draft anyway): what ``--explain`` and the vLLM plugin say was chosen, and what
  ``viasd generate --pair`` runs. Missing or empty: **refused**, like every other required field.
* the forward costs, ``report.costs.<mask>.c_*`` (seconds): ``c_full_block``, ``c_full``, ``c_slim``
  and ``c_resume`` must be finite and > 0, ``c_draft`` finite and >= 0 (0: prompt lookup, which
  runs no model); ``c_slim`` and ``c_resume`` may be null (no mask). Else **refused**, by the
  entry and the field: a pass that costs nothing, or less than nothing, is no measurement, and
  there is no nearby value it could stand for.
* a measured point's ``full_equivalent`` (the prior's cost per token) must be finite and > 0, its
  ``metrics.mean_accepted_length`` (the prior's tokens per cycle) finite and >= 0, its
  ``metrics.cycles`` (the prior's weight) finite and >= 0. Negative or NaN: **refused**.
* more ``metrics.cycles`` than the point's ``tokens`` (every cycle commits at least one token, so
  ``"cycles": 1e9`` over 1536 tokens cannot have been measured): **clamped** to ``tokens``, with a
  :class:`TunedValueClampedWarning` naming the file and the field. The count only bounds the
  prior's weight (:func:`viasd_adapt.engine.priors.prior_weight`), so the file stays usable.
"""


from __future__ import annotations

import math
import os
import warnings
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Annotated, Any, Callable, ClassVar

from pydantic import AfterValidator, BeforeValidator, Field, PrivateAttr, field_validator, model_validator
from typing import Literal, Union

from viasd_adapt.config.fingerprint import ModelFingerprint
from viasd_adapt.config.hardware import HardwareStamp
from viasd_adapt.config.schema import Artifact, SparseRecord, TierSettingsField, load_artifact, validate
from viasd_adapt.core.notices import Notice, emit
from viasd_adapt.core.settings import TierSettings

TUNED_FILENAME = "tuned.json"
FORMAT = "viasd-adapt/tuned-settings"
#: 2: the tuner's families and choices take the one vocabulary of modes (:data:`OLD_NAMES`)
VERSION = 2
#: The framework whose loop ``viasd tune`` runs every candidate on. Files written before the field
#: existed were measured there too, so that is what an old file is read as.
MEASURED_ON_DEFAULT = "engine"
#: The frameworks a tuned setting can have been measured on: those of
#: :mod:`viasd_adapt.frameworks.registry` with a verify step (a test keeps the two lists equal).
#: Named here, not imported, so that reading tuned.json loads no framework code.
TIERED_FRAMEWORKS = ("eagle", "engine", "hf", "pearl")
#: Those of them that draft with an EAGLE head (``Framework.drafts_with_head``; the same test keeps
#: it equal to the registry): settings measured on one of them belong to a run drafting with its head.
HEAD_DRAFTING_FRAMEWORKS = ("eagle",)
SETTING_NAMES = frozenset(f.name for f in dataclass_fields(TierSettings))
#: ``drafter`` of settings measured with the prompt-lookup drafter (the ``--draft`` name; no model to fingerprint).
PROMPT_LOOKUP_DRAFTER = "prompt-lookup"


def _drafter_record(value: Any) -> Any:
    """``drafter``: a fingerprint (a JSON object) or :data:`PROMPT_LOOKUP_DRAFTER`, said in one sentence."""
    if value is None or isinstance(value, (dict, ModelFingerprint)) or value == PROMPT_LOOKUP_DRAFTER:
        return value
    raise ValueError(f"'drafter' must be the drafter model's fingerprint (an object) or {PROMPT_LOOKUP_DRAFTER!r}; "
                     f"got {value!r}")


#: What ``drafter`` records: the drafter model's fingerprint, or the prompt-lookup drafter by name.
DrafterRecord = Annotated[Union[ModelFingerprint, Literal["prompt-lookup"]], BeforeValidator(_drafter_record)]


#: The choice recorded when plain decoding (the target alone, one 1-token pass per token) cost less
#: than every drafting setting measured: ``viasd generate --pair`` then runs the target alone.
PLAIN_DECODING_CHOICE = "ar"


def plain_decoding_cost(costs: dict[str, Any]) -> float | None:
    """What plain decoding costs in full-equivalent passes per token, from a tune's forward costs
    (``report.costs``): one 1-token target pass per token, ``c_full / c_full_block``, measured in the
    same run as every other point. None when the costs do not say."""
    entry = costs.get("None") or next(iter(costs.values()), None)
    if not entry or not entry.get("c_full") or not entry.get("c_full_block"):
        return None
    return entry["c_full"] / entry["c_full_block"]


#: Every ``choice`` the tuner writes: its families (:data:`viasd_adapt.tuning.grid.FAMILIES`; a test
#: keeps the two equal) and plain decoding. They are the bench's row names: a mode's name is its
#: default run (the adaptive tier for lossless and lossy), ``-fixed`` the tier on every cycle, ``none``
#: untiered SD (:func:`viasd_adapt.core.settings.mode_label`). Named here, so that reading
#: tuned.json loads no tuner.
KNOWN_CHOICES = ("none", "lossless-fixed", "lenient", "lossy-fixed", "lossless", "lossy", PLAIN_DECODING_CHOICE)
#: The names files of version 1 gave the tuner's families (the choice, the measured point, the keys
#: of ``report.best_within_budget``) -> the one vocabulary. Still read, with an
#: :class:`OldTunedNamesWarning`, until 0.4.0.
OLD_NAMES = {"sd": "none", "viasd": "lossy-fixed", "viasd-adaptive": "lossy", "lossless-adaptive": "lossless"}
#: Version 1's ``lossless`` was the tier on every cycle; in version 2 it is the default, adaptive
#: run: which one a file means is decided by its version.
OLD_NAMES_OF_VERSION_1 = {**OLD_NAMES, "lossless": "lossless-fixed"}
#: When the old names stop being read.
OLD_NAMES_REMOVED_IN = "0.4.0"


class OldTunedNamesWarning(FutureWarning):
    """A tuned.json (or ``viasd tune --json`` file) names the tuner's families by the names of
    version 1 (``sd``, ``viasd``, ...): read under today's names until 0.4.0. A FutureWarning, which
    Python shows by default: the one who can act on it is whoever runs the command, not a programmer."""


def renamed_families(data: Any, version: int, families: Callable[[Any], Any] | None = None) -> tuple[Any, list[str]]:
    """``data`` (a tuned.json's JSON) with the old family names (:data:`OLD_NAMES`, and version 1's
    ``lossless``) of its choice, its measured point and its best points under today's names, and the
    old spellings found (none: ``data`` itself). Only names are changed, never a value."""
    table = OLD_NAMES_OF_VERSION_1 if version == 1 else OLD_NAMES
    found: list[str] = []

    def new(name: Any) -> Any:
        if isinstance(name, str) and name in table:
            if name not in found:
                found.append(name)
            return table[name]
        return name

    def point(value: Any) -> Any:
        return {**value, "family": new(value["family"])} if isinstance(value, dict) and "family" in value else value

    if not isinstance(data, dict):
        return data, found
    renamed = {**data, "choice": new(data.get("choice"))} if "choice" in data else dict(data)
    if "measured" in data:
        renamed["measured"] = point(data["measured"])
    report = data.get("report")
    if isinstance(report, dict) and isinstance(report.get("best_within_budget"), dict):
        best = {new(name): point(value) for name, value in report["best_within_budget"].items()}
        renamed["report"] = {**report, "best_within_budget": best}
    return (renamed, found) if found else (data, found)


def old_names_notice(source: str, found: list[str]) -> Notice:
    """The one notice for a file read under today's names: the file, and each old spelling with its new name."""
    table = OLD_NAMES_OF_VERSION_1
    spelled = ", ".join(f"{old} (now {table[old]})" for old in found)
    return Notice(OldTunedNamesWarning, (
        f"viasd-adapt: {source} names the tuner's choices the old way: {spelled}; read under today's names, "
        f"which are the bench's and --mode's. The old names are read until {OLD_NAMES_REMOVED_IN}: run viasd tune "
        "again, or load and save the file (TunedSettings.load(path).save(path)), to write the new ones"))


def _named_choice(value: str) -> str:
    """``choice``: what the tuner chose, by name; an empty or unknown one is refused (a choice no
    run knows would be "applied" as whatever its settings happen to say)."""
    if not value.strip():
        raise ValueError(f"'choice' must name what viasd tune chose ({', '.join(KNOWN_CHOICES)}); it is empty")
    if value not in KNOWN_CHOICES:
        raise ValueError(f"'choice' must be one of {', '.join(KNOWN_CHOICES)}; got {value!r}")
    return value


def _known_framework(value: Any) -> Any:
    """``measured_on``: one of :data:`TIERED_FRAMEWORKS` (``--explain`` prints it as a framework)."""
    if value not in TIERED_FRAMEWORKS:
        raise ValueError(f"'measured_on' must name the framework the settings were measured on, one of "
                         f"{', '.join(TIERED_FRAMEWORKS)}; got {value!r}")
    return value


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


#: The forward costs of ``report.costs`` entries (seconds) -> whether 0 is allowed (module docstring).
COST_FIELDS = {"c_full_block": False, "c_full": False, "c_slim": False, "c_resume": False, "c_draft": True}
#: The cost fields that may be null (no mask: no slim or resumed pass).
_NULLABLE_COSTS = ("c_slim", "c_resume", "c_draft")


def _forward_costs(costs: dict[str, Any]) -> dict[str, Any]:
    """``report.costs``: each entry's forward times finite and positive (``c_draft`` may be 0), named
    by entry and field when not (module docstring). The dict itself is kept as written."""
    for name, entry in costs.items():
        if not isinstance(entry, dict):
            raise ValueError(f"'report.costs.{name}' must be an object of forward costs, got {entry!r}")
        for field, zero_ok in COST_FIELDS.items():
            if field not in entry or (entry[field] is None and field in _NULLABLE_COSTS):
                continue
            value = entry[field]
            if not _number(value) or not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
                bound = "a finite number of seconds >= 0" if zero_ok else "a finite number of seconds > 0"
                raise ValueError(f"'report.costs.{name}.{field}' (a forward time) must be {bound}, got {value!r}")
    return costs


class TunedPoint(SparseRecord):
    """One measured point of the sweep, as ``tuned.json`` records it (the chosen one, or the best of
    a family). Every measurement is optional: a hand-written file may give only ``settings``."""

    family: str | None = None
    settings: TierSettingsField
    mask: str | None = None
    full_equivalent: float | None = None
    ll_drop: float | None = None
    overrule: float | None = None
    regret: float | None = None
    tokens: int | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    passes: dict[str, Any] = Field(default_factory=dict)

    @field_validator("full_equivalent")
    @classmethod
    def _a_cost(cls, value: float | None) -> float | None:
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"must be a finite number > 0 (the cost per token a prior starts from), got {value!r}")
        return value

    @field_validator("metrics")
    @classmethod
    def _prior_metrics(cls, metrics: dict[str, Any]) -> dict[str, Any]:
        for name, role in (("mean_accepted_length", "tokens per cycle"), ("cycles", "the prior's weight")):
            value = metrics.get(name)
            if value is not None and not (_number(value) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} ({role}) must be a finite number >= 0, got {value!r}")
        return metrics

    def clamped_cycles(self) -> float | None:
        """The point's ``metrics.cycles`` bounded by its ``tokens`` (module docstring), or None when
        they are within it (or not both stated)."""
        cycles = self.metrics.get("cycles")
        if cycles is None or self.tokens is None or cycles <= max(self.tokens, 0):
            return None
        return max(self.tokens, 0)


class TunedBudget(SparseRecord):
    """The fidelity budget the choice was made under (``None``: that bound was not set)."""

    max_ll_drop: float | None = None
    max_overrule: float | None = None
    max_regret: float | None = None


class TunedReport(SparseRecord):
    """The evidence: each family's best point within the budget, the forward costs, the masks."""

    best_within_budget: dict[str, TunedPoint | None] = Field(default_factory=dict)
    costs: Annotated[dict[str, Any], AfterValidator(_forward_costs)] = Field(default_factory=dict)
    masks: dict[str, Any] = Field(default_factory=dict)
    seconds: float | None = None
    mask_file: str | None = None
    points: int | None = None
    #: the sweep's one price list (every forward kind's rounds, medians and spread); None in older files
    prices: dict[str, Any] | None = None
    #: why the choice was written, in one line (the exact-first rule's comparison)
    why: str | None = None

    def best(self, family: str) -> TunedPoint | None:
        """The tuner's cheapest point of ``family`` (one of :data:`KNOWN_CHOICES` but ``ar``) within the budget."""
        return self.best_within_budget.get(family)


class TunedSettings(Artifact):
    """A tuner's choice and the evidence for it (``tuned.json``)."""

    FORMAT: ClassVar[str] = FORMAT
    VERSION: ClassVar[int] = VERSION
    WHAT: ClassVar[str] = "tuned-settings file"

    #: a family of :data:`KNOWN_CHOICES` ("none": untiered SD, "lenient", "lossless" and "lossy": the
    #: adaptive tier, "-fixed": the tier on every cycle), or "ar" (the target alone was cheapest;
    #: ``settings``: the cheapest drafting setting); required
    choice: Annotated[str, AfterValidator(_named_choice)]
    settings: TierSettingsField
    mask_bits: list[int] | None = None
    fingerprint: ModelFingerprint = Field(default_factory=ModelFingerprint)  # the same record a mask carries
    #: the drafter the settings were measured with (module docstring); None in files written before it was recorded
    drafter: DrafterRecord | None = None
    budget: TunedBudget = Field(default_factory=TunedBudget)
    measured: dict[str, Any] = Field(default_factory=dict)
    report: TunedReport = Field(default_factory=TunedReport)
    measured_on: Annotated[str, BeforeValidator(_known_framework)] = MEASURED_ON_DEFAULT
    #: where the settings were measured (:mod:`viasd_adapt.config.hardware`); None in files written before it was recorded
    hardware: HardwareStamp | None = None
    #: the names of the settings the file states (every one, for a file written by viasd tune)
    _stated: frozenset = PrivateAttr(default=SETTING_NAMES)

    def __init__(self, settings: TierSettings | dict | None = None, choice: str | None = None, mask_bits: list[int] | None = None,
                 fingerprint: ModelFingerprint | dict | None = None, budget: Any = None, measured: dict | None = None,
                 report: Any = None, **data: Any) -> None:
        # Positional construction, as the dataclass this replaced allowed: TunedSettings(settings, "lenient", None, fp).
        given = dict(settings=settings, choice=choice, mask_bits=mask_bits, fingerprint=fingerprint, budget=budget,
                     measured=measured, report=report)
        super().__init__(**{k: v for k, v in given.items() if v is not None or k == "mask_bits"}, **data)

    @model_validator(mode="wrap")
    @classmethod
    def _remember_stated_settings(cls, data: Any, handler: Any) -> "TunedSettings":
        if isinstance(data, TunedSettings):  # already read: it keeps what its file stated
            return handler(data)
        tuned = handler(data)
        raw = data.get("settings") if isinstance(data, dict) else None
        tuned._stated = frozenset(raw) & SETTING_NAMES if isinstance(raw, dict) else SETTING_NAMES
        return tuned

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        for record in ("drafter", "hardware"):  # an older file keeps its shape: no record is written as none
            if getattr(self, record) is None:
                data.pop(record, None)
        return data

    @classmethod
    def from_json(cls, data: Any, source: str | None = None) -> "TunedSettings":
        """Reads a tuned.json's JSON; a file that names the families the old way (:data:`OLD_NAMES`)
        is read under today's names, with one :class:`OldTunedNamesWarning` naming it."""
        source = source or cls.WHAT
        cls.check_header(data, source)
        data, found = renamed_families(data, data.get("version", 1))
        if found:
            emit([old_names_notice(source, found)])
        tuned = validate(cls, data, source)
        tuned.clamp_prior_weights(source)
        return tuned

    def clamp_prior_weights(self, source: str) -> None:
        """Bounds each measured point's ``metrics.cycles`` by its ``tokens``, with a
        :class:`TunedValueClampedWarning` naming ``source`` and the field (module docstring)."""
        for family, point in self.report.best_within_budget.items():
            bound = point.clamped_cycles() if point is not None else None
            if bound is not None:
                warnings.warn(f"{source}: 'report.best_within_budget.{family}.metrics.cycles' "
                              f"{point.metrics['cycles']!r} is more cycles than the point's {point.tokens} tokens "
                              f"(each cycle commits at least one); read as {bound}", TunedValueClampedWarning,
                              stacklevel=4)
                point.metrics["cycles"] = bound

    @property
    def stated_settings(self) -> dict[str, Any]:
        """The settings the file states, by name: what ``--explain`` credits to tuned.json. The
        others are :class:`TierSettings` defaults (module docstring), credited to the default."""
        return {name: value for name, value in self.settings.values().items() if name in self._stated}

    @classmethod
    def load(cls, path: str | os.PathLike) -> "TunedSettings":
        """Reads a tuned-settings file. Every reader of ``tuned.json`` goes through here (one read per
        run: see :func:`viasd_adapt.config.resolve.resolve_settings`); whether it was tuned on a given
        model is :func:`viasd_adapt.routing.mask.check_tuned_model`'s question."""
        return load_artifact(path, cls)

    def best(self, family: str) -> TunedPoint | None:
        """The tuner's cheapest measured point of ``family`` within the budget, whatever the overall choice."""
        return self.report.best(family)

    @property
    def runs_target_alone(self) -> bool:
        """Whether the tuner found plain decoding (the target alone) cheapest: choice ``ar``."""
        return self.choice == PLAIN_DECODING_CHOICE

    def target_alone_reason(self) -> str:
        """Why the target runs alone, in one clause with the tune's figures (full-equivalent passes per
        token): plain decoding's cost against the cheapest drafting setting's."""
        if self.report.why:  # the tuner's own sentence, from the comparison that made the choice
            return f"when this pair was tuned, the target alone was written: {self.report.why}"
        plain, drafting = plain_decoding_cost(self.report.costs), self.measured.get("full_equivalent")
        if plain is None or drafting is None:
            return "when this pair was tuned, the target alone was written"
        figures = f"{plain:.3f} full-equivalent passes/token against {drafting:.3f} for the drafting setting"
        if plain <= drafting:
            return f"when this pair was tuned, the target alone cost less than drafting ({figures})"
        # an older file: its words come from the same figures they quote
        return (f"when this pair was tuned, the target alone was written although drafting cost less ({figures}): "
                "the file predates the one price list; run viasd tune again")


def tuned_path_beside(mask_path: str | os.PathLike | None) -> Path | None:
    """Where the tuned settings of the pair that owns ``mask_path`` live (None without a mask path)."""
    if mask_path is None or not isinstance(mask_path, (str, os.PathLike)):
        return None
    return Path(mask_path).expanduser().parent / TUNED_FILENAME


def find_tuned(mask_path: str | os.PathLike | None) -> TunedSettings | None:
    """The tuned settings beside ``mask_path``, or None when there are none."""
    path = tuned_path_beside(mask_path)
    if path is None or not path.is_file():
        return None
    return TunedSettings.load(path)


def recorded_mask(mask_path: str | os.PathLike, recorded: str | None) -> Path | None:
    """The mask file a tuned file names, resolved relative to the folder of ``mask_path`` (where the
    tuned file lives); None when it names none or the file is not there.

    Artifacts name their masks relative to themselves. An absolute name (written by an older
    version) is looked up by its file name beside the tuned file, never at the absolute path
    itself: a pair folder with a copied ``tuned.json`` must use its own masks, not the masks of
    whatever folder the tuned file was made in, even when that folder exists on this machine."""
    if not recorded:
        return None
    folder = Path(mask_path).expanduser().parent
    candidate = folder / (Path(recorded).name if Path(recorded).is_absolute() else recorded)
    return candidate if candidate.is_file() else None


class TunedValueClampedWarning(UserWarning):
    """A value of ``tuned.json`` was out of its range and was read as the nearest sensible one (module docstring)."""


class TunedForAnotherMaskWarning(UserWarning):
    """``tuned.json`` sits beside the given mask but was measured with another one."""


#: How the reason starts when tuned settings are set aside for the drafter (``RunSpec.not_applied``).
OTHER_DRAFTER = "measured with another drafter"
#: The drafter of an EAGLE run, for :func:`drafter_mismatch`: its head (no drafter model, no prompt lookup).
EAGLE_HEAD = "eagle-head"
#: The drafter of a run that drafts with a drafter model, for :func:`drafter_mismatch`.
DRAFTER_MODEL = "model"


def _described(drafter: Any) -> str:
    if drafter == PROMPT_LOOKUP_DRAFTER:
        return "prompt lookup"
    architecture = drafter.get("architecture") if isinstance(drafter, dict) else getattr(drafter, "architecture", None)
    return f"a drafter model ({architecture})" if architecture else "a drafter model"


def drafter_mismatch(recorded: Any, measured_on: str, drafter: str,
                     model_problems: Callable[[], list[str]] = list) -> str | None:
    """Why settings measured with ``recorded`` (``tuned.json``'s ``drafter``) on the ``measured_on``
    framework do not belong to a run drafting with ``drafter`` ("measured with another drafter: ..."),
    or None when they do, or when the file records no drafter (an older file: not checked; module
    docstring). ``drafter``: :data:`DRAFTER_MODEL`, :data:`PROMPT_LOOKUP_DRAFTER`, :data:`EAGLE_HEAD`,
    or what else it is, in words. An EAGLE head is another drafter than the recorded one unless the
    file was measured on a framework that drafts with one (:data:`HEAD_DRAFTING_FRAMEWORKS`). ``model_problems``: for a drafter model, how it differs from the
    recorded fingerprint (asked only then). One rule for every place that checks (the adapters, the
    commands, the vLLM plugin), each saying what its run drafts with."""
    if recorded is None:
        return None
    if drafter == EAGLE_HEAD:
        if measured_on in HEAD_DRAFTING_FRAMEWORKS:
            return None
        return f"{OTHER_DRAFTER}: {_described(recorded)} on the {measured_on} framework; this run drafts with its EAGLE head"
    if recorded == PROMPT_LOOKUP_DRAFTER or drafter == PROMPT_LOOKUP_DRAFTER:
        if recorded == drafter:
            return None
        shown = _described(drafter) if drafter in (PROMPT_LOOKUP_DRAFTER, DRAFTER_MODEL) else drafter
        return f"{OTHER_DRAFTER}: {_described(recorded)}; this run drafts with {shown}"
    if drafter != DRAFTER_MODEL:
        return f"{OTHER_DRAFTER}: {_described(recorded)}; this run drafts with {drafter}"
    problems = model_problems()
    return f"{OTHER_DRAFTER}: this run's drafter model is not the one recorded ({problems[0]})" if problems else None


class TunedForAnotherDrafterWarning(UserWarning):
    """``tuned.json`` was measured with another drafter than the run's: its settings are not applied."""


#: How the reason starts when tuned settings are set aside for the device (``RunSpec.not_applied``).
OTHER_DEVICE = "measured on another device"


class TunedForAnotherDeviceWarning(UserWarning):
    """``tuned.json`` was measured on another kind of device than the run's (a CPU, run on a GPU): its
    choice is not applied (:mod:`viasd_adapt.config.hardware`)."""


class TunedOnUnknownDeviceWarning(UserWarning):
    """``tuned.json`` does not say which device it was measured on (written before files recorded it):
    its choice is applied, unchecked (:mod:`viasd_adapt.config.hardware`)."""


__all__ = ["COST_FIELDS", "DRAFTER_MODEL", "EAGLE_HEAD", "FORMAT", "HEAD_DRAFTING_FRAMEWORKS", "KNOWN_CHOICES", "MEASURED_ON_DEFAULT", "OLD_NAMES",
           "OldTunedNamesWarning", "OTHER_DEVICE", "OTHER_DRAFTER", "PROMPT_LOOKUP_DRAFTER", "TIERED_FRAMEWORKS", "TUNED_FILENAME", "DrafterRecord",
           "TunedBudget", "TunedForAnotherDeviceWarning", "TunedForAnotherDrafterWarning", "TunedOnUnknownDeviceWarning", "TunedForAnotherMaskWarning", "TunedPoint", "TunedReport",
           "TunedSettings", "TunedValueClampedWarning", "drafter_mismatch", "find_tuned", "recorded_mask", "tuned_path_beside"]
