"""Exact settings first: the one rule that picks what a verdict recommends and ``viasd tune`` writes.

Settings form a ladder, from the simplest to the most involved: the target alone (``ar``), exact
drafting without the slim tier (untiered SD, stock prompt lookup), the exact slim tier (the
lossless cascade), the lenient baseline, the lossy slim tier. The choice starts on the lowest rung
present and climbs one rung at a time. It climbs to a rung's cheapest setting within the fidelity
budget only when all of these hold:

* it saves more than the margin (:data:`~viasd_adapt.config.budget.TIE_MARGIN`) over the setting
  chosen so far, on every prompt pooled at the median prices;
* the saving holds (a lower cost, and within the budget) in at least ``level`` (95%) of the
  bootstrap's resamples of the prompts and of the price list's rounds
  (:func:`~viasd_adapt.bench.uncertainty.resample`);
* it is within the fidelity budget; a lossy setting must also beat the cheapest exact setting,
  whichever rung that is on, and needs at least :data:`~viasd_adapt.bench.uncertainty.MIN_PROMPTS`
  distinct prompts (fewer cannot show how much prompts vary, and a lossy setting changes the text).

Otherwise the simpler setting stays, and :meth:`Decision.reason` says why in one line, from the
same comparison whose numbers it quotes. Pure numpy on the resampled arrays, no model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from viasd_adapt.bench.uncertainty import DEFAULT_LEVEL, MIN_PROMPTS, Resampled, prompts_words
from viasd_adapt.config.budget import TIE_MARGIN

#: The rungs, from the simplest: what each adds over the one below.
AR_RUNG, EXACT_RUNG, EXACT_TIER_RUNG, LENIENT_RUNG, LOSSY_TIER_RUNG = range(5)
RUNG_WORDS = ("the target alone", "exact drafting", "the exact slim tier", "the lenient baseline", "the lossy slim tier")


@dataclass(frozen=True)
class Step:
    """One comparison of the climb: ``candidate`` (the cheapest of its rung within the budget) against
    ``against`` (the setting chosen so far, or the cheapest exact one for a lossy candidate)."""

    candidate: str
    against: str
    candidate_cost: float
    against_cost: float
    saving: float  # 1 - candidate / against, every prompt pooled at the median prices
    holds: float  # share of resamples in which the candidate costs less and is within the budget
    taken: bool
    failed: str | None = None  # "margin", "noise", "prompts" or None (taken, or not cheaper)


@dataclass(frozen=True)
class Decision:
    """What the ladder chose, how, and the figures every sentence about it quotes."""

    chosen: str
    cheapest: str | None  # the cheapest setting within the budget, every prompt pooled
    costs: dict[str, float]
    steps: list[Step] = field(default_factory=list)
    prompts: int = 0
    replicates: int = 0
    level: float = DEFAULT_LEVEL
    margin: float = TIE_MARGIN
    priced: bool = False  # whether the price list's rounds were resampled too
    exact: dict[str, bool] = field(default_factory=dict)
    copies: int = 0  # prompts that repeated another one (counted once)

    @property
    def determined(self) -> bool:
        """Whether the evidence settles the choice: enough distinct prompts, and no cheaper setting
        refused on noise alone."""
        return self.prompts >= MIN_PROMPTS and not self.within_noise

    def evidence(self) -> str:
        """ "determined at 40 prompts (1000 resamples of ...)" or "undetermined at 3 prompts (...)"."""
        if not self.replicates:
            return "not resampled (no per-prompt sums: an older file)"
        notes = []
        if self.copies:
            notes.append(f"{'1 copy' if self.copies == 1 else f'{self.copies} copies'} of other prompts counted once")
        if self.prompts < MIN_PROMPTS:
            notes.append(f"fewer than {MIN_PROMPTS} distinct prompts" if self.copies else f"fewer than {MIN_PROMPTS} prompts")
        if self.within_noise:
            notes.append("a cheaper setting within noise")
        notes.append(self._resamples())
        counted = prompts_words(self.prompts) + (" (distinct)" if self.copies else "")
        return f"{'determined' if self.determined else 'undetermined'} at {counted} ({'; '.join(notes)})"

    @property
    def blocking(self) -> Step | None:
        """The refused step that kept ``chosen``: of the settings refused against ``chosen`` itself, the
        cheapest; else the cheapest refused against another (None: the cheapest was chosen). A step
        against another setting explains why that one was not climbed over, not why ``chosen`` stays."""
        refused = [s for s in self.steps if not s.taken and s.failed is not None]
        against_chosen = [s for s in refused if s.against == self.chosen]
        pool = against_chosen or refused
        return min(pool, key=lambda s: s.candidate_cost) if pool else None

    @property
    def within_noise(self) -> bool:
        """Whether a cheaper setting was refused on the noise alone (it saved more than the margin)."""
        return any(s.failed in ("noise", "prompts") for s in self.steps)

    def _resamples(self) -> str:
        if not self.replicates:
            return "the pooled costs alone (no per-prompt sums to resample)"
        what = "prompts and price rounds" if self.priced else "prompts"
        return f"{self.replicates} resamples of the {what}"

    def reason(self) -> str:
        """Why ``chosen`` is written, in one line, with the figures of the comparison that decided it."""
        kind = "exact" if self.exact.get(self.chosen) else "lossy"
        step = self.blocking
        if step is None:
            taken = [s for s in self.steps if s.taken and s.candidate == self.chosen]
            if not taken:
                return f"{self.chosen} ({kind}) is the cheapest setting within the budget ({self.costs[self.chosen]:.3f})"
            s = taken[-1]
            # the share only where the evidence settles the choice: "undetermined" (too few prompts)
            # never stands beside a share that reads as certainty
            if not self.replicates:
                held = f", on {self._resamples()}"
            elif self.determined:
                held = f", in {s.holds:.0%} of {self._resamples()} ({self.level:.0%} needed)"
            else:
                held = ""
            return (f"{s.candidate} ({kind}) costs {s.candidate_cost:.3f} against {s.against}'s {s.against_cost:.3f}: "
                    f"{s.saving:.1%} less, more than the {self.margin:.0%} margin{held}")
        head = (f"{step.candidate} costs {step.candidate_cost:.3f} against {step.against}'s {step.against_cost:.3f} "
                f"({step.saving:.1%} less)")
        return f"{head}, {self._why_refused(step)}; so {self.chosen} ({kind}, simpler) is written{self._cheapest_refused(step)}"

    def _why_refused(self, step: Step) -> str:
        if step.failed == "margin":
            return f"not more than the {self.margin:.0%} margin"
        if step.failed == "noise":
            return (f"more than the {self.margin:.0%} margin, but it holds in only {step.holds:.0%} of {self._resamples()} "
                    f"({self.level:.0%} needed): within noise")
        return (f"but {prompts_words(self.prompts)} cannot show that a saving holds (a lossy setting needs "
                f"{MIN_PROMPTS} distinct prompts)")

    def _cheapest_refused(self, blocking: Step) -> str:
        """The lossy setting a reader asks about next: the cheapest refused one, when the step that kept
        ``chosen`` is another. Its words say what its share counts: a lossy setting must be cheaper and
        within the fidelity budget in the resamples, so one close to the budget's edge is refused even
        where it saves far more than the margin."""
        refused = [s for s in self.steps if not s.taken and s.failed is not None and not self.exact.get(s.candidate, True)]
        if not refused:
            return ""
        step = min(refused, key=lambda s: s.candidate_cost)
        if step is blocking:
            return ""
        if step.failed == "noise":
            why = (f"it is cheaper and within the fidelity budget in only {step.holds:.0%} of the resamples "
                   f"({self.level:.0%} needed)")
        else:
            why = self._why_refused(step)
        return (f"; the cheapest lossy setting, {step.candidate} ({step.candidate_cost:.3f}, {step.saving:.1%} less than "
                f"{step.against}), is not: {why}")


def _cheapest(indices: Sequence[int], cost0: np.ndarray, within0: np.ndarray) -> int | None:
    allowed = [i for i in indices if within0[i] and np.isfinite(cost0[i])]
    return min(allowed, key=lambda i: cost0[i]) if allowed else None


def decide(resampled: Resampled, rungs: Sequence[int], margin: float = TIE_MARGIN,
           level: float = DEFAULT_LEVEL) -> Decision | None:
    """Climbs the ladder (module docstring) over the settings of ``resampled``; ``rungs[k]`` is
    setting k's rung. None when no setting is within the budget."""
    cost, within = resampled.cost, resampled.within
    names = resampled.names
    exact = [c.exact for c in resampled.candidates]
    admitted = [i for i in range(len(names)) if within[0, i] and np.isfinite(cost[0, i])]
    if not admitted:
        return None
    present = sorted({rungs[i] for i in admitted})
    current = _cheapest([i for i in admitted if rungs[i] == present[0]], cost[0], within[0])
    exact_best = _cheapest([i for i in admitted if exact[i]], cost[0], within[0])
    steps = []
    for rung in present[1:]:
        candidate = _cheapest([i for i in admitted if rungs[i] == rung], cost[0], within[0])
        bars = [current] + ([exact_best] if not exact[candidate] and exact_best not in (None, current) else [])
        step = _step(resampled, candidate, bars, margin, level, lossy=not exact[candidate])
        steps.append(step)
        if step.taken:
            current = candidate
    overall = min(admitted, key=lambda i: cost[0, i])
    return Decision(names[current], names[overall], {names[i]: float(cost[0, i]) for i in admitted}, steps,
                    resampled.prompts, cost.shape[0] - 1, level, margin, resampled.priced,
                    {names[i]: bool(exact[i]) for i in range(len(names))}, resampled.copies)


