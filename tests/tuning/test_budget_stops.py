"""A stage that runs long stops between its units of work when a time budget is spent, with a
line saying so, and keeps what it measured: the mask search (``StopSearch`` from ``on_step``,
DIMR and the guided search) and the tuning sweep (``stop_when``). Driven by a fake clock or a
count, never by wall time; each with its control (no stop: the stage runs to its own end)."""

from __future__ import annotations

from viasd_adapt.search.candidates import FixedCountSpace
from viasd_adapt.search.config import GuidedConfig, SearchConfig
from viasd_adapt.search.dimr import StopSearch, dimr_search
from viasd_adapt.search.guided import guided_search
from viasd_adapt.tuning.budget_plan import Deadline
from viasd_adapt.tuning.measure import Sweep
from viasd_adapt.tuning.onboard_ratios import search_budget_guard
from tests.support.clock import TickClock


def cost(bits) -> float:
    return float(sum(i * b for i, b in enumerate(bits)))


def stop_after(count: int):
    def on_step(evaluation, best) -> None:
        if evaluation.step >= count:
            raise StopSearch
    return on_step


def test_dimr_stops_at_the_budget_with_its_best_so_far():
    config = SearchConfig(strategy="dimr", steps=20, patience=0, bo_every=0, seed=1)
    stopped = dimr_search(cost, FixedCountSpace(10, 4), config, stop_after(5))
    assert stopped.evaluations == 5 and stopped.stop_reason == "budget"
    assert stopped.best.cost == min(e.cost for e in stopped.history)
    full = dimr_search(cost, FixedCountSpace(10, 4), config, lambda e, b: None)  # control: no stop
    assert full.evaluations == 20 and full.stop_reason == "steps"


def test_the_guided_search_stops_at_the_budget_after_its_first_mask_of_the_space():
    config = SearchConfig(steps=40, seed=2, patience=0, guided=GuidedConfig(probe=False, fit_maxiter=20))
    stopped = guided_search(cost, FixedCountSpace(10, 4), config, stop_after(3))
    assert stopped.stop_reason == "budget" and stopped.evaluations < 40 and stopped.best is not None
    full = guided_search(cost, FixedCountSpace(10, 4), config, lambda e, b: None)  # control
    assert full.stop_reason != "budget" and full.evaluations > stopped.evaluations


def test_the_search_guard_stops_when_an_evaluation_would_eat_the_time_kept_for_later():
    clock = TickClock(1.0)
    guard = search_budget_guard(Deadline(100.0, clock), per_evaluation=10.0, kept=50.0)  # stop past 101 - 50 - 10
    guard(None, 0.0)  # read 2: 2 + 10 <= 51
    clock.jump(40.0)
    try:
        guard(None, 0.0)  # read 3: 43 + 10 > 51
    except StopSearch:
        pass
    else:
        raise AssertionError("the guard let an evaluation run into the time kept for the tuning")


class _Sweep:
    said: list[str]

    def __init__(self) -> None:
        self.said = []

    def say(self, line: str) -> None:
        self.said.append(line)


def test_the_sweep_stops_between_settings_and_says_how_many_it_left():
    sweep = _Sweep()
    candidates = [("none", i, None) for i in range(6)]
    measured: list[int] = []
    clock = TickClock(1.0)
    deadline = Deadline(3.5, clock)  # reads 1: ends at 4.5; each question reads once

    def measure(family, index, mask):
        measured.append(index)
        return index

    points = Sweep.measured_until(sweep, candidates, measure, lambda: not deadline.allows(0.0))
    assert points == [0, 1, 2, 3] and measured == [0, 1, 2, 3]  # reads 2, 3, 4 allowed; 5 is past 4.5
    assert sweep.said == ["time budget: the sweep stops here, 2 of its 6 settings not measured; the choice is made among "
                          "those measured"]
    control = _Sweep()
    assert Sweep.measured_until(control, candidates, measure, lambda: False) == list(range(6)) and control.said == []


def test_the_first_setting_of_a_sweep_is_measured_whatever_the_clock_says():
    sweep = _Sweep()
    points = Sweep.measured_until(sweep, [("none", 0, None), ("none", 1, None)], lambda *c: c[1], lambda: True)
    assert points == [0] and len(sweep.said) == 1
    assert Sweep.measured_until(sweep, [("none", 0, None)], lambda *c: c[1], lambda: True, first=False) == []
