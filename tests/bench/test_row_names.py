"""Bench rows say what runs: ``lossless`` and ``lossy`` are what a default run costs (the adaptive
tier), ``lossless-fixed`` and ``lossy-fixed`` the tier on every cycle. A report written before
(version 2: ``lossless`` fixed, ``lossless-adaptive`` adaptive) reads under today's names."""

from __future__ import annotations

import json

from viasd_adapt.bench.report import BENCH_FORMAT, BenchReport, load_bench_report
from viasd_adapt.bench.run import RunPlan
from viasd_adapt.bench.verdict import CANDIDATE_MODES, EXACT_MODES


def _row(framework: str, mode: str, cost: float) -> dict:
    return {"framework": framework, "mode": mode, "full_equivalent_per_token": cost}


def test_a_plan_names_the_default_rows_bare_and_the_fixed_tier_by_its_suffix():
    plan = RunPlan(frameworks=("hf",), modes=("none", "lossless", "lossy"))
    assert plan.row_modes == ["none", "lossless", "lossless-fixed", "lossy", "lossy-fixed"]
    assert RunPlan(frameworks=("hf",), modes=("none", "lossless"), fixed_twins=False).row_modes == ["none", "lossless"]
    # the older names still ask for the adaptive rows
    assert RunPlan(frameworks=("hf",), modes=("none", "lossless-adaptive")).row_modes == ["none", "lossless", "lossless-fixed"]
    assert "lossless-fixed" in CANDIDATE_MODES and "lossless" in EXACT_MODES and "lossless-fixed" in EXACT_MODES


def test_an_old_report_reads_under_todays_names(tmp_path):
    old = {"format": BENCH_FORMAT, "version": 2,
           "rows": [_row("hf", "none", 0.5), _row("hf", "lossless", 0.6), _row("hf", "lossless-adaptive", 0.51),
                    _row("hf", "lossy", 0.4), _row("hf", "lossy-adaptive", 0.41), _row("hf", "audit", 0.7)],
           "groups": {"qa": [_row("hf", "lossy", 0.4), _row("hf", "lossy-adaptive", 0.41)]}}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    report = load_bench_report(path)
    named = {row.mode: row.full_equivalent_per_token for row in report.rows}
    assert named == {"none": 0.5, "lossless-fixed": 0.6, "lossless": 0.51, "lossy-fixed": 0.4, "lossy": 0.41, "audit": 0.7}
    assert [row.mode for row in report.groups["qa"]] == ["lossy-fixed", "lossy"]
    # the control: a report of today's version is read as written (its bare rows are the adaptive ones)
    new = BenchReport.from_json({**old, "version": BenchReport.VERSION})
    assert [row.mode for row in new.rows] == ["none", "lossless", "lossless-adaptive", "lossy", "lossy-adaptive", "audit"]


def test_tune_reports_name_its_families_as_the_bench_names_its_rows():
    from viasd_adapt.tuning.tune import FAMILIES, family_label

    assert [family_label(f) for f in FAMILIES] == ["none", "lossless-fixed", "lenient", "lossy-fixed", "lossless", "lossy"]
    # one vocabulary: tuned.json's families are the names the reports, the bench rows and --mode use
    assert FAMILIES == ("none", "lossless-fixed", "lenient", "lossy-fixed", "lossless", "lossy")
