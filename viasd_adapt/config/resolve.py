"""The one resolver: which tier settings a run uses, and where each value came from.

Five layers stack, later ones winning, each only where it says something:

1. **defaults**: :class:`~viasd_adapt.core.settings.TierSettings`'s (the paper's);
2. **tuned.json** beside the mask: ``viasd tune``'s choice, when it was measured with this very
   mask (else it is skipped, with a :class:`~viasd_adapt.config.tuned.TunedForAnotherMaskWarning`);
3. **the tuner's best points** (the bench's rows only): the lenient rows run the best lenient
   point, and the tiered rows the best VIA-SD point when the choice was not VIA-SD, so a bench
   never pits the winner against untuned rivals;
4. **the preset** (``--preset conservative``);
5. **flags** (``--mode``, ``--alpha1``, ...; a framework with no tier, such as ``--framework ar``, forces mode none).

A flag that the run's mode does not read (``--mode lenient --no-adaptive``: lenient has no slim tier
to choose; ``--lenience`` with lossy) would change nothing: :meth:`RunSpec.refuse_unread_flags`
refuses it by the name typed, whichever layer chose the mode (``viasd generate``; the bench runs
several modes, each reading what it reads). :func:`mode_reads` says which modes read which setting (each mode's row in the table of modes).

:func:`resolve_settings` is the only function that stacks them; ``viasd generate``, ``viasd
bench``, ``viasd demo`` and the adapters' ``settings=None`` all call it, and it reads each
``tuned.json`` and mask once. It returns a :class:`RunSpec`, whose :meth:`RunSpec.explain` is what
``viasd generate --explain`` prints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping


from viasd_adapt.errors import ConfigError
from viasd_adapt.config.mask import MaskArtifact
from viasd_adapt.config.provenance import DEFAULT_SOURCE, Source, SourceKind
from viasd_adapt.core.notices import Notice, emit
from viasd_adapt.core.modes import SETTING_ROLES, modes_reading
from viasd_adapt.core.settings import CONSERVATIVE, Mode, TierSettings, fixed_label
from viasd_adapt.config.tuned import OTHER_DEVICE, OTHER_DRAFTER, TunedForAnotherMaskWarning, TunedSettings, recorded_mask, tuned_path_beside

#: Source of a value nobody set.
DEFAULT = DEFAULT_SOURCE
#: Presets of ``--preset`` (besides "default", which changes nothing).
PRESETS: dict[str, dict[str, Any]] = {"conservative": dict(CONSERVATIVE)}
#: The fields the bench's tiered rows take from the tuner's best VIA-SD point.
TIERED_POINT_FIELDS = ("alpha1", "alpha2", "greedy_gates", "escalation_rule", "ratio")
SETTING_FIELDS = tuple(f.name for f in fields(TierSettings))
#: The tuner's family whose best point the bench's tiered rows run: VIA-SD lossy with the tier on
#: every cycle (the adaptive twin shares its settings).
BEST_TIER_POINT = fixed_label(Mode.LOSSY)


def mode_reads() -> dict[str, tuple[tuple[Mode, ...], str]]:
    """The settings only some modes read (:data:`~viasd_adapt.core.modes.SETTING_ROLES`: the others,
    every mode), each with the modes that read it (their rows' ``reads`` in the table of modes) and
    what it is for. adaptive: the controller chooses between the slim tier and untiered verification,
    so only the modes with a tier it may skip (audit measures lossy with the tier on every cycle);
    alpha1, alpha2: the gates of the three tiers; lenience: the lenient rule's tolerance."""
    return {name: (modes_reading(name), role) for name, role in SETTING_ROLES.items()}


@dataclass
class RunSpec:
    """What a run uses, resolved once: the settings, where each came from, the mask, the tuned file."""

    settings: TierSettings
    #: every TierSettings field -> where its value came from (a :class:`~viasd_adapt.config.provenance.Source`:
    #: its kind, and its words, "default", "tuned.json <path> ...", "preset conservative", "flag --alpha1", ...)
    sources: dict[str, Source]
    mask_path: Path | None = None
    mask_source: str = ""
    tuned: TunedSettings | None = None
    tuned_path: Path | None = None
    framework: str | None = None
    #: sentences for people (the bench echoes them), e.g. which VIA-SD point the tiered rows run
    notes: list[str] = field(default_factory=list)
    #: whether tuned.json's choice was applied (False when it was measured with another mask or drafter)
    tuned_applied: bool = False
    #: the mask files read while resolving (path -> artifact, not yet checked against a model):
    #: handed to :func:`viasd_adapt.models.pair.load_pair` so that a run reads each mask once
    masks: dict[Path, MaskArtifact] = field(default_factory=dict)
    #: why tuned.json's choice was not applied ("measured with another mask" / "... drafter"), "" when it was
    not_applied: str = ""
    #: what the run knows of the drafter the tuned settings were measured with (``--explain``), "" when unchecked
    drafter_note: str = ""
    #: what the user should be told about this resolution (tuned settings measured with another
    #: mask), given as warnings by the caller that read the files (:func:`resolve_settings`)
    notices: tuple[Notice, ...] = ()
    #: what the run knows of the device the tuned settings were measured on (``--explain``), "" until
    #: checked against the run's target (:func:`viasd_adapt.engine.context.spec_for_device`)
    device_note: str = ""

    def without_tuned(self, reason: str) -> "RunSpec":
        """The same resolution without the tuned file's layers (its choice and its best points): every
        setting they set goes back to the default (no later layer had set it), the mask stays.
        ``reason`` is what ``--explain`` says instead of "applied"."""
        from dataclasses import replace

        tuned = {name for name, source in self.sources.items() if source.kind is SourceKind.TUNED}
        defaults = TierSettings()
        settings = self.settings.with_(**{name: getattr(defaults, name) for name in tuned}) if tuned else self.settings
        sources = {name: (DEFAULT if name in tuned else source) for name, source in self.sources.items()}
        notes = [note for note in self.notes if not note.startswith("tiered rows: the tuner's best VIA-SD point")]
        return replace(self, settings=settings, sources=sources, notes=notes, tuned_applied=False, not_applied=reason)

    @property
    def runs_target_alone(self) -> bool:
        """Whether the tuned file was applied and its choice is the target alone (``ar``): what
        ``viasd generate --pair`` and ``viasd demo`` then run, unless the user asks to draft."""
        return self.tuned is not None and self.tuned_applied and self.tuned.runs_target_alone

    @property
    def evidence(self) -> TunedSettings | None:
        """The tuned file as evidence of what this run's passes cost (the adaptive tier's prices and
        priors): None without one, or when it was set aside as measured with another drafter or on
        another kind of device (its prices are another machine's)."""
        return None if self.not_applied.startswith((OTHER_DRAFTER, OTHER_DEVICE)) else self.tuned

    @property
    def measured_on(self) -> str | None:
        """The framework whose loop the tuned settings were measured on (None without a tuned file)."""
        return self.tuned.measured_on if self.tuned is not None else None

    def refuse_unread_flags(self) -> None:
        """Refuses a flag that sets a setting the run's mode does not read (:func:`mode_reads`), and a
        preset none of whose settings it reads, by the option typed: it would change nothing, yet
        ``--explain`` would list it as applied. Raises :class:`ConfigError`."""
        mode = self.settings.mode
        came_from = self.sources.get("mode", DEFAULT)
        came_from = "the default" if came_from.kind is SourceKind.DEFAULT else came_from
        values = self.settings.values()
        reads = mode_reads()
        unread = {name for name, (modes, _) in reads.items() if mode not in modes}
        for name in SETTING_FIELDS:
            if name not in unread or self.sources.get(name, DEFAULT).kind is not SourceKind.FLAG:
                continue
            modes, what = reads[name]
            typed = (f"--{name}" if values[name] else f"--no-{name}") if isinstance(values[name], bool) \
                else f"--{name} {values[name]}"
            raise ConfigError(f"{typed}: mode {mode.value} (from {came_from}) does not read {name} ({what}; read by "
                              f"{' and '.join(m.value for m in modes)}); leave the option out, or choose one of "
                              "those modes with --mode")
        for preset in sorted({source for source in self.sources.values() if source.kind is SourceKind.PRESET}, key=str):
            names = {name for name, source in self.sources.items() if source == preset}
            if names <= unread:
                raise ConfigError(f"--{preset}: mode {mode.value} (from {came_from}) reads none of what it sets "
                                  f"({', '.join(sorted(names))}); leave the option out, or choose a mode that reads "
                                  "them with --mode")

    def explain(self) -> list[str]:
        """The resolution as a table: each setting, its value and its source, then the mask and
        what the tuned settings rest on (``viasd generate --explain``)."""
        lines = ["settings (layers, later wins: default < tuned.json < tuner's best point < preset < flag):"]
        width = max(len(name) for name in SETTING_FIELDS)
        values = self.settings.values()
        for name in SETTING_FIELDS:
            lines.append(f"  {name:<{width}}  {str(values[name]):<10}  {self.sources.get(name, DEFAULT)}")
        if self.mask_path is not None:
            lines.append(f"mask: {self.mask_path} ({self.mask_source})")
        else:
            lines.append("mask: none given" + (f" ({self.mask_source})" if self.mask_source else ""))
        if self.tuned is not None:
            state = "applied" if self.tuned_applied else f"not applied: {self.not_applied or 'measured with another mask'}"
            lines.append(f"tuned settings: {self.tuned_path} (choice {self.tuned.choice}, {state}), "
                         f"measured on the {self.measured_on} framework")
            if self.drafter_note:
                lines.append(f"tuned settings' drafter: {self.drafter_note}")
            if self.device_note:
                lines.append(f"tuned settings' device: {self.device_note}")
            if self.tuned_applied and self.framework is not None and self.framework != self.measured_on:
                lines.append(f"note: --framework {self.framework} runs settings measured on the {self.measured_on} "
                             f"framework's loop (viasd tune measures only {self.measured_on}); the same settings "
                             f"may cost and score differently on {self.framework}")
        else:
            lines.append("tuned settings: none beside the mask")
        lines.extend(f"note: {note}" for note in self.notes)
        return lines


class _MaskBits:
    """Each mask file read at most once per resolution; what was read travels on in the
    :class:`RunSpec` (``masks``), so loading the pair does not read it again."""

    def __init__(self, read: Mapping[Path, MaskArtifact] | None = None) -> None:
        self.read: dict[Path, MaskArtifact] = dict(read or {})

    def __call__(self, path: str | os.PathLike) -> list[int]:
        key = Path(path).expanduser()
        if key not in self.read:
            self.read[key] = MaskArtifact.load(key)
        return self.read[key].mask.bits()


def _load_tuned(mask_path: str | os.PathLike | None) -> tuple[TunedSettings | None, Path | None]:
    """The tuned file beside ``mask_path`` (read once), and its path. A mask path that names no file
    has no tuned settings: the missing mask is reported where it is loaded, by its own name."""
    path = tuned_path_beside(mask_path)
    if path is None or not path.is_file() or not Path(mask_path).expanduser().is_file():
        return None, path
    return TunedSettings.load(path), path


#: ``resolve_settings(tuned=...)`` default: the tuned file has not been read yet (None means "there is none").
UNREAD: Any = object()


def resolve_settings(mask: str | os.PathLike | None = None, **options: Any) -> RunSpec:
    """Resolves a run's settings through the layers of the module docstring, reading each file once
    (:func:`read_settings`, whose arguments it takes), and gives the resolution's notices as warnings."""
    spec = read_settings(mask, **options)
    emit(spec.notices)
    return spec


def read_settings(
    mask: str | os.PathLike | None = None,
    *,
    pair_mask: str | os.PathLike | None = None,
    framework: str | None = None,
    has_tier: bool = True,
    best_points: bool = False,
    preset: str = "default",
    flags: Mapping[str, Any] | None = None,
    tuned: Any = UNREAD,
    read_masks: Mapping[Path, MaskArtifact] | None = None,
) -> RunSpec:
    """Resolves a run's settings through the layers of the module docstring, reading each file once;
    what the user should hear is in ``RunSpec.notices``, for the caller to give
    (:func:`resolve_settings`, :func:`viasd_adapt.engine.context.open_context`).

    Args:
        mask: the mask the user named (``--mask``); when None, ``pair_mask``'s folder decides:
            the mask the tuned choice was measured with, else (``best_points``) the mask of the
            best VIA-SD point, else ``pair_mask`` itself.
        pair_mask: the pair's own ``mask.json`` (``--pair``), used when ``mask`` is None.
        framework: the framework that will run, compared with the one the tuned settings were measured on.
        has_tier: False for a framework with no verify step (``Framework.has_tier``): forces mode none.
        best_points: the bench's rows: apply the tuner's best lenient and VIA-SD points (layer 3).
        preset: ``"default"`` or a name of :data:`PRESETS`.
        flags: TierSettings fields given on the command line, by name (None: not given: ``{"mode": None}``).
        tuned: the tuned file beside the mask, already loaded (or None: there is none); read
            here when not given. read_masks: mask files already read (path -> artifact).
    """
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    unknown = sorted(set(flags) - set(SETTING_FIELDS))
    if unknown:
        raise ConfigError(f"unknown tier setting(s) {', '.join(unknown)}; known: {', '.join(SETTING_FIELDS)}")
    if preset != "default" and preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; choose default or one of: {', '.join(PRESETS)}")
    mask_bits = _MaskBits(read_masks)
    mask_path, mask_source, tuned, tuned_path = _mask_and_tuned(mask, pair_mask, tuned, best_points)
    settings = TierSettings()
    sources = {name: DEFAULT for name in SETTING_FIELDS}
    notes: list[str] = []
    applied = False
    not_applied = ""
    notices: list[Notice] = []

    def apply(values: Mapping[str, Any], source: Source) -> None:
        nonlocal settings
        if values:
            settings = settings.with_(**values)
            sources.update({name: source for name in values})

    if tuned is not None:
        if _measured_with(tuned, mask_path, mask_bits):
            # only what the file states: a setting it leaves out is the default's, and says so
            apply(tuned.stated_settings, Source.tuned(tuned_path, f"choice {tuned.choice}"))
            applied = True
        else:
            not_applied = "measured with another mask"
            # Settings tuned for one mask are not a choice for another; say so rather than run the
            # defaults silently (the usual cause: the tuner picked a mask saved beside mask.json).
            measured_with = tuned.report.mask_file or "another mask"
            notices.append(Notice(TunedForAnotherMaskWarning, (
                f"{tuned_path} was measured with {measured_with}, not {mask_path.name}; running TierSettings() defaults. "
                f"Pass mask=viasd_adapt.config.resolve.tuned_mask_path({mask_path.name!r}) to run the tuned choice.")))

    if best_points and tuned is not None:
        for values, source in _best_points(tuned, tuned_path, mask_path, flags, mask_bits, notes):
            apply(values, source)

    if preset != "default":
        apply(PRESETS[preset], Source.preset(preset))

    if not has_tier:
        if "mode" in flags and Mode.parse(flags["mode"]) is not Mode.NONE:
            raise ConfigError(f"--framework {framework} has no tier (use --mode none)")
        flags.pop("mode", None)
        apply({"mode": Mode.NONE}, Source.rule(f"--framework {framework} (no tier)"))
    for name, value in flags.items():
        apply({name: value}, Source.flag(name))
    return RunSpec(settings, sources, mask_path, mask_source, tuned, tuned_path if tuned is not None else None, framework,
                   notes, applied, dict(mask_bits.read), not_applied, notices=tuple(notices))


def _mask_and_tuned(mask: str | os.PathLike | None, pair_mask: str | os.PathLike | None, tuned: Any,
                    best_points: bool) -> tuple[Path | None, str, TunedSettings | None, Path | None]:
    """The mask a run uses and why, and the tuned file beside it and its path (each read once;
    ``tuned``: already read, or :data:`UNREAD`)."""
    loaded_path: Path | None = None
    if tuned is not UNREAD:
        loaded_path = tuned_path_beside(mask if mask is not None else pair_mask)
    mask_path = Path(mask).expanduser() if isinstance(mask, (str, os.PathLike)) else None
    mask_source = "given (--mask)" if mask_path is not None else ""
    if mask is None and pair_mask is not None:
        if tuned is UNREAD:
            tuned, loaded_path = _load_tuned(pair_mask)
        mask_path, mask_source = _pair_mask(Path(pair_mask), tuned, loaded_path, best_points)
    tuned_path = tuned_path_beside(mask_path)
    if tuned is UNREAD or tuned_path != loaded_path:
        tuned, tuned_path = _load_tuned(mask_path)
    return mask_path, mask_source, tuned, tuned_path


def _best_points(tuned: TunedSettings, tuned_path: Path | None, mask_path: Path | None, flags: Mapping[str, Any],
                 mask_bits: _MaskBits, notes: list[str]) -> list[tuple[dict[str, Any], Source]]:
    """The layer of the tuner's best points (the bench's rows), as ``(values, source)`` to apply;
    what it says for people goes to ``notes``."""
    layers = []
    lenient = tuned.best("lenient")
    if lenient is not None and "lenience" not in flags:  # the lenient rows run the tuner's best lenient point
        layers.append(({"lenience": lenient.settings.lenience}, Source.tuned(tuned_path, "best lenient point")))
    point = tuned.best(BEST_TIER_POINT) if tuned.choice not in (BEST_TIER_POINT, Mode.LOSSY.value) else None
    point_mask = recorded_mask(mask_path, point.mask) if point is not None else None
    if (point is not None and "alpha1" not in flags and "alpha2" not in flags and point_mask is not None
            and mask_path is not None and mask_path.is_file() and mask_bits(point_mask) == mask_bits(mask_path)):
        # The verdict was not VIA-SD, yet its rows must still run the tuner's best VIA-SD point, not
        # defaults: a bench that pits the winner against untuned rivals proves nothing.
        tier = point.settings
        layers.append(({name: getattr(tier, name) for name in TIERED_POINT_FIELDS},
                       Source.tuned(tuned_path, "best VIA-SD point")))
        notes.append(f"tiered rows: the tuner's best VIA-SD point alpha1={tier.alpha1} alpha2={tier.alpha2} "
                     f"gates={tier.greedy_gates} (measured with {point_mask.name})")
    return layers


def _pair_mask(pair_mask: Path, tuned: TunedSettings | None, tuned_path: Path | None,
               best_points: bool) -> tuple[Path, str]:
    """The mask a ``--pair`` run uses when none is named, and why."""
    if tuned is not None and tuned.settings.mode.uses_slim:
        chosen = recorded_mask(pair_mask, tuned.report.mask_file)
        if chosen is not None:
            return chosen, f"the mask {tuned_path} was measured with"
        return pair_mask, f"the pair's mask, which {tuned_path} was measured with"
    if best_points and tuned is not None:
        point = tuned.best(BEST_TIER_POINT)
        chosen = recorded_mask(pair_mask, point.mask) if point is not None else None
        if chosen is not None:
            return chosen, f"the mask of the best VIA-SD point in {tuned_path}"
    return pair_mask, "the pair's mask"


def _measured_with(tuned: TunedSettings, mask_path: Path | None, mask_bits: _MaskBits) -> bool:
    """Whether the tuned choice applies to ``mask_path``: it needs no mask, or records no mask,
    or was measured with one that skips the same layers."""
    if not tuned.settings.mode.uses_slim or tuned.mask_bits is None:
        return True
    return mask_path is not None and mask_bits(mask_path) == list(tuned.mask_bits)


def tuned_mask_path(mask_path: str | os.PathLike | None) -> Path | None:
    """The mask the tuned choice beside ``mask_path`` was measured with: the tuner may have picked a
    mask it searched for another skip ratio (saved beside ``mask.json``). None when there is no
    tuned choice or it needs no mask."""
    tuned, path = _load_tuned(mask_path)
    if tuned is None or not tuned.settings.mode.uses_slim:
        return None
    return _pair_mask(Path(mask_path), tuned, path, best_points=False)[0]


__all__ = ["DEFAULT", "PRESETS", "UNREAD", "RunSpec", "read_settings", "resolve_settings", "tuned_mask_path"]
