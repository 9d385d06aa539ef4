"""Typed, versioned artifacts (viasd_adapt.config.schema): mask.json, tuned.json, the bench report, the
``viasd tune --json`` points, build reports and cost files round-trip, refuse a corrupted field by
its name and the file's, refuse an unknown future version, and every file shipped under
viasd_adapt/assets and benchmarks/results still loads (those written before their format tag too)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import REPO_ROOT
from tests.support.tuned import LENIENT
from viasd_adapt.bench.report import BenchReport, load_bench_report
from viasd_adapt.config.build_report import BuildReport, DistilledBuildReport, PairBuildReport
from viasd_adapt.config.costs import CostFile
from viasd_adapt.config.tune_points import TunePoints
from viasd_adapt.errors import ConfigError
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.config.tuned import MEASURED_ON_DEFAULT, TunedSettings
from viasd_adapt.tuning.tune import load_result

SHIPPED = sorted([*(REPO_ROOT / "viasd_adapt" / "assets").rglob("*.json"), *(REPO_ROOT / "benchmarks" / "results").rglob("*.json")])


def _format(path: Path) -> str | None:
    data = json.loads(path.read_text())
    return data.get("format") if isinstance(data, dict) else None


def shipped(kind: str) -> list[Path]:
    return [p for p in SHIPPED if _format(p) == kind]


TUNE_JSON = [p for p in SHIPPED if p.name.startswith("tune_")]
BUILD_REPORTS = [p for p in SHIPPED if p.name == "build_report.json"]
ASSETS = REPO_ROOT / "viasd_adapt" / "assets"


def _tuned(**changes) -> dict:
    point = {"settings": TierSettings(mode="lossy").to_dict(), "mask": "mask.json", "ll_drop": 0.01, "regret": 0.02}
    data = TunedSettings(LENIENT, "lenient", None, {"arch": "x"}, report={"best_within_budget": {"lossy-fixed": point}}).to_json()
    data.update(changes)
    return data


# ------------------------------------------------------------------------------------- round trips


def test_tuned_settings_round_trip(tmp_path):
    tuned = TunedSettings.from_json(_tuned())
    path = tuned.save(tmp_path / "tuned.json")
    again = TunedSettings.load(path)
    assert again == tuned and again.to_json() == tuned.to_json()
    assert again.best("lossy-fixed").ll_drop == 0.01 and again.best("lossy-fixed").settings.mode.value == "lossy"
    assert again.best("lenient") is None and again.measured_on == MEASURED_ON_DEFAULT


def test_measured_on_is_recorded_and_an_old_file_without_it_still_loads(tmp_path):
    written = TunedSettings(LENIENT, "lenient", None, {}, measured_on="hf").to_json()
    assert written["measured_on"] == "hf" and TunedSettings.from_json(written).measured_on == "hf"
    old = _tuned()
    del old["measured_on"]
    assert TunedSettings.from_json(old).measured_on == "engine"  # what viasd tune always measured on


def test_mask_artifact_round_trip():
    search = {"steps": 4, "seed": 0, "patience": 0, "ratio": 3 / 8, "alpha1": 0.5, "alpha2": 0.3, "beta": 1.0,
              "objective": "margin", "strategy": "dimr", "s": 1}
    report = {"tau": 8, "calibration_windows": 2, "num_layers": 8, "skipped_count": 3, "evaluations": 4,
              "stop_reason": "steps", "calibration_seconds": 0.5, "search_seconds": 1.0, "s": 1}
    artifact = MaskArtifact(RoutingMask.from_skipped(8, [1, 3, 5]), 3 / 8, score=1.5, delta=-2.0,
                            search=search, fingerprint={"arch": "x"}, report=report)
    data = artifact.to_json()
    assert data["format"] == MaskArtifact.FORMAT and data["version"] == MaskArtifact.VERSION
    assert MaskArtifact.from_json(data) == artifact and MaskArtifact.from_json(data).to_json() == data


@pytest.mark.parametrize("path", shipped("viasd-adapt/bench"), ids=lambda p: p.name)
def test_shipped_bench_reports_load_and_round_trip(path):
    report = load_bench_report(path)
    assert report.rows and all(row.framework for row in report.rows)
    assert BenchReport.model_validate(report.to_json()).to_json() == report.to_json()
    original = json.loads(path.read_text())
    if original.get("version", 1) < 3:  # written before the default rows took the bare names: read under today's
        from viasd_adapt.core.settings import renamed_row

        def renamed(rows):
            return [{**row, "mode": renamed_row(row["mode"])} for row in rows]

        original = {**original, "version": BenchReport.VERSION, "rows": renamed(original["rows"])}
        projection = original.get("run", {}).get("projection")
        if isinstance(projection, dict) and "rows" in projection:
            original["run"] = {**original["run"], "projection": {**projection, "rows": renamed(projection["rows"])}}
        if "groups" in original:
            original["groups"] = {name: renamed(rows) for name, rows in original["groups"].items()}
    written = report.to_json()
    assert {k: v for k, v in written.items() if k in original} == original  # only absent defaults are added


# ------------------------------------------------------------------------------------- old files load


@pytest.mark.parametrize("path", shipped("viasd-adapt/tuned-settings"), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_tuned_files_load_unchanged(path):
    tuned = TunedSettings.load(path)
    original = json.loads(path.read_text())
    written = tuned.to_json()
    assert {k: v for k, v in written.items() if k in original} == original and tuned.measured_on == "engine"


@pytest.mark.parametrize("path", shipped("viasd-adapt/routing-mask"), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_masks_load_unchanged(path):
    assert MaskArtifact.load(path).to_json() == json.loads(path.read_text())


@pytest.mark.parametrize("path", [p for p in SHIPPED if p.name.startswith("tune_")], ids=lambda p: p.name)
def test_shipped_tune_json_files_load(path):
    result = load_result(json.loads(path.read_text()), source=str(path))
    assert result.points and result.chosen in result.points


def test_every_kind_has_shipped_files():
    assert shipped("viasd-adapt/bench") and shipped("viasd-adapt/tuned-settings") and shipped("viasd-adapt/routing-mask")
    assert TUNE_JSON and len(BUILD_REPORTS) == 3 and len(shipped("viasd-adapt/forward-costs")) == 2


def _only_defaults_added(written: dict, original: dict) -> bool:
    return {key: value for key, value in written.items() if key in original} == original


@pytest.mark.parametrize("path", TUNE_JSON, ids=lambda p: p.name)
def test_shipped_tune_json_files_load_as_typed_points(path):
    original = json.loads(path.read_text())
    # tagged, or written before the tag existed and read as version 1
    assert original.get("format", TunePoints.FORMAT) == TunePoints.FORMAT
    sweep = TunePoints.load(path)
    written = sweep.to_json()
    assert written["format"] == TunePoints.FORMAT and written["version"] == TunePoints.VERSION
    assert len(written["points"]) == len(original["points"])
    assert all(_only_defaults_added(w, o) for w, o in zip(written["points"], original["points"]))
    assert _only_defaults_added(written["tuned"], original["tuned"]) and sweep.tuned == TunedSettings.from_json(original["tuned"])
    result = load_result(written, source=str(path))  # what viasd tune --reuse judges again
    for point, raw in zip(result.points, original["points"]):
        # a fixed-family tier point of a file older than the adaptive tier gains the "adaptive": false it ran with
        added = {"adaptive": False} if "adaptive" not in raw["settings"] and not point.settings.adaptive else {}
        assert point.to_dict()["settings"] == raw["settings"] | added
        assert point.settings.adapts == (point.family in ("lossless", "lossy"))


def test_a_fixed_point_of_a_file_older_than_the_adaptive_tier_reads_as_fixed():
    from viasd_adapt.tuning.choose import Point, settings_label

    def point(family: str, settings: dict) -> Point:
        return Point.from_dict({"family": family, "settings": settings, "mask": "m.json", "full_equivalent": 0.5,
                                "ll_drop": 0.0, "overrule": 0.0, "tokens": 10})

    old_lossless = point("lossless-fixed", {"mode": "lossless"})
    assert not old_lossless.settings.adaptive and settings_label(old_lossless.settings) == "lossless"
    old_lossy = point("lossy-fixed", {"mode": "lossy", "alpha1": 0.5})
    assert not old_lossy.settings.adapts and "adaptive" not in settings_label(old_lossy.settings)
    assert point("lossless", {"mode": "lossless"}).settings.adapts  # the twin: on is the default it was written with
    assert "adaptive" not in point("none", {"mode": "none"}).settings.to_dict()  # no mode the flag applies to: unchanged


@pytest.mark.parametrize("path", BUILD_REPORTS, ids=lambda p: p.parent.name)
def test_shipped_build_reports_load_unchanged(path):
    original = json.loads(path.read_text())
    written = BuildReport.load(path).to_json()
    assert "format" not in original and _only_defaults_added(written, original)
    assert set(written) - set(original) == {"format", "version"}


def test_each_builders_report_is_read_with_the_sections_it_prints():
    demo, smollm2 = ASSETS / "demo" / "build_report.json", ASSETS / "smollm2" / "build_report.json"
    pair = PairBuildReport.load(demo)
    raw = json.loads(demo.read_text())
    assert pair.heldout_loss.target == raw["heldout_loss"]["target"] and pair.preset.name == "demo"
    assert pair.drafter_acceptance.speculative_acceptance_rate == raw["drafter_acceptance"]["speculative_acceptance_rate"]
    distilled = DistilledBuildReport.load(smollm2)
    assert distilled.drafter.heldout.top1_agreement == json.loads(smollm2.read_text())["drafter"]["heldout"]["top1_agreement"]
    assert distilled.eagle_head is not None and distilled.preset.name == "smollm2"
    with pytest.raises(ConfigError, match=rf"build report {smollm2}: field 'heldout_loss': Field required"):
        PairBuildReport.load(smollm2)  # a distilled drafter's report is not a stdlib pair's


@pytest.mark.parametrize("path", shipped("viasd-adapt/forward-costs"), ids=lambda p: p.name)
def test_shipped_cost_files_load_unchanged(path):
    costs = CostFile.load(path)
    assert costs.to_json() == json.loads(path.read_text()) and costs.block_over_single > 1.0


def test_a_corrupted_point_build_report_or_cost_field_is_refused_with_its_name_and_file(tmp_path):
    sweep = json.loads(TUNE_JSON[0].read_text())
    sweep["points"][1]["ll_drop"] = "small"
    path = _write(tmp_path, "points.json", sweep)
    with pytest.raises(ConfigError, match=rf"{path}: field 'points\.1\.ll_drop'"):
        TunePoints.load(path)
    sweep = json.loads(TUNE_JSON[0].read_text())
    sweep["tuned"]["measured_on"] = "gpu"
    with pytest.raises(ConfigError, match=rf"{tmp_path / 'points.json'}: 'tuned': .*'measured_on' must name the framework"):
        TunePoints.load(_write(tmp_path, "points.json", sweep))
    report = json.loads((ASSETS / "demo" / "build_report.json").read_text())
    report["heldout_loss"]["target"] = "low"
    path = _write(tmp_path, "build_report.json", report)
    with pytest.raises(ConfigError, match=rf"build report {path}: field 'heldout_loss\.target'"):
        PairBuildReport.load(path)
    costs = json.loads((ASSETS / "costs" / "h200-llama2-7b.json").read_text()) | {"slim_ratio": "half"}
    path = _write(tmp_path, "costs.json", costs)
    with pytest.raises(ConfigError, match=rf"cost file {path}: 'slim_ratio' must be a positive number, got 'half'"):
        CostFile.load(path)


def test_a_cost_file_whose_derived_ratios_overflow_is_refused_by_name(tmp_path):
    costs = json.loads((ASSETS / "costs" / "h200-llama2-7b.json").read_text())
    path = _write(tmp_path, "costs.json", costs | {"block_over_single": 1e-310})  # positive, its inverse is inf
    with pytest.raises(ConfigError, match=rf"cost file {path}: 'block_over_single' 1e-310 makes a 1-token pass .* = inf"):
        CostFile.load(path)
    path = _write(tmp_path, "costs.json", costs | {"block_over_single": 1e-300, "draft_over_single": 1e10})
    with pytest.raises(ConfigError, match=r"'draft_over_single' 10000000000.0 / 'block_over_single' 1e-300 = inf"):
        CostFile.load(path)
    assert CostFile.load(_write(tmp_path, "costs.json", costs | {"block_over_single": 1e-300})).block_over_single == 1e-300


def test_an_old_tune_json_or_build_report_is_read_as_version_one_but_another_kind_is_refused(tmp_path):
    mask = _write(tmp_path, "mask.json", MaskArtifact(RoutingMask.from_skipped(8, [1]), 1 / 8).to_json())
    with pytest.raises(ConfigError, match=r"is not a viasd tune --json file \(this is a viasd-adapt/routing-mask file\)"):
        TunePoints.load(mask)
    with pytest.raises(ConfigError, match=r"is not a viasd tune --json file \(it needs 'points' and 'tuned'\)"):
        TunePoints.load(_write(tmp_path, "other.json", {"rows": []}))
    with pytest.raises(ConfigError, match="not a viasd-adapt build report"):
        BuildReport.load(mask)
    assert BuildReport.load(_write(tmp_path, "report.json", {"preset": {"name": "tiny"}})).preset.name == "tiny"


def test_tuned_json_checks_measured_on_and_reads_an_unstated_setting_as_the_default(tmp_path):
    with pytest.raises(ConfigError, match=r"tuned\.json: 'measured_on' must name the framework .* got 'the moon'"):
        TunedSettings.load(_write(tmp_path, "tuned.json", _tuned(measured_on="the moon")))
    for framework in ("engine", "hf", "pearl", "eagle"):
        assert TunedSettings.from_json(_tuned(measured_on=framework)).measured_on == framework
    partial = TunedSettings.load(_write(tmp_path, "tuned.json", _tuned(settings={"mode": "lenient"})))
    assert partial.settings.lenience == TierSettings().lenience == 0.5  # the one definition (config.tuned's docstring)
    assert partial.stated_settings == {"mode": "lenient"}
    assert TunedSettings.from_json(_tuned()).stated_settings == LENIENT.to_dict()  # a tuner's file states them all


def test_the_frameworks_a_setting_can_be_measured_on_are_the_registrys_tiered_ones():
    """config/ reads tuned.json without loading framework code, so it names the registry's
    capabilities it needs; here they are held to the registry's own declarations."""
    from viasd_adapt.config.tuned import HEAD_DRAFTING_FRAMEWORKS, TIERED_FRAMEWORKS
    from viasd_adapt.frameworks.registry import FRAMEWORKS

    assert sorted(TIERED_FRAMEWORKS) == sorted(name for name, framework in FRAMEWORKS.items() if framework.has_tier)
    assert sorted(HEAD_DRAFTING_FRAMEWORKS) == sorted(
        name for name, framework in FRAMEWORKS.items() if framework.has_tier and framework.drafts_with_head)


