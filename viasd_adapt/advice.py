"""What the product tells users about whether the slim tier pays: the Delta rule and the verdict.

The paper drops the slim verifier when ``Delta(u) = C(q||p) - [C(u||p) + C(q||u)] < 0``: the routed
path p -> u -> q is then costlier, under its own cost, than letting q check p directly. And every
speed claim is weighed against the simple baselines at the same fidelity (VIA-SD.md section 8).
These helpers turn both into plain sentences for ``viasd search``, ``viasd bench``, ``viasd tune``
and the adapters' ``tiered()`` (which warns with :class:`NegativeDeltaWarning`).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Collection, Sequence, TypeVar

from viasd_adapt.checks import check_real
from viasd_adapt.errors import ConfigError
from viasd_adapt.settings import TierSettings

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


class NegativeDeltaWarning(UserWarning):
    """The routing mask's Delta(u) < 0: by the paper's rule this slim verifier should be dropped."""


def delta_message(delta: float | None, search: dict[str, Any] | None = None) -> str | None:
    """A sentence explaining a negative Delta, or None when Delta is unknown or >= 0."""
    if delta is None or delta >= 0:
        return None
    search = search or {}
    at = ""
    if "alpha1" in search and "alpha2" in search:
        at = f" at alpha1/alpha2 = {search['alpha1']}/{search['alpha2']}"
    return (
        f"Delta(u) = {delta:.1f} < 0{at}: the routed path p -> u -> q costs more than q checking p directly "
        "(VIA-SD drops the slim verifier here). Expect lossy VIA-SD to lose to the lenient baseline at equal fidelity; "
        "run `viasd tune` to measure which wins on this pair, or use mode lenient or none."
    )


def warn_if_negative_delta(mask: Any, settings: TierSettings) -> str | None:
    """Warns (once per call) when a lossy/audit tier is opened with a mask artifact whose Delta < 0."""
    from viasd_adapt.routing.mask import MaskArtifact

    if settings.mode.value not in ("lossy", "audit"):
        return None
    artifact = mask
    if isinstance(mask, (str, os.PathLike)):
        try:
            artifact = MaskArtifact.load(mask)
        except Exception:  # the mask itself is checked (with a clear error) where it is used
            return None
    if not isinstance(artifact, MaskArtifact):
        return None
    message = delta_message(artifact.delta, artifact.search)
    if message:
        warnings.warn(f"viasd-adapt: {message}", NegativeDeltaWarning, stacklevel=3)
    return message


def _mode_label(row: dict) -> str:
    return "ar" if row["framework"] == "ar" else row["mode"]


def _row_within(row: dict, budget: Budget) -> bool:
    """A bench row under the budget: ``ar``, ``none`` and ``lossless`` are exact; a row with no
    regret column (an older results file) is judged on what it has."""
    exact = row["framework"] == "ar" or row["mode"] in ("none", "lossless")
    return budget.admits_values(exact=exact, ll_drop=row.get("ll_drop"), overrule=row.get("overrule_rate"),
                                regret=row.get("regret"), unmeasured_ok=("regret",))


def verdict(rows: list[dict], max_ll_drop: float = DEFAULT_MAX_LL_DROP, max_regret: float = DEFAULT_MAX_REGRET,
            max_overrule: float | None = None, budget: Budget | None = None) -> list[str]:
    """Per framework: the cheapest row (full-equivalent passes per token) within the fidelity
    budget (:class:`Budget`: LL drop, regret and, when set, the overrule rate), among plain
    autoregressive decoding (the ``ar`` row, when the bench ran it), untiered SD (none), lenient,
    lossless and lossy, and whether the tier won. AR is a candidate because speculative decoding
    itself may not pay: on a CPU a block pass costs well over one single-token pass, and a weak
    drafter may not make up for it."""
    budget = budget or Budget(max_ll_drop, max_overrule, max_regret)
    lines = []
    ar = [r for r in rows if r["framework"] == "ar" and r.get("full_equivalent_per_token") is not None]
    for framework in dict.fromkeys(r["framework"] for r in rows if r["mode"] != "-"):
        candidates = ar + [
            r for r in rows
            if r["framework"] == framework and r["mode"] in ("none", "lenient", "lossless", "lossy")
            and r.get("full_equivalent_per_token") is not None
        ]
        within = [r for r in candidates if _row_within(r, budget)]
        if not within:
            continue
        cheapest, use = recommend(within, cost=lambda r: r["full_equivalent_per_token"],
                                  is_simple=lambda r: r["framework"] == "ar" or r["mode"] in SIMPLE_MODES)
        described = ", ".join(
            f"{_mode_label(r)} {r['full_equivalent_per_token']:.3f}"
            + (f" (LL drop {r['ll_drop']:+.3f})" if r.get("ll_drop") is not None and r["mode"] in ("lenient", "lossy") else "")
            for r in candidates
        )
        if use is not cheapest:
            gain = 1 - cheapest["full_equivalent_per_token"] / use["full_equivalent_per_token"]
            judgement = (f"{_mode_label(cheapest)} is only {gain:.1%} cheaper than {_mode_label(use)}, within the "
                         f"{TIE_MARGIN:.0%} margin of timing noise: the slim tier does not pay here: use {_mode_label(use)}.")
        elif use["framework"] == "ar":
            judgement = ("Speculative decoding itself does not pay here (every drafting row costs more than plain "
                         "decoding), so neither does the slim tier: use ar (the target alone).")
        elif use["mode"] in TIER_MODES:
            judgement = "The slim tier pays here."
        else:
            judgement = f"The slim tier does not pay here: use {use['mode']}."
        lines.append(
            f"{framework}: cheapest within {_budget_words(budget)} is "
            f"{_mode_label(cheapest)} ({cheapest['full_equivalent_per_token']:.3f} full-equivalent passes/token; "
            f"all: {described}). " + judgement
        )
    return lines


def _budget_words(budget: Budget) -> str:
    """The budget as the verdict states it ("an LL drop of 0.02 and a regret of 0.02 nats/token")."""
    words = []
    if budget.max_ll_drop is not None:
        words.append(f"an LL drop of {budget.max_ll_drop}")
    if budget.max_regret is not None:
        words.append(f"a regret of {budget.max_regret} nats/token")
    if budget.max_overrule is not None:
        words.append(f"an overrule rate of {budget.max_overrule}")
    return " and ".join(words)


__all__ = ["Budget", "DEFAULT_MAX_LL_DROP", "DEFAULT_MAX_REGRET", "NegativeDeltaWarning", "SIMPLE_MODES", "TIER_MODES", "TIE_MARGIN",
           "delta_message", "recommend", "tier_beats", "verdict", "warn_if_negative_delta"]
