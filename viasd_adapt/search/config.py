"""One mask search's knobs, with their defaults in one place.

``viasd search`` takes its option defaults from :data:`DEFAULTS`, and ``viasd tune``'s quick
searches start from the same object and override named fields (fewer, shorter prompts, DIMR with
the tuner's step budget), so the two cannot drift apart silently. The resolution methods
(:meth:`SearchConfig.mask_space`, :meth:`SearchConfig.strategy_settings`) turn a config into what
the search stage runs, and check its numbers first.

Importable without torch: the CLI reads :data:`DEFAULTS` for its option defaults at start-up, so
the search machinery is imported only when a config is resolved.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from viasd_adapt.errors import ConfigError
from viasd_adapt.search.calibration_prompts import CalibrationSpec

if TYPE_CHECKING:
    from viasd_adapt.search.candidates import MaskSpace
    from viasd_adapt.core.settings import TierSettings

SPACES = ("ratio", "budget")
PRICES = ("cycle", "marginal")
STRATEGIES = ("guided", "dimr")
OBJECTIVES = ("auto", "routed", "q-only", "margin")
#: DIMR's step budget when ``steps`` is 0 (the guided search sizes its own from the layer count).
DIMR_DEFAULT_STEPS = 120


@dataclass(frozen=True)
class SearchConfig:
    """What one search is asked to do (``viasd search --help`` explains each field by its flag).

    Attributes:
        ratio: ``space="ratio"``: the fraction of decoder layers skipped, exactly ``round(r * L)``.
        space: ``"ratio"`` (fixed skip count, the paper) or ``"budget"`` (any mask within a price).
        slim_cost: ``space="budget", price="marginal"``: the most a mask may cost, fraction of L.
        price: ``"cycle"`` (slim pass + escalation x resumed target) or ``"marginal"``.
        escalation_rate, cycle_cost: ``price="cycle"``: the share of cycles that call q, and the
            most one verification cycle may cost as a fraction of a full pass.
        strategy: ``"guided"`` (probes, warm starts, trust region, GP) or ``"dimr"`` (random + BO).
        steps: the most evaluations (0: the strategy's default).
        bo_every: DIMR's theta, a BoTorch proposal every theta steps (0: random only).
        patience: stop when the best mask is unchanged for this many steps (0: never).
        seed: seeds the search, the random baseline and the corpus prompts.
        objective: ``"margin"`` the log-margin of u's greedy top-1 agreement with q
            (:func:`viasd_adapt.core.cost.top1_margin_cost`), ``"routed"`` the paper's C(u||p) + C(q||u),
            ``"q-only"`` C(q||u); ``"auto"`` (the default) is margin (:meth:`objective_kind` says why).
        compare_random: also score this many seeded random masks of the space (the baseline).
        calibration: the prompts and window lengths (:class:`CalibrationSpec`).
    """

    ratio: float = 0.45
    space: str = "ratio"
    slim_cost: float = 0.3
    price: str = "cycle"
    escalation_rate: float = 0.3
    cycle_cost: float = 0.6
    strategy: str = "guided"
    steps: int = 0
    bo_every: int = 5
    patience: int = 40
    seed: int = 0
    objective: str = "auto"
    compare_random: int = 0
    calibration: CalibrationSpec = field(default_factory=CalibrationSpec)

    def __post_init__(self) -> None:
        for name, allowed in (("space", SPACES), ("price", PRICES), ("strategy", STRATEGIES), ("objective", OBJECTIVES)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"search {name} must be one of {allowed}, got {getattr(self, name)!r}")
        for name in ("steps", "bo_every", "patience", "seed", "compare_random"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"search {name} must be an integer, got {value!r}")
        for name in ("steps", "bo_every", "patience", "compare_random"):
            if getattr(self, name) < 0:
                raise ConfigError(f"search {name} must be >= 0, got {getattr(self, name)}")

    def check(self) -> "SearchConfig":
        """Checks the real-valued fields (finite, within their bounds); the resolution methods call
        it, so a bad number is refused before any model runs."""
        from viasd_adapt.checks import check_real

        check_real("ratio", self.ratio, low=0.0, high=1.0, low_open=True, high_open=True)
        check_real("slim_cost", self.slim_cost, low=0.0, high=1.0, high_open=True)
        check_real("escalation_rate", self.escalation_rate, low=0.0, high=1.0)
        check_real("cycle_cost", self.cycle_cost, low=0.0, high=2.0, low_open=True)
        return self

    def with_(self, **changes) -> "SearchConfig":
        return replace(self, **changes)

    # ------------------------------------------------------------------ resolution
    def strategy_settings(self):
        """:class:`~viasd_adapt.search.dimr.SearchSettings` (DIMR) or
        :class:`~viasd_adapt.search.guided.GuidedSettings`."""
        from viasd_adapt.search.dimr import SearchSettings

        self.check()
        if self.strategy == "dimr":
            return SearchSettings(steps=self.steps or DIMR_DEFAULT_STEPS, bo_every=self.bo_every,
                                  patience=self.patience, seed=self.seed)
        from viasd_adapt.search.guided import GuidedSettings

        return GuidedSettings(steps=self.steps, patience=self.patience, seed=self.seed)

    def mask_space(self, num_layers: int) -> "MaskSpace":
        """The masks of a target with ``num_layers`` decoder layers this config searches; a space
        with no mask at all is refused here, before any model runs."""
        from viasd_adapt.config.mask import skip_count
        from viasd_adapt.search.candidates import BudgetSpace, FixedCountSpace
        from viasd_adapt.search.dimr import check_cardinality

        self.check()
        if self.space == "budget" and self.price == "cycle":
            space = BudgetSpace(num_layers, self.cycle_cost * num_layers, escalation=self.escalation_rate)
            if space.size() == 0:
                raise ConfigError(f"no mask costs at most --cycle-cost {self.cycle_cost} of a full pass at --escalation-rate "
                                  f"{self.escalation_rate}; raise --cycle-cost")
            return space
        if self.space == "budget":
            return BudgetSpace(num_layers, int(self.slim_cost * num_layers))
        k = skip_count(num_layers, self.ratio)
        check_cardinality(num_layers, k)
        return FixedCountSpace(num_layers, k)

    def objective_kind(self, prompt_lookup: bool = False) -> str:
        """The objective masks are scored by (:data:`viasd_adapt.search.objective.OBJECTIVE_KINDS`),
        ``"auto"`` resolved: the top-1 log-margin, for every drafter.

        Why not the paper's routed cost by default: on SmolLM2-135M with its distilled drafter (41.6%
        agreement), C(u||p) pulls u towards the drafter, and the guided search's best routed masks
        agree with q on 9.7% of 1,440 held-out positions at r = 0.2, against 29-34% for the best
        random masks; the margin search's agree on 51.3%, above every seed's best random mask
        (44.5-47.6%), and at r = 0.45 on 21.7% against 7-9% (README, "Guided vs random"). The
        margin needs no drafter distribution, so prompt lookup is scored the same way.
        ``prompt_lookup`` is kept for callers; it no longer changes the answer."""
        del prompt_lookup
        return "margin" if self.objective == "auto" else self.objective

    def drafter_term(self, prompt_lookup: bool = False) -> bool:
        """Whether the objective scores the drafter's segment C(u||p) (module docstring of objective.py)."""
        return self.objective_kind(prompt_lookup) == "routed"

    def tier(self) -> "TierSettings":
        """The tier the masks are scored at (the default tolerances, this ratio)."""
        from viasd_adapt.core.settings import TierSettings

        return TierSettings(ratio=self.ratio)

    def total_steps(self, num_layers: int) -> int:
        """How many evaluations the search will make at most (the progress bar's length)."""
        settings = self.strategy_settings()
        if settings.steps:
            return settings.steps
        from viasd_adapt.search.guided import default_steps

        return default_steps(num_layers)


#: The defaults of every search (``viasd search``'s option defaults).
DEFAULTS = SearchConfig()

__all__ = ["DEFAULTS", "DIMR_DEFAULT_STEPS", "OBJECTIVES", "PRICES", "SPACES", "STRATEGIES", "SearchConfig"]
