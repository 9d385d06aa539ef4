"""``viasd models add``'s plan: the probe's units turned into the sizes of each stage and the words
that state them (:mod:`viasd_adapt.tuning.budget_plan` holds the arithmetic).

Why the words are built here from the plan itself: what is printed ("search 12 masks, tune 6
settings on 1 prompt", "within" or "OVER") is read from the same numbers the stages then run, so
the plan a user reads is the plan that runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from viasd_adapt.config.onboard_report import OnboardEstimate
from viasd_adapt.tuning.budget_plan import (GridSize, Plan, RunPrice, UnitCosts, budget_words, fit_plan, prompts_word,
                                            run_words)
from viasd_adapt.tuning.grid import TuneGrid

#: The sweeps a budget chooses among, largest first: the full grid, a middle one, and the paper's
#: point with one lenient tolerance.
TUNE_GRIDS = (TuneGrid(),
              TuneGrid(alpha1=(0.0, 0.5), alpha2=(0.0, 0.3), lenience=(0.4, 0.8), greedy_gates=("proposer",)),
              TuneGrid(alpha1=(0.5,), alpha2=(0.3,), lenience=(0.6,), greedy_gates=("proposer",)))


def grid_size(grid: TuneGrid) -> GridSize:
    """How many settings of each kind ``grid`` sweeps per mask (greedy: every gate reading)."""
    return GridSize(lenience=len(grid.lenience), lossy=len(grid.alpha1) * len(grid.alpha2) * len(grid.greedy_gates))


@dataclass(frozen=True)
class OnboardPlan:
    """The plan (sizes and prices), the sweep it runs, the search's config changes, the estimate as
    recorded and the probe's units it was priced from (what the stages' early stops price a unit by)."""

    plan: Plan
    grid: TuneGrid
    search: dict
    estimate: OnboardEstimate
    units: UnitCosts


def plan_onboarding(units: UnitCosts, *, minutes: float, probe_seconds: float, num_layers: int, ratio: float,
                    file_prompts: int | None, tune_available: int | None) -> OnboardPlan:
    """The plan for what is left of ``minutes`` after the probe (``probe_seconds``); raises
    :class:`~viasd_adapt.tuning.budget_plan.BudgetTooSmall` when the smallest does not fit."""
    from viasd_adapt.search.config import default_steps

    most = default_steps(num_layers)
    plan = fit_plan(units, minutes * 60 - probe_seconds, num_layers=num_layers, most_steps=most, ratio=ratio,
                    grids=[grid_size(g) for g in TUNE_GRIDS], file_prompts=file_prompts, tune_available=tune_available,
                    minutes=minutes)
    if plan.tune_prompts < MIN_STATED_PROMPTS:
        plan.notes.append(f"the verdict rests on {prompts_word(plan.tune_prompts)}: too few to tell settings apart "
                          "from noise")
    expected = probe_seconds + plan.expected_seconds
    estimate = OnboardEstimate(minutes=minutes, step_seconds=round(units.step, 4), window_seconds=round(units.window, 4),
                               evaluation_seconds=round(units.evaluation, 4), evaluated_ratio=round(units.evaluated_ratio, 4),
                               proposal_seconds=round(units.proposal, 4),
                               untiered_point_seconds=round(units.sd_point, 3), tiered_point_seconds=round(units.tier_point, 3),
                               untiered_prompt_seconds=round(units.untiered.prompt, 3),
                               untiered_token_seconds=round(units.untiered.token, 4),
                               tiered_prompt_seconds=round(units.tiered.prompt, 3), tiered_token_seconds=round(units.tiered.token, 4),
                               greedy_prompt_seconds=round(units.greedy.prompt, 3) if units.greedy else None,
                               greedy_token_seconds=round(units.greedy.token, 4) if units.greedy else None,
                               probe_seconds=round(probe_seconds, 2), calibration_prompts=plan.calibration_prompts,
                               heldout_prompts=plan.heldout_prompts, search_steps=plan.search_steps,
                               ratios=list(plan.ratios), extra_ratio_steps=plan.extra_steps if len(plan.ratios) > 1 else 0,
                               tune_prompts=plan.tune_prompts, tune_points=plan.tune_points,
                               expected_minutes=round(expected / 60, 2), within_budget=expected <= minutes * 60,
                               notes=list(plan.notes))
    strategy = "guided" if plan.search_steps >= 2 * num_layers else "dimr"
    search = dict(steps=plan.search_steps, strategy=strategy, patience=max(plan.search_steps, 1), compare_random=0)
    return OnboardPlan(plan, TUNE_GRIDS[plan.grid], search, estimate, units)


#: Fewer tuning prompts than this and the plan says the verdict rests on too few.
MIN_STATED_PROMPTS = 4


def _greedy_words(estimate: OnboardEstimate) -> str:
    """``, a greedy calibration token 610 ms`` when the probe timed one."""
    token = estimate.greedy_token_seconds
    return f", a greedy calibration token {token * 1000:.0f} ms" if token is not None else ""


def estimate_line(estimate: OnboardEstimate) -> str:
    """The estimate as said before anything long starts: the time against the budget, the probe's
    units, and the sizes that will run."""
    words = budget_words(estimate.expected_minutes * 60, estimate.minutes * 60)
    ratios = estimate.ratios or []
    others = (f", then {estimate.extra_ratio_steps} masks at each other ratio ({', '.join(f'{r:g}' for r in ratios[1:])})"
              if len(ratios) > 1 else "")
    main = f" at the skip ratio {ratios[0]:g}" if ratios else ""
    untiered = RunPrice(estimate.untiered_prompt_seconds, estimate.untiered_token_seconds)
    tiered = RunPrice(estimate.tiered_prompt_seconds, estimate.tiered_token_seconds)
    return (f"estimate: about {estimate.expected_minutes:.1f} min after the first load, {words} (probe "
            f"{estimate.probe_seconds:.1f}s: a decode step {estimate.step_seconds * 1000:.0f} ms{_greedy_words(estimate)}, "
            "a calibration window "
            f"{estimate.window_seconds:.2f}s, a mask evaluation {estimate.evaluation_seconds:.2f}s per window, one setting "
            f"on one prompt {run_words(untiered)} untiered and {run_words(tiered)} tiered): calibrate on "
            f"{prompts_word(estimate.calibration_prompts)}, search {estimate.search_steps} masks{main}{others}, tune "
            f"{estimate.tune_points} settings on {prompts_word(estimate.tune_prompts)}")

__all__ = ["OnboardPlan", "TUNE_GRIDS", "estimate_line", "grid_size", "plan_onboarding"]
