"""One mask search's configuration: the one type users, ``viasd search`` and ``viasd tune`` set.

:class:`SearchConfig` says everything a search is asked to do: the masks it searches (``ratio``,
``space``, ``price``, ...), the strategy and its budget, the objective, the random baseline, and
three typed parts: :class:`CalibrationConfig` (the prompts and window lengths),
:class:`GuidedConfig` (the guided search's ingredients and internals) and :class:`BOConfig` (the
BoTorch proposal's internals). The parts are plain values; the whole config, parts included, is
checked once, when it is made (:func:`_check`), so a bad number is refused before any model
loads and nothing downstream checks again.

``viasd search`` takes its option defaults from :data:`DEFAULTS`, and ``viasd tune``'s quick
searches start from the same object and override named fields (fewer, shorter prompts, DIMR with
the tuner's step budget), so the two cannot drift apart silently. What the search stages need is
derived from the config here (:meth:`SearchConfig.mask_space`, :meth:`SearchConfig.steps_for`,
:meth:`SearchConfig.objective_kind`, :meth:`SearchConfig.tier`), never stored twice.

Importable without torch: the CLI reads :data:`DEFAULTS` for its option defaults at start-up, so
the search machinery is imported only when a config is resolved.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from viasd_adapt.errors import ConfigError
from viasd_adapt.prompts.chat import CHAT_CHOICES
from viasd_adapt.core.settings import check_real

if TYPE_CHECKING:
    from viasd_adapt.core.settings import TierSettings
    from viasd_adapt.search.candidates import MaskSpace

SPACES = ("ratio", "budget")
PRICES = ("cycle", "marginal")
STRATEGIES = ("guided", "dimr")
OBJECTIVES = ("auto", "routed", "q-only", "margin")
#: ``continuation`` values: the target's greedy output, or the pairs' reference targets (seq2seq).
CONTINUATIONS = ("target-model", "reference")
#: DIMR's step budget when ``steps`` is 0 (the guided search sizes its own from the layer count).
DIMR_DEFAULT_STEPS = 120
#: DIMR draws at random until this many masks are evaluated, whatever ``bo_every`` says.
DIMR_MIN_OBSERVATIONS = 2
#: The random baseline draws with the search's seed plus this offset (a stream of its own).
RANDOM_SEED_OFFSET = 7919
#: The target's greedy tokens per calibration window, and the most tokens of a prompt kept.
DEFAULT_NEW_TOKENS = 48
DEFAULT_PROMPT_TOKENS = 64


def default_steps(num_layers: int) -> int:
    """The guided search's evaluations for a layer count: the L probes, then 1.5 L + 15 searched
    masks (55 evaluations in all at L = 16, 90 at L = 30). Measured on the shipped pairs and
    SmolLM2-135M (docs/results.md, "Mask search")."""
    return num_layers + int(1.5 * num_layers) + 15


@dataclass(frozen=True)
class CalibrationConfig:
    """Where a search's calibration and held-out prompts come from and how long the windows are.

    Attributes:
        calib_file: a prompts file (its last ``n_heldout`` prompts are held out), or
            ``"spec-bench[:tasks]"`` for Spec-Bench's calibration split; None: Spec-Bench for a
            chat target (``spec_bench_for_chat``), else held-out stdlib snippets.
        n_calibration: stdlib snippets or Spec-Bench questions calibrated on (a file gives all of
            its prompts but the held-out ones).
        n_heldout: prompts held out for the agreement report (0: none).
        new_tokens: the target's greedy tokens per calibration prompt.
        max_prompt_tokens: prompts are cut to this many tokens (context; not scored).
        pairs_file: source -> target pairs, the prompts of an encoder-decoder target (the last
            ``n_heldout`` pairs are held out).
        continuation: what follows an encoder-decoder window's prompt (:data:`CONTINUATIONS`).
        chat: text prompts through the chat template: ``auto`` when the tokenizer has one,
            ``on`` always (an error without one), ``off`` never (:mod:`viasd_adapt.prompts.chat`).
        spec_bench_for_chat: a chat target without ``calib_file`` calibrates on Spec-Bench
            questions (``viasd search``); off, on the stdlib snippets (the quick searches of
            ``viasd tune``).
    """

    calib_file: Path | str | None = None
    n_calibration: int = 16
    n_heldout: int = 16
    new_tokens: int = DEFAULT_NEW_TOKENS
    max_prompt_tokens: int = DEFAULT_PROMPT_TOKENS
    pairs_file: Path | None = None
    continuation: str = "target-model"
    chat: str = "auto"
    spec_bench_for_chat: bool = True


@dataclass(frozen=True)
class GuidedConfig:
    """The guided search's ingredients and internals (:mod:`viasd_adapt.search.guided`).

    Attributes:
        probe, warm, local, gp: the ingredients (per-layer probes, structured warm starts, swap
            trust region, GP ranking); each can be switched off alone.
        warm_starts: most structured masks evaluated before the local phase.
        fail_tolerance: non-improving proposals before the trust region widens by one move.
        max_radius: widest region; past it the region restarts around the next-best centre.
        kappa: lower-confidence-bound weight on the GP's standard deviation.
        pool_walks: random multi-move walks sampled when the radius is above 1.
        global_pool: random masks scored per proposal when ``local`` is off.
        fit_maxiter: L-BFGS iterations of each GP fit.
        min_gp_points: evaluated masks of the space before a GP is fitted.
        refit_every: the GP's hyperparameters are fitted on every this many proposals; between fits
            the GP is rebuilt on all data with the last fitted kernel (exact, no optimisation), which
            cut the search's overhead by about 3x with no measured loss (1 = fit every proposal).
    """

    probe: bool = True
    warm: bool = True
    local: bool = True
    gp: bool = True
    warm_starts: int = 4
    fail_tolerance: int = 4
    max_radius: int = 3
    kappa: float = 1.0
    pool_walks: int = 160
    global_pool: int = 384
    fit_maxiter: int = 100
    min_gp_points: int = 4
    refit_every: int = 3

    def label(self) -> str:
        """The ingredients switched on, ``"probe+warm+local+gp"`` (``"random"`` for none)."""
        parts = [name for name in ("probe", "warm", "local", "gp") if getattr(self, name)]
        return "+".join(parts) or "random"


@dataclass(frozen=True)
class BOConfig:
    """The internals of one BoTorch proposal of DIMR (:mod:`viasd_adapt.search.bo`); the defaults
    were sized for L <= 32 on a shared CPU."""

    fit_maxiter: int = 100
    pool_random: int = 256
    top_by_mean: int = 4
    two_swaps_per_top: int = 48
    hill_starts: int = 3
    hill_rounds: int = 4
    mc_samples: int = 64
    chunk: int = 512


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
        steps: the most evaluations (0: the strategy's default, :meth:`steps_for`).
        bo_every: DIMR's theta, a BoTorch proposal every theta steps (0: random only).
        patience: stop when the best mask is unchanged for this many steps (0: never).
        seed: seeds the search, the random baseline and the stdlib snippets.
        objective: ``"margin"`` the log-margin of u's greedy top-1 agreement with q
            (:func:`viasd_adapt.core.cost.top1_margin_cost`), ``"routed"`` the paper's C(u||p) + C(q||u),
            ``"q-only"`` C(q||u); ``"auto"`` (the default) is margin (:meth:`objective_kind` says why).
        compare_random: also score this many seeded random masks of the space (the baseline).
        calibration: the prompts and window lengths (:class:`CalibrationConfig`).
        guided: the guided search's ingredients and internals (:class:`GuidedConfig`).
        bo: DIMR's BoTorch proposal internals (:class:`BOConfig`).
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
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    guided: GuidedConfig = field(default_factory=GuidedConfig)
    bo: BOConfig = field(default_factory=BOConfig)

    def __post_init__(self) -> None:
        _check(self)

    def with_(self, **changes: Any) -> "SearchConfig":
        """The same config with ``changes`` (checked again)."""
        return replace(self, **changes)

    # ------------------------------------------------------------------ derived values
    def steps_for(self, num_layers: int, strategy: str | None = None) -> int:
        """The most evaluations ``strategy`` (default: this config's) makes on a target of
        ``num_layers`` decoder layers: ``steps``, or the strategy's default
        (:data:`DIMR_DEFAULT_STEPS`, :func:`default_steps`)."""
        if self.steps:
            return self.steps
        return DIMR_DEFAULT_STEPS if (strategy or self.strategy) == "dimr" else default_steps(num_layers)

    def total_steps(self, num_layers: int) -> int:
        """How many evaluations the search will make at most (the progress bar's length)."""
        return self.steps_for(num_layers)

    def mask_space(self, num_layers: int) -> "MaskSpace":
        """The masks of a target with ``num_layers`` decoder layers this config searches; a space
        with no mask at all is refused here, before any model runs."""
        from viasd_adapt.config.mask import skip_count
        from viasd_adapt.search.candidates import BudgetSpace, FixedCountSpace, check_cardinality

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

    def objective_kind(self) -> str:
        """The objective masks are scored by (:data:`viasd_adapt.search.objective.OBJECTIVE_KINDS`),
        ``"auto"`` resolved: the top-1 log-margin, for every drafter.

        Why not the paper's routed cost by default: on SmolLM2-135M with its distilled drafter (41.6%
        agreement), C(u||p) pulls u towards the drafter, and the guided search's best routed masks
        agree with q on 9.7% of 1,440 held-out positions at r = 0.2, against 29-34% for the best
        random masks; the margin search's agree on 51.3%, above every seed's best random mask
        (44.5-47.6%), and at r = 0.45 on 21.7% against 7-9% (docs/results.md, "The guided search's ingredients"). The
        margin needs no drafter distribution, so a prompt-lookup drafter is scored the same way."""
        return "margin" if self.objective == "auto" else self.objective

    @property
    def drafter_term(self) -> bool:
        """Whether the objective scores the drafter's segment C(u||p) (module docstring of objective.py)."""
        return self.objective_kind() == "routed"

    @property
    def random_seed(self) -> int:
        """The seed of the random baseline's masks."""
        return self.seed + RANDOM_SEED_OFFSET

    def tier(self) -> "TierSettings":
        """The tier the masks are scored at (the default tolerances, this ratio)."""
        from viasd_adapt.core.settings import TierSettings

        return TierSettings(ratio=self.ratio)

    def strategy_record(self) -> dict[str, Any]:
        """The strategy's settings as the mask artifact's ``search`` section records them: DIMR's
        schedule, or the guided search's budget and ingredients (``steps`` 0: sized from L)."""
        if self.strategy == "dimr":
            return {"steps": self.steps or DIMR_DEFAULT_STEPS, "bo_every": self.bo_every, "patience": self.patience,
                    "seed": self.seed, "min_observations": DIMR_MIN_OBSERVATIONS}
        g = self.guided
        return {"steps": self.steps, "seed": self.seed, "probe": g.probe, "warm": g.warm, "local": g.local, "gp": g.gp,
                "warm_starts": g.warm_starts, "fail_tolerance": g.fail_tolerance, "max_radius": g.max_radius,
                "kappa": g.kappa, "pool_walks": g.pool_walks, "global_pool": g.global_pool, "patience": self.patience,
                "fit_maxiter": g.fit_maxiter, "min_gp_points": g.min_gp_points, "refit_every": g.refit_every}


# ---------------------------------------------------------------------------- the one check


def _check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"search {name} must be one of {allowed}, got {value!r}")


def _check_integer(name: str, value: Any, low: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"search {name} must be an integer, got {value!r}")
    if low is not None and value < low:
        raise ConfigError(f"search {name} must be >= {low}, got {value}")


def _check_flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"search {name} must be True or False, got {value!r}")


