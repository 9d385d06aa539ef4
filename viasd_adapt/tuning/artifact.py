"""The tuned-settings artifact as :mod:`viasd_adapt.tuning` has always exported it.

The artifact itself (:class:`~viasd_adapt.tuned.TunedSettings`, a typed, versioned pydantic
model) lives in :mod:`viasd_adapt.tuned`, and settings are resolved from it in one place,
:func:`viasd_adapt.resolve.resolve_settings`. Both sit below :mod:`viasd_adapt.tuning` and
:mod:`viasd_adapt.bench`, so neither package imports the other. The functions here are the
long-standing entry points, each a thin call to the resolver.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torch import nn

from viasd_adapt.resolve import resolve_settings, tuned_mask_path
from viasd_adapt.settings import TierSettings
from viasd_adapt.tuned import (FORMAT, TUNED_FILENAME, VERSION, TunedForAnotherMaskWarning, TunedSettings, find_tuned,
                               recorded_mask, tuned_path_beside)
from viasd_adapt.schema import Record, TierSettingsField, validate


class _SettingsOnly(Record):
    settings: TierSettingsField


def settings_from(values: Any, source: str) -> TierSettings:
    """The :class:`TierSettings` a tuned file records, with any error naming the file and the field."""
    return validate(_SettingsOnly, {"settings": values}, source).settings


def check_tuned_beside(mask_path: str | os.PathLike | None, model: nn.Module) -> TunedSettings | None:
    """The tuned settings beside ``mask_path``, refused (naming the file) unless they were tuned on
    ``model``; None when there are none."""
    tuned = find_tuned(mask_path)
    if tuned is not None:
        tuned.check_model(model, source=f"tuned settings {tuned_path_beside(mask_path)}")
    return tuned


def default_settings(mask_path: str | os.PathLike | None) -> TierSettings:
    """The settings a command uses when the user gives none: the tuned choice beside the mask,
    else :class:`TierSettings` defaults."""
    tuned = find_tuned(mask_path)
    return tuned.settings if tuned is not None else TierSettings()


def best_point(tuned: TunedSettings, family: str) -> dict[str, Any] | None:
    """The tuner's cheapest measured point of ``family`` within the budget, as JSON (see
    :meth:`TunedSettings.best` for the typed point)."""
    point = tuned.best(family)
    return point.model_dump(mode="json") if point is not None else None


def tiered_point(mask_path: str | os.PathLike | None, tuned: TunedSettings | None = None) -> tuple[TierSettings, Path | None] | None:
    """The tuner's best lossy VIA-SD point beside ``mask_path`` (or in ``tuned``, already loaded
    from there) and the mask it was measured with (None when there is no tuned file or no VIA-SD
    point met the budget)."""
    tuned = tuned if tuned is not None else find_tuned(mask_path)
    point = tuned.best("viasd") if tuned is not None else None
    if point is None:
        return None
    return point.settings, recorded_mask(mask_path, point.mask)


def settings_for_mask(mask, model: nn.Module | None = None) -> TierSettings:
    """Adapters' ``settings=None``: the tuned settings beside a mask *path* when they were measured
    with that very mask, else :class:`TierSettings` defaults (:func:`viasd_adapt.resolve.resolve_settings`).
    With ``model``, a tuned file made for another model is refused."""
    if not isinstance(mask, (str, os.PathLike)):
        return TierSettings()
    return resolve_settings(mask, model=model, warn_stacklevel=4).settings


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


_recorded_mask = recorded_mask  # the name it had here

__all__ = ["FORMAT", "TUNED_FILENAME", "VERSION", "TunedForAnotherMaskWarning", "TunedSettings", "adapter_settings",
           "best_point", "check_tuned_beside", "default_settings", "find_tuned", "settings_for_mask", "settings_from",
           "tiered_point", "tuned_mask_path", "tuned_path_beside"]
