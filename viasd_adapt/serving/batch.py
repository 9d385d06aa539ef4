"""The batch arithmetic of the slim tier in a server (``docs/serving.md``).

Why this exists: the tier saves a *full pass*, and in a batching server the full pass is shared.
While decoding is memory-bound (every step reads all weights once, whatever the batch size), one
verify step over a batch of B requests costs about one full pass whether it verifies one request's
block or all B. A step that skips the full pass therefore saves something only when **no request
in the batch escalates**: one escalating request makes the whole batch pay for the full pass, and
the slim pass the others ran is then pure overhead. With a per-cycle escalation rate ``e``
(``TierMetrics.escalated_cycles / cycles``) and independent requests, that chance is ``(1 - e)**B``.

Costs are in units of one batched full pass (memory-bound: the same for every B), with the slim
pass at ``slim_cost`` of it and an escalated full pass at ``resume_cost`` of it (below 1 when the
target resumes at the slim verifier's first skipped layer, the shared prefix). Independence across
requests is an assumption (requests from one workload are positively correlated, which raises the
no-escalation chance a little; it cannot lift 0.5**64 off zero).

    python -m viasd_adapt.serving.batch benchmarks/results/tune_demo.json [more viasd tune --json files ...]
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from viasd_adapt.config.tune_points import TunePoint, TunePoints
from viasd_adapt.config.tuned import TunedPoint
from viasd_adapt.errors import ConfigError

BATCH_SIZES = (1, 8, 64)
TIERED_MODES = ("lossy", "audit")  # the only modes that escalate (TierMetrics docstring)


def _check_rate(rate: float) -> float:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or math.isnan(rate) or not 0.0 <= rate <= 1.0:
        raise ConfigError(f"escalation rate must be a number in [0, 1] (escalated cycles / cycles), got {rate!r}")
    return float(rate)


def _check_batch(batch: int) -> int:
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ConfigError(f"batch size must be a positive integer, got {batch!r}")
    return batch


def _check_cost(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
        raise ConfigError(f"{name} must be a non-negative number (a fraction of one full pass), got {value!r}")
    return float(value)


def p_no_escalation(rate: float, batch: int) -> float:
    """Chance that none of ``batch`` independent requests escalates in one cycle: ``(1 - rate)**batch``."""
    return (1.0 - _check_rate(rate)) ** _check_batch(batch)


def tiered_step_cost(rate: float, batch: int, slim_cost: float, resume_cost: float = 1.0) -> float:
    """Expected cost of one batched verify step with the tier: the slim pass always, the (resumed)
    full pass unless no request escalates. Untiered SD pays exactly 1 (one full pass)."""
    slim = _check_cost("slim_cost", slim_cost)
    resume = _check_cost("resume_cost", resume_cost)
    return slim + (1.0 - p_no_escalation(rate, batch)) * resume


def step_saving(rate: float, batch: int, slim_cost: float, resume_cost: float = 1.0) -> float:
    """Fraction of a full pass one batched step saves with the tier (negative: the tier costs)."""
    return 1.0 - tiered_step_cost(rate, batch, slim_cost, resume_cost)


def break_even_rate(batch: int, slim_cost: float, resume_cost: float = 1.0) -> float:
    """The per-cycle escalation rate below which the tier saves anything at this batch size
    (0.0: it cannot pay at any rate, e.g. a slim pass that costs as much as a full one)."""
    _check_batch(batch)
    slim = _check_cost("slim_cost", slim_cost)
    resume = _check_cost("resume_cost", resume_cost)
    if resume == 0.0:
        return 1.0 if slim < 1.0 else 0.0
    needed = 1.0 - (1.0 - slim) / resume  # P(no escalation) must exceed this
    if needed <= 0.0:
        return 1.0
    if needed >= 1.0:
        return 0.0
    return 1.0 - needed ** (1.0 / batch)


@dataclass(frozen=True)
class EscalationPoint:
    """One measured lossy/audit setting: its escalation rate and what it was measured with."""

    source: str
    label: str
    escalated_cycles: int
    cycles: int
    regret: float | None
    full_equivalent: float | None
    slim_cost: float | None  # c_slim / c_full_block for its mask, when the file has the costs
    resume_cost: float | None  # c_resume / c_full_block

    @property
    def rate(self) -> float:
        return self.escalated_cycles / self.cycles


def _point_label(point: TunePoint | TunedPoint) -> str:
    s = point.settings
    mask = Path(str(point.mask)).name if point.mask else "-"
    return f"{s.mode.value} a1={s.alpha1} a2={s.alpha2} gates={s.greedy_gates} mask={mask}"


def _relative_costs(costs: dict[str, Any], mask: Any) -> tuple[float | None, float | None]:
    entry = costs.get(str(mask)) or next((v for k, v in costs.items() if Path(k).name == Path(str(mask)).name), None)
    if not entry or not entry.get("c_full_block"):
        return None, None
    full = entry["c_full_block"]
    slim = entry.get("c_slim")
    resume = entry.get("c_resume")
    return (slim / full if slim else None), (resume / full if resume else None)


def _escalation_point(point: TunePoint | TunedPoint, costs: dict[str, Any], source: str, label: str) -> EscalationPoint:
    slim, resume = _relative_costs(costs, point.mask)
    return EscalationPoint(source, label, int(point.metrics["escalated_cycles"]), int(point.metrics["cycles"]),
                           point.regret, point.full_equivalent, slim, resume)


def escalation_points(results: TunePoints, source: str = "results") -> list[EscalationPoint]:
    """The lossy/audit points of a ``viasd tune --json`` file, each with its measured escalation rate
    and, from the tuner's cost table, its slim and resumed pass costs relative to a full block pass."""
    costs = results.tuned.report.costs
    found = [_escalation_point(point, costs, source, _point_label(point)) for point in results.points
             if point.settings.mode.value in TIERED_MODES and point.metrics.get("cycles")]
    if not found:
        raise ConfigError(f"{source}: no lossy/audit point with escalation counts")
    return found


