"""A hand-written tuned.json beside a pair's mask (lenient chosen, with best lenient and VIA-SD
points), so the resolver's layers can each be seen; the ``tuned_pair`` fixture (tests/conftest.py)
is a char pair with it."""

from __future__ import annotations

from viasd_adapt.config.hardware import HardwareStamp
from viasd_adapt.config.mask import MaskArtifact
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.config.tuned import TunedSettings

#: Where the hand-written files say they were measured: this suite's device kind (a file without a
#: stamp would give its one "unknown device" notice on every run).
CPU_STAMP = HardwareStamp(device="cpu")
LENIENT = TierSettings(mode="lenient", lenience=0.4)
BEST_LENIENT = TierSettings(mode="lenient", lenience=0.2)
BEST_VIASD = TierSettings(mode="lossy", alpha1=0.1, alpha2=0.05, greedy_gates="top", ratio=0.5)


def write_tuned(pair, measured_on: str | None = None) -> TunedSettings:
    fingerprint = MaskArtifact.load(pair / "mask.json").fingerprint
    report = {"best_within_budget": {"lenient": {"settings": BEST_LENIENT.to_dict(), "ll_drop": 0.01},
                                     "viasd": {"settings": BEST_VIASD.to_dict(), "mask": "mask.json", "ll_drop": 0.015},
                                     "sd": None, "lossless": None},
              "mask_file": None}
    extra = {} if measured_on is None else {"measured_on": measured_on}
    tuned = TunedSettings(LENIENT, "lenient", None, fingerprint, report=report, hardware=CPU_STAMP, **extra)
    tuned.save(pair / "tuned.json")
    return tuned