def test_the_config_room_imports_without_torch():
    import subprocess
    import sys

    modules = ["tuned", "tune_points", "build_report", "costs", "resolve", "mask", "pair_file"]
    code = (f"import sys; import {', '.join('viasd_adapt.config.' + m for m in modules)}; "
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))[:3]")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO_ROOT)})
    assert done.returncode == 0, done.stderr


# ------------------------------------------------------------------------------------- refused by name


def _write(tmp_path, name, data) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_a_corrupted_tuned_field_is_refused_with_its_name_and_file(tmp_path):
    data = _tuned()
    data["report"]["best_within_budget"]["lossy-fixed"]["ll_drop"] = "small"
    path = _write(tmp_path, "tuned.json", data)
    with pytest.raises(ConfigError, match=rf"{path}: field 'report\.best_within_budget\.lossy-fixed\.ll_drop'"):
        TunedSettings.load(path)
    data = _tuned()
    data["settings"]["alpha1"] = 2.0
    with pytest.raises(ConfigError, match=r"field 'settings': .*alpha1"):
        TunedSettings.load(_write(tmp_path, "tuned.json", data))


def test_a_corrupted_bench_row_is_refused_with_its_name_and_file(tmp_path):
    data = json.loads(shipped("viasd-adapt/bench")[0].read_text())
    data["rows"][1]["full_equivalent_per_token"] = "fast"
    path = _write(tmp_path, "bench.json", data)
    with pytest.raises(ConfigError, match=rf"{path}: field 'rows\.1\.full_equivalent_per_token'"):
        load_bench_report(path)


