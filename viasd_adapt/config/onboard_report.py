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
    step_seconds: float  # one target decode step, the unit calibration is priced in
    window_seconds: float  # one calibration window scored by the target, the way the search scores it
    evaluation_seconds: float = 0.0  # one mask evaluation of the search per calibration window (probe's ratio)
    evaluated_ratio: float = 0.45  # the skip ratio the evaluation was timed at
    proposal_seconds: float = 0.0  # what proposing a mask adds per search step
    draft_step_seconds: float = 0.0  # files written before the probe: one one-token drafter forward
    untiered_point_seconds: float = 0.0  # probe: one untiered setting on one tuning prompt, real drafting loop, scored
    tiered_point_seconds: float = 0.0  # probe: one setting with a slim verifier on one tuning prompt, the same way
    untiered_prompt_seconds: float = 0.0  # the untiered setting's part once per prompt (prefill, scoring)
    untiered_token_seconds: float = 0.0  # ... and per generated token
    tiered_prompt_seconds: float = 0.0  # the tiered setting's part once per prompt
    tiered_token_seconds: float = 0.0  # ... and per generated token
    greedy_prompt_seconds: float | None = None  # a calibration prompt's greedy continuation: once per prompt
    greedy_token_seconds: float | None = None  # ... and per greedy token (the target with its cache)
    probe_seconds: float = 0.0  # what the probe itself took (counted in the budget)
    calibration_prompts: int
    heldout_prompts: int
    search_steps: int
    ratios: list[float] = []  # the skip ratios the plan tries, the main one first
    extra_ratio_steps: int = 0  # masks each other ratio's search evaluates
    tune_prompts: int
    tune_points: int
    expected_minutes: float  # after the first load: the probe and the plan
    within_budget: bool = True  # expected_minutes <= minutes
    notes: list[str] = []


class RatioTried(Record):
    """One skip ratio the onboarding tried: its mask (by the published pair's path), how often that
    slim verifier agrees with the target (teacher-forced argmax on held-out windows), what its
    search took, and what its settings cost in the sweep (full-equivalent passes per token)."""

    ratio: float
    skipped_layers: int
    mask: str
    heldout_agreement: float | None = None
    masks_evaluated: int = 0
    search_seconds: float = 0.0
    stop_reason: str | None = None
    lossless_cost: float | None = None  # the lossless cascade with this mask (exact)
    best_cost: float | None = None  # the cheapest setting with this mask within the fidelity budget
    best_setting: str | None = None


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
    ratios: list[RatioTried] = []
    budget_minutes: float | None = None  # --minutes
    seconds_after_load: float | None = None  # the time the budget covers (everything after the first load)
    peak_memory_mb: float  # the process's peak resident memory (ru_maxrss), models and search included
    total_seconds: float
    #: where the pair was measured (:mod:`viasd_adapt.config.hardware`); None in reports written before it was recorded
    hardware: HardwareStamp | None = None


__all__ = ["OnboardEstimate", "OnboardReport", "REPORT_FILENAME", "RatioTried", "StageTime"]
