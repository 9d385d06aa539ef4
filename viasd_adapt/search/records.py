"""The search report, typed: how a mask was searched (``search``) and what was measured (``report``).

A mask artifact (``mask.json``) carries two sections written by ``viasd search`` (and by the quick
searches of ``viasd tune``): ``search``, the settings and provenance of the run, and ``report``,
its measurements. Both were plain dicts read back by string keys; here they are pydantic models,
so a reader writes ``report.search.alpha1`` and a corrupted field is refused by name
(``mask file m.json: field 'search.alpha1': Input should be a valid number, got 'abc'``).

Versioning: :class:`SearchReport` is an :class:`~viasd_adapt.config.schema.Artifact` (format
``viasd-adapt/search-report``); inside a mask file its version is stored as ``report.version``.
Files written before the version existed are version 1 (the layout has not changed since), and
every field added after the first shipped masks has a default, so they still load. Numbers are
strict: a string where a number belongs is an error, not a silent conversion.

Masks that were not searched (the early-exit masks of ``viasd tune --exits``) carry an
:class:`EarlyExitRecord` instead, and :meth:`SearchReport.of_artifact` returns None for them.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Optional

from pydantic import StrictBool, StrictFloat, StrictInt, StrictStr

from viasd_adapt.errors import ConfigError
from viasd_adapt.config.schema import Artifact, Record

Int = StrictInt
Num = StrictFloat  # accepts JSON integers too (0 for 0.0), never strings
Str = StrictStr

EARLY_EXIT = "early exit"


class SpaceRecord(Record):
    """The mask space searched (``MaskSpace.describe()``): a fixed skip count or a layer budget."""

    space: Literal["ratio", "budget"]
    num_layers: Int
    skipped: Optional[Int] = None
    ratio: Optional[Num] = None
    price: Optional[Literal["marginal", "cycle"]] = None
    max_marginal_layers: Optional[Int] = None
    slim_cost: Optional[Num] = None
    escalation_rate: Optional[Num] = None
    max_cycle_layers: Optional[Num] = None
    cycle_cost: Optional[Num] = None
    price_formula: Optional[Str] = None


class CalibrationRecord(Record):
    """What the search calibrated on (``CalibrationSpec.to_dict()`` plus what the prompts really
    were). Empty for masks searched by ``viasd tune`` before it recorded its calibration."""

    calib_file: Optional[Str] = None
    source: Optional[Str] = None
    n_calibration: Optional[Int] = None
    n_heldout: Optional[Int] = None
    new_tokens: Optional[Int] = None
    max_prompt_tokens: Optional[Int] = None
    prompt_seed: Optional[Int] = None
    drafter_distribution: Optional[Str] = None


class SearchRecord(Record):
    """The ``search`` section: the strategy's settings, the tier it was scored at, the calibration,
    and where and how long it ran. The strategy's own settings (``bo_every`` for DIMR, ``probe``,
    ``warm``, ... for the guided search) are kept as extra fields; :meth:`strategy_settings`
    rebuilds them."""

    steps: Int
    seed: Int
    patience: Int
    ratio: Num
    space: Optional[SpaceRecord] = None
    alpha1: Num
    alpha2: Num
    beta: Num
    objective: Str
    delta_reading: Optional[Str] = None
    strategy: Str
    bo: dict[str, Any] = {}
    calibration: CalibrationRecord = CalibrationRecord()
    wall_seconds: Optional[Num] = None
    torch_threads: Optional[Int] = None
    target: Optional[Str] = None
    draft: Optional[Str] = None
    total_wall_seconds: Optional[Num] = None

    @property
    def guided(self) -> bool:
        return self.strategy.startswith("guided")

    def strategy_settings(self):
        """The :class:`~viasd_adapt.search.dimr.SearchSettings` or
        :class:`~viasd_adapt.search.guided.GuidedSettings` the search ran with (to rerun it)."""
        from dataclasses import fields

        from viasd_adapt.search.dimr import SearchSettings
        from viasd_adapt.search.guided import GuidedSettings

        kind = GuidedSettings if self.guided else SearchSettings
        data = self.model_dump()
        return kind(**{f.name: data[f.name] for f in fields(kind) if f.name in data})


class EarlyExitRecord(Record):
    """The ``search`` section of an early-exit mask (keep layers ``0..exit_layer-1``): not searched."""

    kind: Literal["early exit"] = EARLY_EXIT
    exit_layer: Int


class MaskPriceRecord(Record):
    """:func:`~viasd_adapt.search.price.mask_price` of the best mask."""

    s1: Int
    slim_layers: Int
    resume_layers: Int
    marginal_layers: Int
    slim_fraction: Num
    resume_fraction: Num
    marginal_fraction: Num


class WindowCacheRecord(Record):
    path: Optional[Str] = None
    hits: Int = 0
    misses: Int = 0
    generate_seconds: Num = 0.0


class SearchTimes(Record):
    """Where the search's wall time went (seconds)."""

    calibration_windows_generated: Optional[Num] = None
    calibration_total: Optional[Num] = None
    window_cache: Optional[WindowCacheRecord] = None
    evaluations: Optional[Num] = None
    evaluation_mean: Optional[Num] = None
    gp_fit: Optional[Num] = None
    proposals: Optional[Num] = None
    prefix_states: Optional[StrictBool] = None