def _check(config: SearchConfig) -> None:
    """Every field of ``config`` and of its parts, each refused by name: the one check of a search."""
    for name, allowed in (("space", SPACES), ("price", PRICES), ("strategy", STRATEGIES), ("objective", OBJECTIVES)):
        _check_choice(name, getattr(config, name), allowed)
    _check_integer("seed", config.seed)
    for name in ("steps", "bo_every", "patience", "compare_random"):
        _check_integer(name, getattr(config, name), low=0)
    if isinstance(config.ratio, bool) or not isinstance(config.ratio, (int, float)) or not 0.0 < config.ratio < 1.0:
        raise ConfigError(f"search ratio (the fraction of decoder layers skipped) must be in (0, 1), "
                          f"got {config.ratio!r}")
    check_real("slim_cost", config.slim_cost, 0.0, 1.0, high_open=True)
    check_real("escalation_rate", config.escalation_rate, 0.0, 1.0)
    check_real("cycle_cost", config.cycle_cost, 0.0, 2.0, low_open=True)

    calibration = config.calibration
    if not isinstance(calibration, CalibrationConfig):
        raise ConfigError(f"search calibration must be a CalibrationConfig, got {type(calibration).__name__}")
    for name, low in (("n_calibration", 1), ("n_heldout", 0), ("new_tokens", 1), ("max_prompt_tokens", 1)):
        _check_integer(f"calibration {name}", getattr(calibration, name), low=low)
    _check_choice("calibration continuation", calibration.continuation, CONTINUATIONS)
    _check_choice("calibration chat", calibration.chat, CHAT_CHOICES)
    _check_flag("calibration spec_bench_for_chat", calibration.spec_bench_for_chat)

    guided = config.guided
    if not isinstance(guided, GuidedConfig):
        raise ConfigError(f"search guided must be a GuidedConfig, got {type(guided).__name__}")
    for name in ("probe", "warm", "local", "gp"):
        _check_flag(f"guided {name}", getattr(guided, name))
    for name in ("warm_starts", "pool_walks", "global_pool", "fit_maxiter", "min_gp_points", "refit_every"):
        _check_integer(f"guided {name}", getattr(guided, name), low=0)
    for name in ("fail_tolerance", "max_radius"):
        _check_integer(f"guided {name}", getattr(guided, name), low=1)
    check_real("guided kappa", guided.kappa, 0.0, math.inf, high_open=True)

    bo = config.bo
    if not isinstance(bo, BOConfig):
        raise ConfigError(f"search bo must be a BOConfig, got {type(bo).__name__}")
    for part in fields(BOConfig):
        at_least_one = part.name in ("fit_maxiter", "mc_samples", "chunk")
        _check_integer(f"bo {part.name}", getattr(bo, part.name), low=1 if at_least_one else 0)


#: The defaults of every search (``viasd search``'s option defaults).
DEFAULTS = SearchConfig()

__all__ = ["BOConfig", "CalibrationConfig", "GuidedConfig", "SearchConfig"]
