"""One vocabulary for the modes: tuned.json (version 2), tune files and reports name the tuner's
families as the bench's rows and ``--mode`` do. Files of version 1 still read, under the new names,
with one notice naming the file and the old spelling; version 1's ``lossless`` (the fixed tier) and
version 2's (the adaptive tier) are told apart by the file's version. Typed provenance: the code
asks a source's kind, people read its words."""

from __future__ import annotations

import json
import warnings

import pytest

from tests.support import REPO_ROOT
from viasd_adapt.config.provenance import Source, SourceKind
from viasd_adapt.config.resolve import DEFAULT, RunSpec, resolve_settings
from viasd_adapt.config.tune_points import TunePoints
from viasd_adapt.config.tuned import KNOWN_CHOICES, VERSION, OldTunedNamesWarning, TunedSettings
from viasd_adapt.core.settings import TierSettings, mode_label
from viasd_adapt.tuning.grid import FAMILIES

SHIPPED_TUNED = sorted((REPO_ROOT / "viasd_adapt" / "assets").glob("*/tuned.json")) + sorted(
    (REPO_ROOT / "benchmarks" / "results").glob("tuned_*.json"))
SHIPPED_TUNE_POINTS = sorted((REPO_ROOT / "benchmarks" / "results").glob("tune_*.json"))
FIXED_LOSSLESS = TierSettings(mode="lossless", adaptive=False)


def _old_file(tmp_path, version: int = 1):
    """A tuned.json as version 1 wrote it: its fixed lossless point ``lossless``, plain SD ``sd``."""
    point = {"family": "lossless", "settings": FIXED_LOSSLESS.to_dict(), "mask": "mask.json", "ll_drop": 0.0}
    data = TunedSettings(FIXED_LOSSLESS, "lossless-fixed", None, report={"best_within_budget": {
        "lossless": point, "sd": {"family": "sd", "settings": TierSettings(mode="none").to_dict()}}}).to_json()
    data.update(version=version, choice="lossless", measured=point)
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(data))
    return path


def test_every_name_is_a_row_name():
    assert set(KNOWN_CHOICES) == set(FAMILIES) | {"ar"}
    names = {mode_label(TierSettings(mode=mode, adaptive=adaptive)) for mode in ("none", "lenient", "lossless", "lossy")
             for adaptive in (True, False)}
    assert names == set(FAMILIES)  # a point's family is its settings' row name, as the bench names rows


def test_a_version_1_file_reads_under_the_new_names_with_one_notice_naming_it(tmp_path):
    path = _old_file(tmp_path)
    with pytest.warns(OldTunedNamesWarning) as record:
        tuned = TunedSettings.load(path)
    assert len(record) == 1
    message = str(record[0].message)
    assert str(path) in message and "lossless (now lossless-fixed)" in message and "sd (now none)" in message
    assert "0.4.0" in message
    # version 1's "lossless" was the tier on every cycle
    assert tuned.choice == "lossless-fixed" and tuned.measured["family"] == "lossless-fixed"
    assert set(tuned.report.best_within_budget) == {"lossless-fixed", "none"} and tuned.best("lossless") is None
    saved = TunedSettings.load(tuned.save(tmp_path / "again.json"))  # written again: version 2, no notice
    assert json.loads((tmp_path / "again.json").read_text())["version"] == VERSION == 2
    assert saved.choice == "lossless-fixed"


def test_in_a_version_2_file_lossless_is_the_adaptive_tier_and_reads_without_a_notice(tmp_path):
    path = _old_file(tmp_path, version=2)
    data = json.loads(path.read_text())
    data["report"]["best_within_budget"] = {"lossless": data["measured"]}
    path.write_text(json.dumps(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tuned = TunedSettings.load(path)
    assert tuned.choice == "lossless" and tuned.best("lossless") is not None  # control: the version decides


def test_an_old_spelling_in_a_version_2_file_still_reads_with_the_notice(tmp_path):
    path = _old_file(tmp_path, version=2)
    data = json.loads(path.read_text())
    data["choice"], data["report"]["best_within_budget"] = "viasd", {}
    data["measured"]["family"] = "viasd"
    path.write_text(json.dumps(data))
    with pytest.warns(OldTunedNamesWarning, match=r"viasd \(now lossy-fixed\)"):
        assert TunedSettings.load(path).choice == "lossy-fixed"


@pytest.mark.parametrize("path", SHIPPED_TUNED + SHIPPED_TUNE_POINTS, ids=lambda p: p.name)
def test_shipped_files_are_written_in_the_one_vocabulary(path):
    data = json.loads(path.read_text())
    tuned = data["tuned"] if "points" in data else data
    assert tuned["version"] == 2 and tuned["choice"] in KNOWN_CHOICES
    assert set(tuned["report"]["best_within_budget"]) <= set(FAMILIES)
    assert all(point["family"] in FAMILIES for point in data.get("points", []))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no notice for a shipped file
        (TunePoints if "points" in data else TunedSettings).load(path)


def test_a_version_1_tune_file_reads_its_points_under_the_new_names_with_one_notice(tmp_path):
    tuned = json.loads(_old_file(tmp_path).read_text())
    point = {"family": "viasd", "settings": TierSettings(mode="lossy", adaptive=False).to_dict(), "mask": "mask.json",
             "full_equivalent": 0.5, "ll_drop": 0.0, "overrule": 0.0, "tokens": 8}
    path = tmp_path / "points.json"
    path.write_text(json.dumps({"points": [point, {**point, "family": "lossless-adaptive"}], "tuned": tuned}))
    with pytest.warns(OldTunedNamesWarning) as record:
        points = TunePoints.load(path)
    assert len(record) == 1 and str(path) in str(record[0].message)
    assert [p.family for p in points.points] == ["lossy-fixed", "lossless"] and points.tuned.choice == "lossless-fixed"


def test_sources_are_typed_and_print_as_before(tuned_pair):
    spec = resolve_settings(tuned_pair / "mask.json", preset="conservative", flags={"gamma": 3})
    kinds = {name: source.kind for name, source in spec.sources.items()}
    assert kinds["gamma"] is SourceKind.FLAG and kinds["alpha1"] is SourceKind.PRESET and kinds["mode"] is SourceKind.TUNED
    assert str(spec.sources["gamma"]) == "flag --gamma" and str(spec.sources["alpha1"]) == "preset conservative"
    assert any("flag --gamma" in line for line in spec.explain())
    untuned = spec.without_tuned("measured on another device")
    assert untuned.sources["mode"] == DEFAULT and untuned.sources["gamma"].kind is SourceKind.FLAG
    # the kind decides, not the words: a flag whose words look like tuned.json's stays a flag
    lookalike = RunSpec(spec.settings, {**spec.sources, "lenience": Source(SourceKind.FLAG, "tuned.json (a flag)")})
    assert lookalike.without_tuned("x").sources["lenience"].kind is SourceKind.FLAG
