"""The typed search report: shipped masks still load and round-trip; corrupted fields are refused by name."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from viasd_adapt.errors import ConfigError
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.search.records import EarlyExitRecord, SearchReport

ROOT = Path(__file__).resolve().parents[2]


def is_mask_file(path: Path) -> bool:
    data = json.loads(path.read_text())
    return isinstance(data, dict) and data.get("format") == "viasd-adapt/routing-mask"


SHIPPED = sorted(p for folder in ("viasd_adapt/assets", "benchmarks/results") for p in (ROOT / folder).rglob("*.json")
                 if is_mask_file(p))
SEARCHED = [p for p in SHIPPED if "exit" not in p.name]


def test_the_shipped_masks_are_found():
    assert len(SEARCHED) >= 4 and len(SHIPPED) > len(SEARCHED)


@pytest.mark.parametrize("path", SEARCHED, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_shipped_search_report_loads_typed_and_round_trips(path):
    artifact = MaskArtifact.load(path)
    report = SearchReport.of_artifact(artifact, f"mask file {path}")
    assert report.search.alpha1 == artifact.search["alpha1"] and report.report.tau == artifact.report["tau"]
    assert report.report.evaluations == len(report.report.history)
    search, measured = report.sections()
    assert search == artifact.search
    # reports written since they were versioned carry "version" on disk too; older ones do not
    on_disk = dict(artifact.report)
    assert on_disk.pop("version", SearchReport.VERSION) == SearchReport.VERSION
    assert measured.pop("version") == SearchReport.VERSION and measured == on_disk
    again = SearchReport.from_sections(search, {**measured, "version": 1})
    assert again == report


@pytest.mark.parametrize("path", [p for p in SHIPPED if p not in SEARCHED], ids=lambda p: p.name)
def test_an_early_exit_mask_has_no_search_report(path):
    artifact = MaskArtifact.load(path)
    assert SearchReport.of_artifact(artifact) is None
    assert EarlyExitRecord.model_validate(artifact.search).exit_layer == RoutingMask(artifact.mask.keep).first_skipped


@pytest.fixture()
def shipped():
    artifact = MaskArtifact.load(SEARCHED[0])
    return copy.deepcopy(artifact.search), copy.deepcopy(artifact.report)


@pytest.mark.parametrize("section, key, value, field", [
    ("search", "alpha1", "abc", "search.alpha1"),
    ("search", "seed", "0", "search.seed"),
    ("search", "steps", None, "search.steps"),
    ("report", "tau", 1.5, "report.tau"),
    ("report", "history", [[1, "random"]], "report.history.0"),
    ("report", "stop_reason", 3, "report.stop_reason"),
])
def test_a_corrupted_field_is_refused_by_name(shipped, section, key, value, field):
    search, report = shipped
    (search if section == "search" else report)[key] = value
    with pytest.raises(ConfigError, match=rf"m\.json: field '{field}"):
        SearchReport.from_sections(search, report, "m.json")


def test_a_missing_field_and_a_newer_version_are_refused_by_name(shipped):
    search, report = shipped
    del search["alpha2"]
    with pytest.raises(ConfigError, match="field 'search.alpha2': Field required"):
        SearchReport.from_sections(search, report, "m.json")
    with pytest.raises(ConfigError, match=r"'report.version' 99 .*upgrade"):
        SearchReport.from_sections(shipped[0] | {"alpha2": 0.3}, {**report, "version": 99}, "m.json")


def test_a_file_written_by_a_newer_revision_keeps_its_extra_fields(shipped):
    search, report = shipped
    report["new_measurement"] = {"x": 1}
    _, written = SearchReport.from_sections(search, report).sections()
    assert written["new_measurement"] == {"x": 1}
