"""Stage 3 of a mask search: the trace -> the mask artifact with its typed sections, and the prose.

Pure formatting: no model runs here. :func:`report_search` turns stage 1's windows and stage 2's
trace into the :class:`~viasd_adapt.config.mask.MaskArtifact` whose ``search`` and ``report``
sections are typed records (:mod:`viasd_adapt.config.search_record`), written to disk when asked;
:func:`summary_line` and :func:`describe` are the sentences ``viasd search`` prints.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from viasd_adapt.config.mask import MaskArtifact
from viasd_adapt.config.search_record import SEARCH_REPORT_VERSION, SearchMeasurements, SearchRecord
from viasd_adapt.search.dimr import SearchResult, median
from viasd_adapt.search.prepare import Prepared
from viasd_adapt.search.price import cycle_price, mask_price
from viasd_adapt.search.run import SearchTrace

COSTS_EXACT = "calibration is fixed and forwards are deterministic, so the observed minimum is exact; no re-evaluation"
DELTA_READING = "C_alpha2(q||p) - [C_alpha1(u||p) + C_alpha2(q||u)]"
ROUTED_OBJECTIVE = "C_alpha1(u||p) + C_alpha2(q||u), relu margins, summed over tau continuation positions"
Q_ONLY_OBJECTIVE = ("C_alpha2(q||u) only (the drafter has no distribution), relu margins, summed over tau "
                    "continuation positions")
MARGIN_OBJECTIVE = ("top-1 log-margin of u against q's greedy token, max_v log u(v) - log u(argmax q), summed over "
                    "tau continuation positions")
OBJECTIVE_DESCRIPTIONS = {"routed": ROUTED_OBJECTIVE, "q-only": Q_ONLY_OBJECTIVE, "margin": MARGIN_OBJECTIVE}
GUIDED_STRATEGY = ("(per-layer probes, structured warm starts, swap trust region, additive surrogate + SingleTaskGP "
                   "lower confidence bound)")
DIMR_STRATEGY = "random masks of the space + SingleTaskGP/qLogNEI over a flip/swap-neighbour pool every bo_every steps"


@dataclass(frozen=True)
class ReportInput:
    """What the report records beyond the trace.

    Attributes:
        calibration_info: ``search.calibration`` (:func:`~viasd_adapt.search.prompt_ids.calibration_record`).
        target_name, draft_name: how the artifact names the models (relative, never a machine path).
        out: where the artifact is written (None: not written).
        started: ``time.perf_counter()`` when the whole run began; with ``out``, the artifact
            records the run's total wall time up to the write.
    """

    calibration_info: dict | None = None
    target_name: str | None = None
    draft_name: str | None = None
    out: str | os.PathLike | None = None
    started: float | None = None


@dataclass
class SearchOutcome:
    """A finished search: the artifact (its ``search`` and ``report`` sections typed), the
    strategy's result, the random baseline's costs and the one-line summary. ``path``: where the
    artifact was written; ``total_seconds``: the run's wall time up to then (both None when it was
    not written)."""

    artifact: MaskArtifact
    result: SearchResult
    random_costs: list[float] = field(default_factory=list)
    summary: str = ""
    path: Path | None = None
    total_seconds: float | None = None

    @property
    def search(self) -> SearchRecord:
        """How the mask was searched (the artifact's ``search`` section)."""
        return self.artifact.search

    @property
    def report(self) -> SearchMeasurements:
        """What the search measured (the artifact's ``report`` section)."""
        return self.artifact.report


def _rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


def measurements(prepared: Prepared, trace: SearchTrace) -> SearchMeasurements:
    """The ``report`` section: the best mask's numbers, the trace and where the time went."""
    result, best, score = trace.result, trace.best_mask, trace.best_score
    extras = result.extras
    calibration_seconds = prepared.seconds + trace.setup_seconds
    report: dict = {
        "tau": prepared.tau,
        "calibration_windows": prepared.num_windows,
        "num_layers": trace.num_layers,
        "skipped_count": best.num_skipped,
        "space": trace.space.describe(),
        "price": mask_price(best),
        "cost_per_token": _rounded(score.per_token(prepared.tau), 6),
        "direct_cost_alpha2": _rounded(trace.direct_cost),
        "calib_agreement": _rounded(score.agreement),
        "evaluations": result.evaluations,
        "bo_evaluations": sum(1 for e in result.history if e.kind == "bo"),
        "stop_reason": result.stop_reason,
        "bo_failures": extras.get("bo_failures", []),
        "calibration_seconds": round(calibration_seconds, 2),
        "search_seconds": round(result.wall_seconds, 2),
        "bo_seconds": round(result.bo_seconds, 2),
        "escalation_estimate": _rounded(score.escalation),
        "cycle_price": _rounded(cycle_price(best, score.escalation)),
        "time": {
            "calibration_windows_generated": (None if prepared.windows_seconds is None
                                              else round(prepared.windows_seconds, 2)),
            "calibration_total": round(calibration_seconds, 2),
            "window_cache": prepared.window_cache,
            "evaluations": round(trace.eval_seconds, 2),
            "evaluation_mean": round(trace.eval_seconds / max(1, result.evaluations), 3),
            "gp_fit": round(float(extras.get("gp_fit_seconds", result.bo_seconds)), 2),
            "proposals": round(float(extras.get("phase_seconds", {}).get("proposal", result.bo_seconds)), 2),
            "prefix_states": trace.prefix_states,
        },
        "probe_evaluations": extras.get("probe_evaluations", 0),
        "layer_sensitivity": [_rounded(v) for v in extras["sensitivity"]] if extras.get("sensitivity") else None,
        "history": [[e.step, e.kind, round(e.cost, 5)] for e in result.history],
        "costs_exact": COSTS_EXACT,
    }
    if trace.heldout_tau is not None:
        report["heldout_tau"] = trace.heldout_tau
        report["heldout_agreement"] = _rounded(trace.heldout_agreement)
        report["drafter_heldout_agreement"] = _rounded(trace.drafter_heldout_agreement)
    if trace.random is not None:
        random = trace.random
        costs = random.costs
        entry = {
            "count": len(random.masks),
            "seed": trace.config.random_seed,
            "skipped_layers": [[i for i, b in enumerate(bits) if b == 0] for bits in random.masks],
            "costs": [_rounded(c) for c in costs],
            "median_cost": _rounded(median(costs)),
            "dimr_cost_ratio_to_median": _rounded(median(costs) / score.cost, 3) if score.cost > 0 else None,
            "calib_agreement": [_rounded(s.agreement) for s in random.scores],
            "deltas": [_rounded(s.delta) for s in random.scores],
        }
        if random.heldout_agreement is not None:
            entry["heldout_agreement"] = [_rounded(a) for a in random.heldout_agreement]
            entry["median_heldout_agreement"] = _rounded(median(random.heldout_agreement))
        report["random_compare"] = entry
    report["version"] = SEARCH_REPORT_VERSION
    return SearchMeasurements.model_validate(report)


def search_record(prepared: Prepared, trace: SearchTrace, info: ReportInput) -> SearchRecord:
    """The ``search`` section: settings, tier, objective, strategy, calibration, wall time."""
    config = trace.config
    tier = config.tier()
    guided = config.strategy == "guided"
    record = config.strategy_record() | {
        "ratio": trace.best_mask.ratio,
        "space": trace.space.describe(),
        "alpha1": tier.alpha1,
        "alpha2": tier.alpha2,
        "beta": tier.beta,
        "objective": OBJECTIVE_DESCRIPTIONS[trace.objective],
        "delta_reading": DELTA_READING,
        "strategy": f"guided: {config.guided.label()} {GUIDED_STRATEGY}" if guided else DIMR_STRATEGY,
        "bo": asdict(config.bo),
        "calibration": info.calibration_info or {},
        "wall_seconds": round(prepared.seconds + prepared.heldout_seconds + trace.seconds, 2),
        "torch_threads": torch.get_num_threads(),
    }
    if info.target_name is not None:
        record["target"] = info.target_name
    if info.draft_name is not None:
        record["draft"] = info.draft_name
    return SearchRecord.model_validate(record)


def summary_line(search: SearchRecord, measured: SearchMeasurements, prepared: Prepared, trace: SearchTrace) -> str:
    """The search in one sentence: the mask, its price and cost, the evaluations, the time."""
    best, score = trace.best_mask, trace.best_score
    price = measured.price
    cache = prepared.window_cache
    summary = (
        f"DIMR: best mask skips {list(best.skipped)} of {trace.num_layers} layers "
        f"(s1 = {price.s1}: slim pass {price.slim_layers} layers, resumed target pass {price.resume_layers}); "
        f"cost {score.cost:.3f} ({score.per_token(prepared.tau):.4f}/token), Delta {score.delta:+.3f}; "
        + (f"{measured.evaluations} evaluations ({measured.probe_evaluations} probes, {trace.config.guided.label()}) "
           if search.guided else f"{measured.evaluations} evaluations ({measured.bo_evaluations} BO) ")
        + f"in {search.wall_seconds:.1f}s; time: calibration {prepared.seconds + trace.setup_seconds:.1f}s"
        + (f" (windows {'cached' if cache['hits'] and not cache['misses'] else f'generated {prepared.windows_seconds:.1f}s'})"
           if cache is not None else "")
        + f", evaluations {trace.eval_seconds:.1f}s, GP fits {measured.time.gp_fit:.1f}s"
    )
    if trace.random is not None and trace.random.masks:
        summary += f"; median of {len(trace.random.masks)} random masks {median(trace.random.costs):.3f}"
    return summary


def artifact_of(search: SearchRecord, measured: SearchMeasurements, trace: SearchTrace) -> MaskArtifact:
    """The mask artifact of the trace's best mask, carrying the two sections."""
    return MaskArtifact(mask=trace.best_mask, ratio=trace.best_mask.ratio, score=round(trace.best_score.cost, 6),
                        delta=round(trace.best_score.delta, 6), search=search, fingerprint=trace.fingerprint,
                        report=measured, hardware=trace.hardware)


def report_search(prepared: Prepared, trace: SearchTrace, info: ReportInput = ReportInput()) -> SearchOutcome:
    """Stage 3: the typed sections, the artifact (written to ``info.out`` when given), the summary."""
    search, measured = search_record(prepared, trace, info), measurements(prepared, trace)
    outcome = SearchOutcome(artifact_of(search, measured, trace), trace.result,
                            trace.random.costs if trace.random is not None else [],
                            summary_line(search, measured, prepared, trace))
    if info.out is not None:
        write(outcome, info.out, info.started)
    return outcome


def write(outcome: SearchOutcome, path: str | os.PathLike, started: float | None = None) -> Path:
    """Writes the outcome's artifact to ``path``; with ``started`` (a ``perf_counter`` reading),
    the report records the run's total wall time up to now."""
    if started is not None:
        outcome.total_seconds = time.perf_counter() - started
        outcome.search.total_wall_seconds = round(outcome.total_seconds, 2)
    outcome.path = outcome.artifact.save(path)
    return outcome.path


def describe(outcome: SearchOutcome) -> list[str]:
    """What ``viasd search`` prints about a finished search: the summary (with the run's total wall
    time and the held-out agreement) and, for a negative Delta, the advice."""
    from viasd_adapt.config.advice import delta_message

    measured = outcome.report
    line = outcome.summary + (f"; total wall {outcome.total_seconds:.1f}s" if outcome.total_seconds is not None else "")
    if measured.heldout_agreement is not None:
        line += (f"; held-out greedy agreement with q: slim {measured.heldout_agreement:.3f}, "
                 f"drafter {measured.drafter_heldout_agreement:.3f}")
        if measured.random_compare is not None and measured.random_compare.median_heldout_agreement is not None:
            line += f", random-mask median {measured.random_compare.median_heldout_agreement:.3f}"
    lines = [line]
    advice = delta_message(outcome.artifact.delta, outcome.artifact.search)
    if advice:
        lines.append(f"NOTE: {advice}")
    return lines


__all__ = ["ReportInput"]
