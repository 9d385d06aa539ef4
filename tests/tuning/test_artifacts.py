"""Typed, versioned artifacts (viasd_adapt.config.schema): mask.json, tuned.json and the bench report
round-trip, refuse a corrupted field by its name and the file's, refuse an unknown future version,
and every file shipped under viasd_adapt/assets and benchmarks/results still loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import REPO_ROOT
from tests.support.tuned import LENIENT
from viasd_adapt.bench.report import BenchReport, load_bench_report
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


def _tuned(**changes) -> dict:
    point = {"settings": TierSettings(mode="lossy").to_dict(), "mask": "mask.json", "ll_drop": 0.01, "regret": 0.02}
    data = TunedSettings(LENIENT, "lenient", None, {"arch": "x"}, report={"best_within_budget": {"viasd": point}}).to_json()
    data.update(changes)
    return data


# ------------------------------------------------------------------------------------- round trips


def test_tuned_settings_round_trip(tmp_path):
    tuned = TunedSettings.from_json(_tuned())
    path = tuned.save(tmp_path / "tuned.json")
    again = TunedSettings.load(path)
    assert again == tuned and again.to_json() == tuned.to_json()
    assert again.best("viasd").ll_drop == 0.01 and again.best("viasd").settings.mode.value == "lossy"
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


# ------------------------------------------------------------------------------------- refused by name


def _write(tmp_path, name, data) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_a_corrupted_tuned_field_is_refused_with_its_name_and_file(tmp_path):
    data = _tuned()
    data["report"]["best_within_budget"]["viasd"]["ll_drop"] = "small"
    path = _write(tmp_path, "tuned.json", data)
    with pytest.raises(ConfigError, match=rf"{path}: field 'report\.best_within_budget\.viasd\.ll_drop'"):
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
    ("tuned", lambda: _tuned(version=2)),
    ("mask", lambda: MaskArtifact(RoutingMask.from_skipped(8, [1]), 1 / 8).to_json() | {"version": 2}),
    ("bench", lambda: json.loads(shipped("viasd-adapt/bench")[0].read_text()) | {"version": 3}),
])
def test_an_unknown_future_version_is_refused_by_name(tmp_path, kind, data):
    path = _write(tmp_path, f"{kind}.json", data())
    load = {"tuned": TunedSettings.load, "mask": MaskArtifact.load, "bench": load_bench_report}[kind]
    with pytest.raises(ConfigError, match=r"'version' \d is not one this viasd-adapt reads"):
        load(path)


def test_another_kind_of_file_is_refused_by_its_format(tmp_path):
    mask = _write(tmp_path, "mask.json", MaskArtifact(RoutingMask.from_skipped(8, [1]), 1 / 8).to_json())
    with pytest.raises(ConfigError, match="not a viasd-adapt tuned-settings file"):
        TunedSettings.load(mask)
