"""``report.json`` of a pair made by ``viasd models add``: what each stage took, the estimate it
started from, the verdict and its uncertainty, and how much memory the run peaked at.

Written beside ``pair.json`` (which names it), so that the numbers a user was shown when the pair
was made travel with the pair; typed and versioned like every artifact (:mod:`viasd_adapt.config.schema`).
"""

from __future__ import annotations

from typing import ClassVar

from viasd_adapt.config.hardware import HardwareStamp
from viasd_adapt.config.schema import Artifact, Record

REPORT_FILENAME = "report.json"


class StageTime(Record):
    """One stage of the onboarding and its wall time; ``resumed``: read back from an interrupted run."""

    stage: str
    seconds: float
    resumed: bool = False


class OnboardEstimate(Record):
    """What the onboarding measured before it started, and the sizes it chose to fit the budget."""

    minutes: float
    step_seconds: float  # one target decode step (KV cache), the unit everything is priced in
    window_seconds: float  # one target forward over a calibration window
    draft_step_seconds: float = 0.0  # one one-token forward of a drafter model (none with prompt lookup)
    calibration_prompts: int
    heldout_prompts: int
    search_steps: int
    tune_prompts: int
    tune_points: int
    expected_minutes: float
    notes: list[str] = []


class OnboardReport(Artifact):
    """The report of one ``viasd models add``."""

    FORMAT: ClassVar[str] = "viasd-adapt/onboard-report"
    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "onboarding report"

    name: str
    target: str
    drafter: str
    threads: int
    dtype: str
    estimate: OnboardEstimate
    stages: list[StageTime]
    verdict: list[str]
    peak_memory_mb: float  # the process's peak resident memory (ru_maxrss), models and search included
    total_seconds: float
    #: where the pair was measured (:mod:`viasd_adapt.config.hardware`); None in reports written before it was recorded
    hardware: HardwareStamp | None = None


__all__ = ["OnboardEstimate", "OnboardReport", "REPORT_FILENAME", "StageTime"]
