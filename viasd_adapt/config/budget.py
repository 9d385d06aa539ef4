"""The fidelity budget and the recommendation rule: what "within budget" and "recommended" mean.

One rule each, for every verdict: ``viasd tune``'s choice, the bench's verdict, and the bootstrap
that states their uncertainty (:mod:`viasd_adapt.bench.uncertainty`). Kept apart from
:mod:`viasd_adapt.bench.verdict` (which words the verdicts) so that the bootstrap, which advice calls,
does not import advice back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Collection, Sequence, TypeVar

from viasd_adapt.core.settings import check_real
from viasd_adapt.errors import ConfigError

DEFAULT_MAX_LL_DROP = 0.02  # nats per token: the default fidelity budget of tune and the verdict
DEFAULT_MAX_REGRET = 0.02  # nats per token: bounds what the LL drop alone can miss (see tuning.tune.Budget)
# A tier setting must be this much cheaper (full-equivalent passes) than the best simpler setting
# (untiered SD or lenient) to be recommended: forward timings on a shared machine move by a few
# percent between runs, and the simpler setting needs no slim verifier, no mask and no tuning.
TIE_MARGIN = 0.03

#: modes that run the slim tier, and the simpler ones a tier setting has to beat
TIER_MODES = ("lossless", "lossy")
SIMPLE_MODES = ("none", "lenient")


@dataclass(frozen=True)
class Budget:
    """The fidelity budget: a setting qualifies when it stays within every bound that is set.

    The one budget rule: ``viasd tune`` judges its points with it and the bench's
    :func:`verdict` its rows, so the two can never disagree on what "within budget" means.

    The default bounds both the log-likelihood drop and the regret. The drop alone can be gamed: a
    setting that slides into high-likelihood repetition writes text the target finds *likelier*
    than its own greedy output (a negative drop) while overruling many tokens; on the shipped demo
    pair the cheapest such lossy setting had a drop of -0.016 with a regret of 0.135 nats/token and
    an overrule rate of 0.18. The regret is local to each token and never negative, so it cannot be.
    """

    max_ll_drop: float | None = DEFAULT_MAX_LL_DROP
    max_overrule: float | None = None
    max_regret: float | None = DEFAULT_MAX_REGRET

    def __post_init__(self) -> None:
        if self.max_ll_drop is not None:
            check_real("max_ll_drop", self.max_ll_drop, low=0.0)
        if self.max_overrule is not None:
            check_real("max_overrule", self.max_overrule, low=0.0, high=1.0)
        if self.max_regret is not None:
            check_real("max_regret", self.max_regret, low=0.0)
        if self.max_ll_drop is None and self.max_overrule is None and self.max_regret is None:
            raise ConfigError("a fidelity budget needs at least one bound (max_ll_drop, max_overrule or max_regret)")

    def admits_values(self, *, exact: bool, ll_drop: float | None, overrule: float | None, regret: float | None,
                      unmeasured_ok: Collection[str] = ()) -> bool:
        """Whether a setting with these measurements is within the budget. An exact setting always
        is. A bound that is set fails on a value that was not measured, unless its name ("ll_drop",
        "overrule", "regret") is in ``unmeasured_ok``."""
        if exact:
            return True
        bounds = (("ll_drop", self.max_ll_drop, ll_drop), ("overrule", self.max_overrule, overrule),
                  ("regret", self.max_regret, regret))
        return all(limit is None or (value <= limit if value is not None else name in unmeasured_ok)
                   for name, limit, value in bounds)

    def admits(self, point: Any) -> bool:
        """Whether ``point`` (anything with ``exact``, ``ll_drop``, ``overrule`` and ``regret``) qualifies."""
        return self.admits_values(exact=point.exact, ll_drop=point.ll_drop, overrule=point.overrule, regret=point.regret)


def tier_beats(tier_cost: float, simple_cost: float | None, margin: float = TIE_MARGIN) -> bool:
    """Whether a tier setting costing ``tier_cost`` beats the best simpler setting by more than
    ``margin`` (a fraction of the simpler cost); True when there is no simpler setting to beat."""
    return simple_cost is None or tier_cost < (1.0 - margin) * simple_cost


T = TypeVar("T")


def recommend(candidates: Sequence[T], cost: Callable[[T], float], is_simple: Callable[[T], bool],
              margin: float = TIE_MARGIN, tie_break: Callable[[T], Any] = lambda c: 0) -> tuple[T, T]:
    """``(cheapest, recommended)`` among settings already within the fidelity budget.

    The recommendation is the cheapest one unless that needs the slim tier and beats the cheapest
    simpler setting by no more than ``margin``; then it is that simpler setting. One rule for the
    bench's verdict (rows) and ``viasd tune``'s choice (points)."""
    cheapest = min(candidates, key=lambda c: (cost(c), tie_break(c)))
    simple = [c for c in candidates if is_simple(c)]
    if is_simple(cheapest) or not simple:
        return cheapest, cheapest
    best_simple = min(simple, key=lambda c: (cost(c), tie_break(c)))
    return cheapest, (cheapest if tier_beats(cost(cheapest), cost(best_simple), margin) else best_simple)


__all__ = ["Budget", "DEFAULT_MAX_LL_DROP", "DEFAULT_MAX_REGRET", "SIMPLE_MODES", "TIER_MODES", "TIE_MARGIN", "recommend",
           "tier_beats"]
