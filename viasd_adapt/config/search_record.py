"""The sections of a mask artifact written by a search, typed: ``search`` (how the mask was found)
and ``report`` (what was measured).

A mask artifact (``mask.json``) carries two sections written by ``viasd search`` (and by the quick
searches of ``viasd tune``): ``search``, the settings and provenance of the run, and ``report``,
its measurements. :class:`~viasd_adapt.config.mask.MaskArtifact` reads them as the records below,
so a reader writes ``artifact.search.alpha1`` and a corrupted field is refused by name when the
file is read (``mask file m.json: field 'search.alpha1': Input should be a valid number, got 'abc'``).
They live in ``config`` (below ``search``, which writes them) because every reader of a mask file
reads them.

Versioning: the ``report`` section carries its own schema version (``report.version``). Files
written before the version existed are version 1 (the layout has not changed since), and every
field added after the first shipped masks has a default, so they still load. Numbers are strict:
a string where a number belongs is an error, not a silent conversion. Every record writes back
exactly the fields it was read or built with (and any extra field a newer revision added), so a
file read and written again holds what it held.

Masks that were not searched (the early-exit masks of ``viasd tune --exits``) carry an
:class:`EarlyExitRecord` instead, and masks built by hand may carry no search at all.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import StrictBool, StrictFloat, StrictInt, StrictStr, model_validator

from viasd_adapt.config.schema import Record, SparseRecord

Int = StrictInt
Num = StrictFloat  # accepts JSON integers too (0 for 0.0), never strings
Str = StrictStr

EARLY_EXIT = "early exit"
#: The newest version of the ``report`` section this code reads and writes.
SEARCH_REPORT_VERSION = 1


class SpaceRecord(SparseRecord):
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


class CalibrationRecord(SparseRecord):
    """What the search calibrated on (:func:`viasd_adapt.search.prompt_ids.calibration_record`):
    the prompts' source and the window lengths. Files are named relative to the working folder (or
    by their name alone), never by a machine path. Empty for masks searched by ``viasd tune``
    before it recorded its calibration."""

    calib_file: Optional[Str] = None
    pairs_file: Optional[Str] = None
    source: Optional[Str] = None
    n_calibration: Optional[Int] = None
    n_heldout: Optional[Int] = None
    new_tokens: Optional[Int] = None
    max_prompt_tokens: Optional[Int] = None
    prompt_seed: Optional[Int] = None
    drafter_distribution: Optional[Str] = None


class SearchRecord(SparseRecord):
    """The ``search`` section: the strategy's settings, the tier it was scored at, the calibration,
    and where and how long it ran. The strategy's own settings (``bo_every`` for DIMR, ``probe``,
    ``warm``, ... for the guided search) are kept as extra fields
    (:meth:`viasd_adapt.search.config.SearchConfig.strategy_record` writes them)."""

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


class EarlyExitRecord(Record):
    """The ``search`` section of an early-exit mask (keep layers ``0..exit_layer-1``): not searched.
    Written whole (``kind`` too, which is what tells a reader it is one)."""

    kind: Literal["early exit"] = EARLY_EXIT
    exit_layer: Int


class MaskPriceRecord(SparseRecord):
    """:func:`~viasd_adapt.search.price.mask_price` of the best mask."""

    s1: Int
    slim_layers: Int
    resume_layers: Int
    marginal_layers: Int
    slim_fraction: Num
    resume_fraction: Num
    marginal_fraction: Num


class WindowCacheRecord(SparseRecord):
    path: Optional[Str] = None
    hits: Int = 0
    misses: Int = 0
    generate_seconds: Num = 0.0


class SearchTimes(SparseRecord):
    """Where the search's wall time went (seconds)."""

    calibration_windows_generated: Optional[Num] = None
    calibration_total: Optional[Num] = None
    window_cache: Optional[WindowCacheRecord] = None
    evaluations: Optional[Num] = None
    evaluation_mean: Optional[Num] = None
    gp_fit: Optional[Num] = None
    proposals: Optional[Num] = None
    prefix_states: Optional[StrictBool] = None


class RandomBaseline(SparseRecord):
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


class SearchMeasurements(SparseRecord):
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
    version: Int = SEARCH_REPORT_VERSION  # the report's schema version; absent (1) in older files

    @model_validator(mode="before")
    @classmethod
    def _readable_version(cls, data: Any) -> Any:
        """A report of a version this code does not read is refused for its version (what the user
        can act on), before any field that may have changed meaning."""
        version = data.get("version", 1) if isinstance(data, dict) else 1
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= SEARCH_REPORT_VERSION:
            raise ValueError(f"'report.version' {version!r} is not a search-report version this viasd-adapt reads "
                             f"(1 to {SEARCH_REPORT_VERSION}); upgrade viasd-adapt or re-run `viasd search`")
        return data


__all__ = ["CalibrationRecord", "EARLY_EXIT", "EarlyExitRecord", "MaskPriceRecord", "RandomBaseline",
           "SEARCH_REPORT_VERSION", "SearchMeasurements", "SearchRecord", "SearchTimes",
           "SpaceRecord", "WindowCacheRecord"]
