"""The batch arithmetic of docs/serving.md: P(no escalation) = (1 - e)**B and what a step saves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from viasd_adapt.errors import ConfigError
from viasd_adapt.config.tune_points import TunePoints
from viasd_adapt.serving.batch import (break_even_rate, escalation_points, main, p_no_escalation, step_saving,
                                       tiered_step_cost, tuned_viasd_point)

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def test_no_escalation_chance_is_the_power_of_the_batch():
    assert p_no_escalation(0.5, 1) == 0.5
    assert p_no_escalation(0.5, 8) == pytest.approx(1 / 256)
    assert p_no_escalation(0.1, 64) == pytest.approx(0.9**64)
    assert p_no_escalation(0.0, 64) == 1.0
    assert p_no_escalation(1.0, 1) == 0.0
    # larger batches never escalate less
    assert p_no_escalation(0.3, 1) > p_no_escalation(0.3, 8) > p_no_escalation(0.3, 64)


def test_step_cost_is_slim_plus_full_unless_nobody_escalates():
    # memory-bound: one full pass per step whatever B; the tier adds the slim pass and saves the
    # (resumed) full pass only with probability (1-e)**B
    assert tiered_step_cost(0.5, 1, slim_cost=0.6) == pytest.approx(0.6 + 0.5)
    assert step_saving(0.0, 64, slim_cost=0.6) == pytest.approx(0.4)  # nobody ever escalates
    assert step_saving(1.0, 1, slim_cost=0.6) == pytest.approx(-0.6)  # always escalates: pure overhead
    assert step_saving(0.5, 8, slim_cost=0.5, resume_cost=0.5) == pytest.approx(1 - (0.5 + (1 - 0.5**8) * 0.5))


@pytest.mark.parametrize("batch", [1, 8, 64])
def test_break_even_rate_is_where_the_saving_crosses_zero(batch):
    e = break_even_rate(batch, slim_cost=0.5, resume_cost=0.7)
    assert 0.0 < e < 1.0
    assert step_saving(e, batch, 0.5, 0.7) == pytest.approx(0.0, abs=1e-9)
    assert step_saving(e * 0.9, batch, 0.5, 0.7) > 0 > step_saving(min(1.0, e * 1.1), batch, 0.5, 0.7)


def test_break_even_edges():
    assert break_even_rate(8, slim_cost=1.0) == 0.0  # a slim pass as dear as a full one never pays
    assert break_even_rate(8, slim_cost=0.2, resume_cost=0.5) == 1.0  # slim + resume < 1: pays even always escalating


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.5", True])
def test_bad_rates_are_refused(bad):
    with pytest.raises(ConfigError, match="escalation rate"):
        p_no_escalation(bad, 8)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_batches_are_refused(bad):
    with pytest.raises(ConfigError, match="batch size"):
        p_no_escalation(0.5, bad)


def test_bad_costs_are_refused():
    with pytest.raises(ConfigError, match="slim_cost"):
        tiered_step_cost(0.5, 8, slim_cost=-1)


def test_rates_read_from_the_shipped_tune_results():
    data = TunePoints.load(RESULTS / "tune_demo-ee.json")
    points = escalation_points(data, "demo-ee")
    assert points and all(0.0 <= p.rate <= 1.0 for p in points)
    tuned = tuned_viasd_point(data, "demo-ee")
    best = json.loads((RESULTS / "tune_demo-ee.json").read_text())["tuned"]["report"]["best_within_budget"]["lossy-fixed"]["metrics"]
    assert (tuned.escalated_cycles, tuned.cycles) == (best["escalated_cycles"], best["cycles"])
    assert tuned.slim_cost is not None and 0 < tuned.slim_cost < 1


def test_not_a_tune_file_is_refused(tmp_path):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"format": "viasd-adapt/bench-report", "rows": []}))
    with pytest.raises(ConfigError, match=r"bench.json is not a viasd tune --json file \(this is a viasd-adapt/bench-report file\)"):
        main([str(bench)])
    untagged = tmp_path / "old.json"
    untagged.write_text(json.dumps({"rows": []}))
    with pytest.raises(ConfigError, match=r"old.json is not a viasd tune --json file \(it needs 'points' and 'tuned'\)"):
        main([str(untagged)])


def test_cli_prints_the_table(capsys):
    assert main([str(RESULTS / "tune_demo.json")]) == 0
    out = capsys.readouterr().out
    assert "P0 B=64" in out and "tuned VIA-SD point" in out and "break-even" in out