def _step(resampled: Resampled, candidate: int, bars: list[int], margin: float, level: float, lossy: bool) -> Step:
    """``candidate`` against the strongest of ``bars`` (the setting chosen so far; for a lossy one, also
    the cheapest exact setting)."""
    cost, within = resampled.cost, resampled.within
    outcomes = []
    for bar in bars:
        saving = 1.0 - cost[0, candidate] / cost[0, bar]
        holds = float(np.mean((cost[1:, candidate] < cost[1:, bar]) & within[1:, candidate])) if cost.shape[0] > 1 else 1.0
        outcomes.append((saving, holds, bar))
    saving, holds, bar = min(outcomes, key=lambda o: (o[0] > margin, o[1] >= level, o[0]))
    failed = None
    if saving <= 0:
        failed = None  # not cheaper: nothing to explain
    elif saving <= margin:
        failed = "margin"
    elif holds < level:
        failed = "noise"
    elif lossy and resampled.prompts < MIN_PROMPTS and cost.shape[0] > 1:
        failed = "prompts"  # (no resamples at all: an older file's pooled costs, the margin alone decides)
    names = resampled.names
    return Step(names[candidate], names[bar], float(cost[0, candidate]), float(cost[0, bar]), float(saving), holds,
                bool(saving > margin and failed is None), failed)


__all__ = ["AR_RUNG", "Decision", "EXACT_RUNG", "EXACT_TIER_RUNG", "LENIENT_RUNG", "LOSSY_TIER_RUNG", "RUNG_WORDS", "Step",
           "decide"]
