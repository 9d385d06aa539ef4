"""``viasd tune --minutes``: the sweep sized to the budget from a probe (fake clock: the same on any
machine), a budget too small for one prompt refused before the sweep naming the minutes it needs,
and each skip ratio tried reported with its agreement and costs."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from tests.support.clock import TickClock
from viasd_adapt.cli.main import cli
from viasd_adapt.tuning.budget_plan import BudgetTooSmall, GridSize, RunPrice, UnitCosts
from viasd_adapt.tuning.tune_budget import fit_tune

UNITS = UnitCosts(step=0.2, window=1.9, evaluation=1.0, untiered=RunPrice(3.0, 0.1875), tiered=RunPrice(3.0, 0.6875))
GRID = GridSize(lenience=1, lossy=1)


@pytest.fixture
def char_pair(tmp_path, monkeypatch):
    from tests.support.pairs import save_char_pair

    monkeypatch.setattr("viasd_adapt.cli.tune.CLOCK", TickClock(0.02))
    return save_char_pair(tmp_path / "pair", with_mask=True)


def args(pair, tmp_path, minutes):
    return ["tune", "--pair", str(pair), "--alpha1", "0.5", "--alpha2", "0.3", "--lenience", "0.6", "--greedy-gates",
            "proposer", "--prompts", "3", "--max-new-tokens", "8", "--gamma", "3", "--search-steps", "4",
            "--out", str(tmp_path / "out" / "tuned.json"), "--minutes", str(minutes)]


def test_a_budget_too_small_for_one_prompt_is_refused_before_the_sweep(char_pair, tmp_path):
    refused = CliRunner().invoke(cli, args(char_pair, tmp_path, 0.01))
    assert refused.exit_code == 2 and "too small" in refused.output and "reference:" not in refused.output
    assert not (tmp_path / "out" / "tuned.json").exists()
    needed = float(re.search(r"pass --minutes ([\d.]+) or more", refused.output).group(1))
    taken = CliRunner().invoke(cli, args(char_pair, tmp_path, needed))  # control: the minutes it named
    assert taken.exit_code == 0, taken.output
    assert f"within the {needed:g} min budget" in taken.output and (tmp_path / "out" / "tuned.json").is_file()
    assert re.search(r"skip ratio [\d.]+ \(\d+ layers skipped, mask .*\): agreement with the target", taken.output)


def test_the_sweep_runs_on_the_prompts_that_fit_and_tries_ratios_only_with_room():
    small = fit_tune(UNITS, 600, minutes=10.5, grid=GRID, masks=1, ratios=(), auto_ratios=True, search_steps=6,
                     prompts_asked=12)
    assert small.ratios == () and 1 <= small.prompts < 12 and small.expected_seconds <= 600
    large = fit_tune(UNITS, 7200, minutes=120.5, grid=GRID, masks=1, ratios=(), auto_ratios=True, search_steps=6,
                     prompts_asked=12)
    assert large.ratios == (0.3, 0.2) and large.prompts >= 4 and large.expected_seconds <= 7200
    asked = fit_tune(UNITS, 7200, minutes=120.5, grid=GRID, masks=1, ratios=(0.6,), auto_ratios=False, search_steps=6,
                     prompts_asked=12)
    assert asked.ratios == (0.6,)  # control: asked ratios are tried, and no others added


def test_fit_tune_names_the_minutes_the_smallest_sweep_needs():
    with pytest.raises(BudgetTooSmall) as refused:
        fit_tune(UNITS, 30, minutes=1.0, grid=GRID, masks=1, ratios=(0.3,), auto_ratios=False, search_steps=6,
                 prompts_asked=12)
    needed = refused.value.minutes_needed
    plan = fit_tune(UNITS, needed * 60 - 30, minutes=needed, grid=GRID, masks=1, ratios=(0.3,), auto_ratios=False,
                    search_steps=6, prompts_asked=12)
    assert plan.prompts >= 1
