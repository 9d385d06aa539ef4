"""The time budget as a contract (viasd_adapt.tuning.budget_plan, onboard_plan): plans priced from
measured unit costs fit the budget, a budget too small is refused naming the minutes it needs, an
overrun is never "within", the words match the sizes, and long stages stop between units on a
(fake) clock. Pure arithmetic: no model, no wall clock."""

from __future__ import annotations

import pytest

from tests.support.clock import TickClock
from viasd_adapt.tuning.budget_plan import (FILL, BudgetTooSmall, Deadline, RunPrice, UnitCosts, budget_words, fit_plan,
                                            smallest_seconds)
from viasd_adapt.tuning.onboard_plan import TUNE_GRIDS, estimate_line, grid_size, plan_onboarding

#: Units at about the shape of Qwen2-0.5B on a 2-core CPU (decode step, window, a mask evaluation per
#: window, one setting on one prompt of 32 tokens: 9 s untiered, 25 s tiered).
QWEN = UnitCosts(step=0.2, window=1.9, evaluation=1.0, untiered=RunPrice(3.0, 0.1875), tiered=RunPrice(3.0, 0.6875))
GRIDS = [grid_size(g) for g in TUNE_GRIDS]


def planned(units: UnitCosts, minutes: float, **kwargs):
    options = dict(num_layers=24, ratio=0.45, file_prompts=None, tune_available=12) | kwargs
    return plan_onboarding(units, minutes=minutes, probe_seconds=30.0, **options)


@pytest.mark.parametrize("minutes", [15, 30, 60, 240])
def test_the_plan_fits_the_budget_it_is_given(minutes):
    plan = planned(QWEN, minutes).plan
    assert plan.expected_seconds <= (minutes * 60 - 30) * FILL
    assert plan.tune_prompts >= 4 and plan.search_steps >= 4


def test_a_larger_budget_buys_more_and_dearer_units_buy_less():
    small, large = planned(QWEN, 15).plan, planned(QWEN, 120).plan
    assert (large.search_steps, large.tune_points * large.tune_prompts) > (small.search_steps, small.tune_points * small.tune_prompts)
    # control: the same budget with every unit twice as dear buys fewer units of work
    dear = planned(UnitCosts(step=0.4, window=3.8, evaluation=2.0, untiered=RunPrice(6.0, 0.375),
                               tiered=RunPrice(6.0, 1.375)), 60).plan
    cheap = planned(QWEN, 60).plan
    assert dear.tune_points * dear.tune_prompts + dear.search_steps < cheap.tune_points * cheap.tune_prompts + cheap.search_steps


def test_a_tiered_unit_priced_from_the_probe_moves_the_plan():
    """The probe's tiered setting price is what the sweep is planned with: a dearer tiered cycle
    (a drafted token that costs more than a bare forward) buys fewer tuning prompts."""
    cheap_tier = planned(UnitCosts(step=0.2, window=1.9, evaluation=1.0, untiered=RunPrice(3.0, 0.1875),
                                    tiered=RunPrice(3.0, 0.21875)), 30).plan
    dear_tier = planned(QWEN, 30).plan
    assert dear_tier.tune_seconds <= cheap_tier.tune_seconds + 1e-9 or dear_tier.tune_prompts < cheap_tier.tune_prompts
    assert (dear_tier.tune_points, dear_tier.tune_prompts) != (cheap_tier.tune_points, cheap_tier.tune_prompts)


def test_a_budget_the_smallest_plan_cannot_fit_is_refused_naming_the_minutes_it_needs():
    with pytest.raises(BudgetTooSmall) as refused:
        planned(QWEN, 3)
    needed = refused.value.minutes_needed
    assert f"pass --minutes {needed:g}" in str(refused.value) and needed > 3
    assert needed * 60 * FILL >= smallest_seconds(QWEN, 0.45, GRIDS[-1], None, 12)
    planned(QWEN, needed + 0.5)  # control: the minutes it named (plus the probe's) are taken


def test_an_overrun_is_never_called_within():
    assert budget_words(61, 60).startswith("OVER") and "within" not in budget_words(61, 60)
    assert budget_words(60, 60).startswith("within")  # control: on the budget is within it


def test_the_estimate_says_within_only_for_a_plan_inside_the_budget():
    estimate = planned(QWEN, 30).estimate
    assert estimate.within_budget and "within the 30 min budget" in estimate_line(estimate)
    over = estimate.model_copy(update={"expected_minutes": 31.0, "within_budget": False})
    assert "OVER the 30 min budget" in estimate_line(over) and "within" not in estimate_line(over)


def test_a_one_prompt_file_is_planned_and_said_as_one_prompt():
    estimate = planned(QWEN, 60, file_prompts=1, tune_available=1).estimate
    assert estimate.tune_prompts == 1 and "on 1 prompt" in estimate_line(estimate)
    assert "on 1 prompts" not in estimate_line(estimate) and "on 4 prompts" not in estimate_line(estimate)
    four = planned(QWEN, 60, file_prompts=4, tune_available=4).estimate  # control: the file's four
    assert four.tune_prompts == 4 and "on 4 prompts" in estimate_line(four)


def test_the_ratios_tried_grow_with_the_budget():
    assert planned(QWEN, 15).plan.ratios == (0.45,)
    assert any("only the skip ratio 0.45" in note for note in planned(QWEN, 15).plan.notes)
    large = planned(QWEN, 240).plan
    assert large.ratios == (0.45, 0.3, 0.2) and large.expected_seconds <= (240 * 60 - 30) * FILL
    assert "at each other ratio (0.3, 0.2)" in estimate_line(planned(QWEN, 240).estimate)


def test_fit_plan_refuses_nothing_it_can_fit_and_reports_its_prices():
    plan = fit_plan(QWEN, 1800, num_layers=24, most_steps=75, ratio=0.45, grids=GRIDS)
    assert plan.search_seconds > 0 and plan.tune_seconds > 0 and plan.expected_seconds <= 1800 * FILL


def test_a_deadline_allows_a_unit_only_when_it_ends_in_time():
    clock = TickClock(1.0)
    deadline = Deadline(10.0, clock)  # reads 1: ends at 11
    assert deadline.allows(5.0)  # read 2: 2 + 5 <= 11
    clock.jump(5.0)
    assert not deadline.allows(5.0)  # read 3: 8 + 5 > 11
    assert deadline.allows(2.0)  # control: a shorter unit still fits (read 4: 9 + 2 <= 11)
    assert not deadline.sooner(2.0).allows(2.0)  # the same unit when 2 s are kept for later
