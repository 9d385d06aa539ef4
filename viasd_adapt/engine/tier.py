"""Opening a tier: the settings an adapter runs with, checked against its model.

Every adapter's ``tiered(..., settings=None)`` runs the tuned choice measured with its mask
(:func:`viasd_adapt.config.resolve.resolve_settings`), refused when it was tuned on another model.
"""

from __future__ import annotations

import os

from torch import nn

from viasd_adapt.config.advice import warn_if_negative_delta
from viasd_adapt.config.resolve import RunSpec, resolve_settings
from viasd_adapt.core.settings import TierSettings, check_settings
from viasd_adapt.routing.mask import check_tuned_model


def check_spec_model(spec: RunSpec, model: nn.Module) -> None:
    """Refuses a run whose tuned file was made for another model (naming the file), as a mask is refused."""
    if spec.tuned is not None:
        check_tuned_model(spec.tuned, model, source=f"tuned settings {spec.tuned_path}")


def settings_for_mask(mask, model: nn.Module | None = None) -> TierSettings:
    """Adapters' ``settings=None``: the tuned settings beside a mask *path* when they were measured
    with that very mask, else :class:`TierSettings` defaults (:func:`resolve_settings`).
    With ``model``, a tuned file made for another model is refused."""
    if not isinstance(mask, (str, os.PathLike)):
        return TierSettings()
    spec = resolve_settings(mask, warn_stacklevel=4)
    if model is not None:
        check_spec_model(spec, model)
    return spec.settings


def adapter_settings(settings: TierSettings | None, mask, model: nn.Module | None = None) -> TierSettings:
    """What every adapter's ``tiered(..., settings=None)`` runs with: the given settings (checked),
    else the tuned choice measured with this mask (refused when tuned on a model other than
    ``model``), else defaults; with a
    :class:`~viasd_adapt.config.advice.NegativeDeltaWarning` when a lossy tier is opened on a mask whose
    recorded Delta(u) < 0."""
    chosen = check_settings(settings if settings is not None else settings_for_mask(mask, model))
    warn_if_negative_delta(mask, chosen)
    return chosen


__all__ = ["adapter_settings", "check_spec_model", "settings_for_mask"]
