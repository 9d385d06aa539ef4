"""The tuned-settings artifact: what ``viasd tune`` chose for a pair, beside its ``mask.json``.

``tuned.json`` holds the chosen :class:`~viasd_adapt.settings.TierSettings` (the mode among them:
lossy VIA-SD, the lenient baseline, or plain lossless SD when nothing beats it at the budget),
the fidelity budget it was chosen under, what was measured for it, and the target's
fingerprint, so it is refused for another model like a mask is. ``viasd generate``, ``viasd
bench`` and the adapters' ``settings=None`` pick it up by default.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from viasd_adapt.errors import ConfigError, ModelMismatchError
from viasd_adapt.io import read_text, write_json
from viasd_adapt.routing.mask import model_mismatches
from viasd_adapt.settings import TierSettings

TUNED_FILENAME = "tuned.json"
FORMAT = "viasd-adapt/tuned-settings"
VERSION = 1


@dataclass
class TunedSettings:
    """A tuner's choice and the evidence for it."""

    settings: TierSettings
    choice: str  # "viasd", "lenient" or "sd" (plain lossless SD)
    mask_bits: list[int] | None = None
    fingerprint: dict[str, Any] = field(default_factory=dict)
    budget: dict[str, Any] = field(default_factory=dict)
    measured: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "choice": self.choice,
            "settings": self.settings.to_dict(),
            "mask_bits": self.mask_bits,
            "fingerprint": self.fingerprint,
            "budget": self.budget,
            "measured": self.measured,
            "report": self.report,
        }

    def save(self, path: str | os.PathLike) -> Path:
        return write_json(path, self.to_json(), what="tuned settings")

    @classmethod
    def from_json(cls, data: Any, source: str = "tuned settings") -> "TunedSettings":
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("settings"), dict):
            raise ConfigError(f"{source} is not a viasd-adapt tuned-settings file (missing 'format' or 'settings')")
        settings = settings_from(data["settings"], source)
        return cls(settings, str(data.get("choice", "")), data.get("mask_bits"), data.get("fingerprint", {}),
                   data.get("budget", {}), data.get("measured", {}), data.get("report", {}))

    @classmethod
    def load(cls, path: str | os.PathLike, model: nn.Module | None = None) -> "TunedSettings":
        """Reads a tuned-settings file; with ``model``, refuses it unless it was tuned on that model."""
        text = read_text(path, "tuned-settings file")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(f"tuned-settings file {path} is not valid JSON: {err}") from None
        tuned = cls.from_json(data, source=str(path))
        if model is not None:
            tuned.check_model(model, source=str(path))
        return tuned

    def check_model(self, model: nn.Module, source: str = "tuned settings") -> None:
        problems = model_mismatches(self.fingerprint, model)
        if problems:
            raise ModelMismatchError(f"{source} belongs to another model: " + "; ".join(problems)
                                     + "; run viasd tune for this target, or remove that file")


def settings_from(values: Any, source: str) -> TierSettings:
    """The :class:`TierSettings` a tuned file records, with any error naming the file: the user
    passed no such option, so "lenience must be in [0, 1)" alone would blame the wrong thing."""
    if not isinstance(values, dict):
        raise ConfigError(f"{source}: its settings are not a JSON object")
    try:
        return TierSettings(**values)
    except TypeError as err:
        raise ConfigError(f"{source} has settings this version does not know: {err}") from None
    except ConfigError as err:
        raise ConfigError(f"{source} records a bad setting: {err} (fix the file or run viasd tune again)") from None


def check_tuned_beside(mask_path: str | os.PathLike | None, model: nn.Module) -> "TunedSettings | None":
    """The tuned settings beside ``mask_path``, refused (naming the file) unless they were tuned on
    ``model``; None when there are none. Every command and adapter that applies a tuned file by
    default calls this, so a copied or stale ``tuned.json`` is never applied to another model."""
    tuned = find_tuned(mask_path)
    if tuned is not None:
        tuned.check_model(model, source=f"tuned settings {tuned_path_beside(mask_path)}")
    return tuned


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


def default_settings(mask_path: str | os.PathLike | None) -> TierSettings:
    """The settings a command uses when the user gives none: the tuned choice beside the mask,
    else :class:`TierSettings` defaults."""
    tuned = find_tuned(mask_path)
    return tuned.settings if tuned is not None else TierSettings()