class RandomBaseline(Record):
    """Seeded random masks of the same space, scored on the same calibration (``--compare-random``)."""

    count: Int
    seed: Int
    skipped_layers: list[list[Int]]
    costs: list[Optional[Num]]
    median_cost: Optional[Num] = None
    dimr_cost_ratio_to_median: Optional[Num] = None
    calib_agreement: list[Optional[Num]] = []
    deltas: list[Optional[Num]] = []
    heldout_agreement: Optional[list[Optional[Num]]] = None
    median_heldout_agreement: Optional[Num] = None


class SearchMeasurements(Record):
    """The ``report`` section: what the search measured about its best mask, and the trace."""

    tau: Int
    calibration_windows: Int
    num_layers: Int
    skipped_count: Int
    space: Optional[SpaceRecord] = None
    price: Optional[MaskPriceRecord] = None
    cost_per_token: Optional[Num] = None
    direct_cost_alpha2: Optional[Num] = None
    calib_agreement: Optional[Num] = None
    evaluations: Int
    bo_evaluations: Int = 0
    stop_reason: Str
    bo_failures: list[Str] = []
    calibration_seconds: Num
    search_seconds: Num
    bo_seconds: Num = 0.0
    escalation_estimate: Optional[Num] = None
    cycle_price: Optional[Num] = None
    time: Optional[SearchTimes] = None
    probe_evaluations: Int = 0
    layer_sensitivity: Optional[list[Optional[Num]]] = None
    history: list[tuple[Int, Str, Num]] = []
    costs_exact: Optional[Str] = None
    heldout_tau: Optional[Int] = None
    heldout_agreement: Optional[Num] = None
    drafter_heldout_agreement: Optional[Num] = None
    random_compare: Optional[RandomBaseline] = None


class SearchReport(Artifact):
    """One search's report: its ``search`` and ``report`` sections, typed and versioned."""

    FORMAT: ClassVar[str] = "viasd-adapt/search-report"
    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "search report"

    search: SearchRecord
    report: SearchMeasurements

    # ------------------------------------------------------------------ the mask file's sections
    def sections(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(search, report)`` as a mask artifact stores them: exactly the fields that were set
        (an old file read back is written back unchanged), the report carrying the version."""
        search = self.search.model_dump(mode="json", exclude_unset=True)
        report = self.report.model_dump(mode="json", exclude_unset=True)
        return search, {**report, "version": self.VERSION}

    @classmethod
    def from_sections(cls, search: Any, report: Any, source: str = "mask artifact") -> "SearchReport":
        """The typed report of a mask artifact's two sections; errors name ``source`` and the field
        (``field 'search.alpha1'``, ``field 'report.tau'``)."""
        if not isinstance(report, dict):
            raise ConfigError(f"{source}: field 'report' must be an object, got {type(report).__name__}")
        measurements = {k: v for k, v in report.items() if k != "version"}
        data = {"format": cls.FORMAT, "version": report.get("version", 1), "search": search, "report": measurements}
        version = data["version"]
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= cls.VERSION:
            raise ConfigError(f"{source}: field 'report.version' {version!r} is not a search-report version this "
                              f"viasd-adapt reads (1 to {cls.VERSION}); upgrade viasd-adapt or re-run `viasd search`")
        return cls.from_json(data, source)

    @classmethod
    def of_artifact(cls, artifact, source: str = "mask artifact") -> "SearchReport | None":
        """The typed report of a :class:`~viasd_adapt.config.mask.MaskArtifact`, or None for a mask
        that was not searched (an early exit, or an artifact built by hand with no search section)."""
        if not searched(artifact.search):
            return None
        return cls.from_sections(artifact.search, artifact.report, source)


def searched(search: Any) -> bool:
    """Whether a mask artifact's ``search`` section records a search (not an early exit or nothing)."""
    return isinstance(search, dict) and bool(search) and search.get("kind") != EARLY_EXIT


__all__ = ["CalibrationRecord", "EARLY_EXIT", "EarlyExitRecord", "MaskPriceRecord", "RandomBaseline", "SearchMeasurements",
           "SearchRecord", "SearchReport", "SearchTimes", "SpaceRecord", "WindowCacheRecord", "searched"]
