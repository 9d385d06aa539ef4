"""``viasd tune``: the fastest setting that meets a fidelity budget, and the artifact that records it.

The artifact is :class:`viasd_adapt.tuned.TunedSettings`; settings are resolved from it by
:func:`viasd_adapt.resolve.resolve_settings`. Both are re-exported here, where they always were.
"""

from viasd_adapt.tuning.artifact import (
    TunedForAnotherMaskWarning,
    TunedSettings,
    adapter_settings,
    default_settings,
    find_tuned,
    tiered_point,
    tuned_mask_path,
)

__all__ = ["TunedForAnotherMaskWarning", "TunedSettings", "adapter_settings", "default_settings", "find_tuned", "tiered_point", "tuned_mask_path"]
