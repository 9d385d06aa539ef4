"""The skip ratios ``viasd models add`` tries: one mask search per ratio the plan allows, within the
time left, and what each ratio's slim verifier agreed and cost.

Why more than one ratio: the paper's 0.45 is one answer among several; on a small model a slim
verifier that skips fewer layers may agree with the target far more often, and only the sweep's
prices say which pays. The greedy calibration is the slow part of a search and does not depend on
the ratio, so every ratio's search reads the windows of the first (an in-memory window cache).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from viasd_adapt.config.onboard_report import RatioTried
from viasd_adapt.tuning.budget_plan import Deadline, UnitCosts, ratio_fixed_seconds, search_step_seconds

MAIN_MASK = "mask.json"


def mask_filename(ratio: float, main: bool) -> str:
    """``mask.json`` for the main ratio (what ``pair.json`` names), ``mask-r0.30.json`` for another."""
    return MAIN_MASK if main else f"mask-r{ratio:.2f}.json"


def search_budget_guard(deadline: Deadline, per_evaluation: float, kept: float) -> Callable[[Any, float], None]:
    """An ``on_step`` that ends the search (:class:`~viasd_adapt.search.dimr.StopSearch`) when one
    more evaluation (``per_evaluation`` seconds) would eat into ``kept``, the seconds the stages
    after it are planned to take."""
    from viasd_adapt.search.dimr import StopSearch

    guard = deadline.sooner(kept)

    def on_step(evaluation: Any, best: float) -> None:
        if not guard.allows(per_evaluation):
            raise StopSearch
    return on_step


def search_ratios(target: Any, draft: Any, tokenizer: Any, base_config: Any, *, ratios: tuple[float, ...], steps: int,
                  extra_steps: int, work: Path, units: UnitCosts, deadline: Deadline, tune_seconds: float,
                  say: Callable[[str], None], prompt_lookup: bool, names: tuple[str, str],
                  on_step: Callable[[Any, float], None] | None = None,
                  note: Callable[[str], None] | None = None) -> tuple[list[tuple[float, Path]], bool]:
    """Searches one mask per ratio into ``work`` (the main ratio's with ``steps`` evaluations, each
    other's with ``extra_steps``), each stopping early when the time it leaves the tuning sweep
    (``tune_seconds``) runs short; a ratio whose whole search no longer fits is skipped, said in one
    line (``say``: the report; ``note``: progress, such as the search's calibration). Returns each ratio tried with its mask file (main first) and whether the main one was resumed. A mask file
    already there (an interrupted run) is checked against the target and kept."""
    from viasd_adapt.routing.mask import load_mask
    from viasd_adapt.search import decoder_windows as cal
    from viasd_adapt.search.pipeline import search_pair
    from viasd_adapt.search.report import ReportInput, describe as describe_search

    cache = cal.WindowCache(None, say=note or say)
    n_cal, n_held = base_config.calibration.n_calibration, base_config.calibration.n_heldout
    paths: list[tuple[float, Path]] = []
    resumed = False
    for index, ratio in enumerate(ratios):
        path = work / mask_filename(ratio, index == 0)
        if path.is_file():
            load_mask(path, target)  # a mask of other weights is refused, naming the file
            paths.append((ratio, path))
            resumed = resumed or index == 0
            continue
        evaluations = steps if index == 0 else extra_steps
        per_evaluation = search_step_seconds(units, n_cal, ratio)
        tail = ratio_fixed_seconds(units, n_cal, n_held)  # the objective's setup and the held-out agreement
        later = sum(tail + extra_steps * search_step_seconds(units, n_cal, r) for r in ratios[index + 1:])
        if index > 0 and not deadline.sooner(tune_seconds + later).allows(tail + per_evaluation * evaluations):
            say(f"time budget: the skip ratio {ratio:g} is not tried (its search no longer fits before the tuning)")
            continue
        config = replace(base_config, ratio=ratio, steps=evaluations,
                         **({} if index == 0 else dict(strategy="dimr", patience=evaluations)))
        guard = search_budget_guard(deadline, per_evaluation, tune_seconds + later + tail)

        def step(evaluation: Any, best: float, guard=guard) -> None:
            if on_step is not None:
                on_step(evaluation, best)
            guard(evaluation, best)

        info = ReportInput(target_name=names[0], draft_name=names[1], out=path)
        outcome = search_pair(target, draft, tokenizer, config, prompt_lookup=prompt_lookup, window_cache=cache,
                              on_step=step, info=info, say=(note or say) if index == 0 else None)
        if outcome.result.stop_reason == "budget":
            say(f"time budget: the search at the skip ratio {ratio:g} stops after {len(outcome.result.history)} of "
                f"{evaluations} masks, keeping the time the later stages are planned to take")
        for line in describe_search(outcome) if index == 0 else [outcome.summary]:
            say(line)
        paths.append((ratio, path))
    return paths, resumed


def ratios_tried(masks: list[tuple[float, Path]], result: Any, work: Path, folder: Path) -> list[RatioTried]:
    """Each ratio tried (as asked; its mask skips ``round(ratio * layers)``) with its mask (named by its path in the published ``folder``), its held-out agreement
    and search, and what its settings cost in the sweep ``result`` (:class:`~viasd_adapt.tuning.tune.TuneResult`,
    its masks named by their paths in ``work``; None when the tuning was resumed)."""
    from viasd_adapt.config.mask import MaskArtifact
    from viasd_adapt.tuning.tune import settings_label

    tried = []
    for ratio, path in masks:
        artifact = MaskArtifact.load(path)
        report = artifact.report
        entry = RatioTried(ratio=ratio, skipped_layers=len(artifact.mask.skipped),
                           mask=str(folder / path.relative_to(work)),
                           heldout_agreement=getattr(report, "heldout_agreement", None),
                           masks_evaluated=getattr(report, "evaluations", 0) or 0,
                           search_seconds=round(float(getattr(report, "search_seconds", 0.0) or 0.0), 1),
                           stop_reason=getattr(report, "stop_reason", None))
        if result is not None:
            within = [p for p in result.points if p.mask == str(path) and result.budget.admits(p)]
            lossless = [p for p in within if p.family == "lossless-fixed"]
            if lossless:
                entry.lossless_cost = round(lossless[0].full_equivalent, 4)
            if within:
                best = min(within, key=lambda p: p.full_equivalent)
                entry.best_cost, entry.best_setting = round(best.full_equivalent, 4), f"{best.family}: {settings_label(best.settings)}"
        tried.append(entry)
    return tried


def ratio_lines(tried: list[RatioTried]) -> list[str]:
    """One line per ratio tried: agreement and cost side by side."""
    lines = []
    for entry in tried:
        agreement = f"{entry.heldout_agreement:.3f}" if entry.heldout_agreement is not None else "not measured"
        cost = (f"lossless {entry.lossless_cost:.3f} feq/token, cheapest within budget {entry.best_cost:.3f} ({entry.best_setting})"
                if entry.lossless_cost is not None and entry.best_cost is not None else "not tuned")
        lines.append(f"skip ratio {entry.ratio:g} ({entry.skipped_layers} layers skipped, {entry.masks_evaluated} masks searched "
                     f"in {entry.search_seconds:.0f}s): held-out agreement {agreement}; {cost}; mask {entry.mask}")
    return lines


__all__ = ["MAIN_MASK", "mask_filename", "ratio_lines", "ratios_tried", "search_budget_guard", "search_ratios"]