def tuned_mask_path(mask_path: str | os.PathLike | None) -> Path | None:
    """The mask the tuned choice was measured with: the tuner may have picked a mask it searched
    for another skip ratio (saved beside ``mask.json``). None when there is no tuned choice or it
    needs no mask."""
    tuned = find_tuned(mask_path)
    if tuned is None or not tuned.settings.mode.uses_slim:
        return None
    return _recorded_mask(mask_path, tuned.report.get("mask_file")) or Path(mask_path)


def _recorded_mask(mask_path: str | os.PathLike, recorded: str | None) -> Path | None:
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


def best_point(tuned: TunedSettings, family: str) -> dict[str, Any] | None:
    """The tuner's cheapest measured point of ``family`` ("viasd", "lenient", "lossless", "sd")
    within the budget, whatever the overall choice was: a bench compares every family at its best,
    not the winner against defaults."""
    point = (tuned.report.get("best_within_budget") or {}).get(family)
    return point if isinstance(point, dict) and isinstance(point.get("settings"), dict) else None


def tiered_point(mask_path: str | os.PathLike | None, tuned: TunedSettings | None = None) -> tuple[TierSettings, Path | None] | None:
    """The tuner's best lossy VIA-SD point beside ``mask_path`` (or in ``tuned``, already loaded
    from there) and the mask it was measured with (None when there is no tuned file or no VIA-SD
    point met the budget)."""
    tuned = tuned if tuned is not None else find_tuned(mask_path)
    point = best_point(tuned, "viasd") if tuned is not None else None
    if point is None:
        return None
    settings = settings_from(point["settings"], f"{tuned_path_beside(mask_path)} (its best VIA-SD point)")
    return settings, _recorded_mask(mask_path, point.get("mask"))


def settings_for_mask(mask, model: nn.Module | None = None) -> TierSettings:
    """Adapters' ``settings=None``: the tuned settings beside a mask *path* when they were measured
    with that very mask, else :class:`TierSettings` defaults. With ``model``, a tuned file made for
    another model is refused (:func:`check_tuned_beside`)."""
    if not isinstance(mask, (str, os.PathLike)):
        tuned = None
    else:
        tuned = check_tuned_beside(mask, model) if model is not None else find_tuned(mask)
    if tuned is None:
        return TierSettings()
    if tuned.settings.mode.uses_slim and tuned.mask_bits is not None:
        from viasd_adapt.routing.mask import MaskArtifact

        if MaskArtifact.load(mask).mask.bits() != list(tuned.mask_bits):
            # Settings tuned for one mask are not a choice for another; say so rather than run the
            # defaults silently (the usual cause: the tuner picked a mask saved beside mask.json).
            warnings.warn(f"{tuned_path_beside(mask)} was measured with {tuned.report.get('mask_file') or 'another mask'}, "
                          f"not {Path(mask).name}; running TierSettings() defaults. Pass "
                          f"mask=viasd_adapt.tuning.tuned_mask_path({Path(mask).name!r}) to run the tuned choice.",
                          TunedForAnotherMaskWarning, stacklevel=3)
            return TierSettings()
    return tuned.settings


class TunedForAnotherMaskWarning(UserWarning):
    """``tuned.json`` sits beside the given mask but was measured with another one."""


__all__ = ["TUNED_FILENAME", "TunedSettings", "adapter_settings", "best_point", "check_tuned_beside", "default_settings",
           "find_tuned", "settings_for_mask", "settings_from",
           "tiered_point", "tuned_mask_path",
           "tuned_path_beside", "TunedForAnotherMaskWarning"]


def adapter_settings(settings: TierSettings | None, mask, model: nn.Module | None = None) -> TierSettings:
    """What every adapter's ``tiered(..., settings=None)`` runs with: the given settings (checked),
    else the tuned choice measured with this mask (refused when tuned on a model other than
    ``model``), else defaults; with a
    :class:`~viasd_adapt.advice.NegativeDeltaWarning` when a lossy tier is opened on a mask whose
    recorded Delta(u) < 0."""
    from viasd_adapt.advice import warn_if_negative_delta
    from viasd_adapt.checks import check_settings

    chosen = check_settings(settings if settings is not None else settings_for_mask(mask, model))
    warn_if_negative_delta(mask, chosen)
    return chosen
