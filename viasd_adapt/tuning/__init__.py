"""``viasd tune``: the fastest setting that meets a fidelity budget, and the artifact that records it."""

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