def tuned_viasd_point(results: TunePoints, source: str = "results") -> EscalationPoint | None:
    """The tuner's best VIA-SD point within its budget (``tuned.report.best_within_budget["lossy-fixed"]``)."""
    best = results.tuned.report.best("lossy-fixed")
    if best is None or not best.metrics.get("cycles"):
        return None
    return _escalation_point(best, results.tuned.report.costs, source, "tuned VIA-SD point: " + _point_label(best))


def table(points: Iterable[EscalationPoint], batches: Sequence[int] = BATCH_SIZES) -> str:
    """Markdown rows: escalation rate, P(no escalation) per batch size, and the step saving."""
    head = "| point | e | " + " | ".join(f"P0 B={b}" for b in batches) + " | slim/full | resume/full | " + \
        " | ".join(f"saving B={b}" for b in batches) + " |"
    lines = [head, "|" + "---|" * (2 + 2 * len(batches) + 2)]
    for pt in points:
        p0 = " | ".join(f"{p_no_escalation(pt.rate, b):.3g}" for b in batches)
        if pt.slim_cost is not None:
            resume = pt.resume_cost if pt.resume_cost is not None else 1.0
            save = " | ".join(f"{step_saving(pt.rate, b, pt.slim_cost, resume):+.2f}" for b in batches)
            costs = f"{pt.slim_cost:.2f} | {resume:.2f}"
        else:
            save = " | ".join("?" for _ in batches)
            costs = "? | ?"
        lines.append(f"| {pt.source}: {pt.label} | {pt.rate:.3f} ({pt.escalated_cycles}/{pt.cycles}) | {p0} | {costs} | {save} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(__doc__)
        return 2
    chosen: list[EscalationPoint] = []
    for path in args:
        data = TunePoints.load(path)
        name = Path(path).stem
        points = escalation_points(data, name)
        tuned = tuned_viasd_point(data, name)
        if tuned is not None:
            chosen.append(tuned)
        lowest = min(points, key=lambda p: p.rate)
        chosen.append(EscalationPoint(name, "lowest-escalation point: " + lowest.label, lowest.escalated_cycles,
                                      lowest.cycles, lowest.regret, lowest.full_equivalent, lowest.slim_cost,
                                      lowest.resume_cost))
        within = [p for p in points if p.regret is not None and p.regret <= 0.02]
        if within:
            low = min(within, key=lambda p: p.rate)
            chosen.append(EscalationPoint(name, "lowest within regret<=0.02: " + low.label, low.escalated_cycles,
                                          low.cycles, low.regret, low.full_equivalent, low.slim_cost, low.resume_cost))
    print(table(chosen))
    tuned_points = [p for p in chosen if p.label.startswith("tuned") and p.slim_cost is not None]
    for b in BATCH_SIZES:
        print(f"break-even escalation rate at B={b} (tuned points' costs): " + ", ".join(
            f"{p.source} {break_even_rate(b, p.slim_cost, p.resume_cost or 1.0):.3f}" for p in tuned_points))
    return 0


__all__ = ["BATCH_SIZES", "EscalationPoint", "break_even_rate", "escalation_points", "p_no_escalation", "step_saving",
           "table", "tiered_step_cost", "tuned_viasd_point"]

if __name__ == "__main__":
    raise SystemExit(main())