def test_a_corrupted_mask_field_is_refused_with_its_name(tmp_path):
    data = MaskArtifact(RoutingMask.from_skipped(8, [1, 3, 5]), 3 / 8).to_json()
    data["delta"] = "negative"
    with pytest.raises(ConfigError, match=r"mask file .*: 'delta' must be a number"):
        MaskArtifact.load(_write(tmp_path, "mask.json", data))
    del data["mask"]
    with pytest.raises(ConfigError, match=r"field 'mask': Field required"):
        MaskArtifact.from_json(data)


@pytest.mark.parametrize("kind, data", [
    ("tuned", lambda: _tuned(version=3)),
    ("mask", lambda: MaskArtifact(RoutingMask.from_skipped(8, [1]), 1 / 8).to_json() | {"version": 2}),
    ("bench", lambda: json.loads(shipped("viasd-adapt/bench")[0].read_text()) | {"version": 4}),
    ("tune", lambda: json.loads(TUNE_JSON[0].read_text()) | {"format": TunePoints.FORMAT, "version": 3}),
    ("build", lambda: json.loads(BUILD_REPORTS[0].read_text()) | {"version": 2}),
    ("costs", lambda: json.loads(shipped("viasd-adapt/forward-costs")[0].read_text()) | {"version": 2}),
])
def test_an_unknown_future_version_is_refused_by_name(tmp_path, kind, data):
    path = _write(tmp_path, f"{kind}.json", data())
    load = {"tuned": TunedSettings.load, "mask": MaskArtifact.load, "bench": load_bench_report, "tune": TunePoints.load,
            "build": BuildReport.load, "costs": CostFile.load}[kind]
    with pytest.raises(ConfigError, match=r"'version' \d is not one this viasd-adapt reads"):
        load(path)


def test_another_kind_of_file_is_refused_by_its_format(tmp_path):
    mask = _write(tmp_path, "mask.json", MaskArtifact(RoutingMask.from_skipped(8, [1]), 1 / 8).to_json())
    with pytest.raises(ConfigError, match="not a viasd-adapt tuned-settings file"):
        TunedSettings.load(mask)
