"""The typed sections of a mask artifact: shipped masks still load and round-trip; corrupted fields are
refused by name, naming the file."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from viasd_adapt.config.fingerprint import ModelFingerprint
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.config.search_record import SEARCH_REPORT_VERSION, EarlyExitRecord, SearchMeasurements, SearchRecord
from viasd_adapt.errors import ConfigError

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
    on_disk = json.loads(path.read_text())
    artifact = MaskArtifact.load(path)
    assert artifact.searched and isinstance(artifact.search, SearchRecord)
    assert isinstance(artifact.report, SearchMeasurements) and isinstance(artifact.fingerprint, ModelFingerprint)
    assert artifact.search.alpha1 == on_disk["search"]["alpha1"] and artifact.report.tau == on_disk["report"]["tau"]
    assert artifact.report.evaluations == len(artifact.report.history)
    assert artifact.fingerprint.num_layers == artifact.mask.num_layers == on_disk["fingerprint"]["num_layers"]
    assert artifact.fingerprint.as_dict() == on_disk["fingerprint"]
    # reports written since they were versioned carry "version" on disk too; older ones do not, and
    # are written back as they were read
    assert on_disk["report"].get("version", 1) == artifact.report.version == SEARCH_REPORT_VERSION
    written = artifact.to_json()
    assert written == on_disk
    assert MaskArtifact.from_json(written) == artifact


@pytest.mark.parametrize("path", [p for p in SHIPPED if p not in SEARCHED], ids=lambda p: p.name)
def test_an_early_exit_mask_has_no_search_report(path):
    artifact = MaskArtifact.load(path)
    assert not artifact.searched and artifact.report is None
    assert isinstance(artifact.search, EarlyExitRecord)
    assert artifact.search.exit_layer == RoutingMask(artifact.mask.keep).first_skipped
    assert artifact.to_json() == json.loads(path.read_text())


def test_a_mask_built_by_hand_has_no_sections_and_writes_empty_objects():
    artifact = MaskArtifact(RoutingMask.from_skipped(6, [1, 4]))
    assert artifact.search is None and artifact.report is None and artifact.fingerprint.empty
    written = artifact.to_json()
    assert (written["search"], written["report"], written["fingerprint"]) == ({}, {}, {})
    assert MaskArtifact.from_json(written) == artifact


@pytest.fixture()
def shipped():
    return json.loads(SEARCHED[0].read_text())


@pytest.mark.parametrize("section, key, value, field", [
    ("search", "alpha1", "abc", "search.alpha1"),
    ("search", "seed", "0", "search.seed"),
    ("search", "steps", None, "search.steps"),
    ("report", "tau", 1.5, "report.tau"),
    ("report", "history", [[1, "random"]], "report.history.0"),
    ("report", "stop_reason", 3, "report.stop_reason"),
    ("fingerprint", "num_layers", "16", "fingerprint.num_layers"),
])
def test_a_corrupted_field_is_refused_by_name(shipped, section, key, value, field):
    shipped[section][key] = value
    with pytest.raises(ConfigError, match=rf"m\.json: field '{field}"):
        MaskArtifact.from_json(shipped, "m.json")


def test_a_corrupted_sketch_value_is_refused_by_name(shipped):
    tensors = shipped["fingerprint"]["weights_sketch"]["tensors"]
    component = next(iter(tensors))
    tensors[component]["values"][0] = "x"
    with pytest.raises(ConfigError, match=rf"field 'fingerprint.weights_sketch.tensors.{component}.values.0'"):
        MaskArtifact.from_json(shipped, "m.json")


@pytest.mark.parametrize("section", ["search", "report", "fingerprint"])
def test_a_section_that_is_not_an_object_is_refused_by_name(shipped, section):
    shipped[section] = [1, 2]
    with pytest.raises(ConfigError, match=rf"m\.json: '{section}' must be an object, got list"):
        MaskArtifact.from_json(shipped, "m.json")


def test_a_missing_field_and_a_newer_version_are_refused_by_name(shipped):
    broken = copy.deepcopy(shipped)
    del broken["search"]["alpha2"]
    with pytest.raises(ConfigError, match="field 'search.alpha2': Field required"):
        MaskArtifact.from_json(broken, "m.json")
    shipped["report"]["version"] = 99
    shipped["report"]["tau"] = "changed meaning"  # refused for its version, not for this field
    with pytest.raises(ConfigError, match=r"m\.json: 'report.version' 99 .*upgrade") as refused:
        MaskArtifact.from_json(shipped, "m.json")
    assert "tau" not in str(refused.value)


def test_a_file_written_by_a_newer_revision_keeps_its_extra_fields(shipped):
    shipped["report"]["new_measurement"] = {"x": 1}
    shipped["search"]["new_setting"] = [1, 2]
    shipped["fingerprint"]["new_size"] = 7
    written = MaskArtifact.from_json(shipped).to_json()
    assert written["report"]["new_measurement"] == {"x": 1} and written["search"]["new_setting"] == [1, 2]
    assert written["fingerprint"]["new_size"] == 7 and written == shipped
