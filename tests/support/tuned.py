"""A hand-written tuned.json beside a pair's mask (lenient chosen, with best lenient and VIA-SD
points), so the resolver's layers can each be seen; the ``tuned_pair`` fixture (tests/conftest.py)
is a char pair with it.

And a shipped pair's tuned.json with its choice pinned (:func:`shipped_tuned_as`): what ``viasd
tune`` writes as the choice changes with each re-tune, so a test of what a given choice does (the
vLLM plugin serving a lenience, an adapter running a drafter-checked choice) pins that choice to the
pair's own measured point of that family, with the file's fingerprint, drafter and prices intact."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from viasd_adapt.config.hardware import HardwareStamp
from viasd_adapt.config.mask import MaskArtifact
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.config.tuned import TunedSettings
from viasd_adapt.models.registry import shipped_dir

#: Where the hand-written files say they were measured: this suite's device kind (a file without a
#: stamp would give its one "unknown device" notice on every run).
CPU_STAMP = HardwareStamp(device="cpu")
LENIENT = TierSettings(mode="lenient", lenience=0.4)
BEST_LENIENT = TierSettings(mode="lenient", lenience=0.2)
BEST_VIASD = TierSettings(mode="lossy", alpha1=0.1, alpha2=0.05, greedy_gates="top", ratio=0.5)


def write_tuned(pair, measured_on: str | None = None) -> TunedSettings:
    fingerprint = MaskArtifact.load(pair / "mask.json").fingerprint
    report = {"best_within_budget": {"lenient": {"settings": BEST_LENIENT.to_dict(), "ll_drop": 0.01},
                                     "lossy-fixed": {"settings": BEST_VIASD.to_dict(), "mask": "mask.json", "ll_drop": 0.015},
                                     "none": None, "lossless-fixed": None},
              "mask_file": None}
    extra = {} if measured_on is None else {"measured_on": measured_on}
    tuned = TunedSettings(LENIENT, "lenient", None, fingerprint, report=report, hardware=CPU_STAMP, **extra)
    tuned.save(pair / "tuned.json")
    return tuned


#: The families whose points run without a slim verifier (their files record no mask bits).
_MASKLESS = ("none", "lenient")


def shipped_tuned(pair: str) -> TunedSettings:
    """The tuned.json shipped with ``pair``, as every command reads it."""
    return TunedSettings.load(shipped_dir() / pair / "tuned.json")


def shipped_tuned_as(pair: str, family: str = "lenient") -> dict:
    """The JSON of ``pair``'s shipped tuned.json with its choice pinned to the file's own best point
    of ``family`` within the budget (its settings and measured figures): whatever the tune chose,
    the file then chooses what the test is about, as a tune would have written it."""
    data = json.loads((shipped_dir() / pair / "tuned.json").read_text())
    point = (data.get("report") or {}).get("best_within_budget", {}).get(family)
    assert point, f"the shipped {pair} tuned.json has no {family} point within its budget to pin"
    data["choice"], data["settings"], data["measured"] = family, dict(point["settings"]), point
    if family in _MASKLESS:
        data["mask_bits"] = None
    return data


def write_shipped_tuned_as(pair: str, folder: Path, family: str = "lenient", with_mask: bool = False) -> Path:
    """:func:`shipped_tuned_as` written to ``folder / "tuned.json"`` (returned); with ``with_mask``,
    beside a copy of the pair's shipped mask.json, so that a run given ``folder / "mask.json"``
    reads the pinned choice as it reads the shipped one."""
    folder.mkdir(parents=True, exist_ok=True)
    if with_mask:
        shutil.copy(shipped_dir() / pair / "mask.json", folder / "mask.json")
    path = folder / "tuned.json"
    path.write_text(json.dumps(shipped_tuned_as(pair, family), indent=2))
    return path
