"""``viasd models build`` prints from the build report it wrote, read as a typed artifact: the
builders' reports (shipped and new) say what they measured, and a report missing what is printed is
refused naming the file and the field. The builders are stood in for by copies of the shipped
reports, so these tests train no model."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from tests.support import REPO_ROOT
from viasd_adapt.cli.main import cli
from viasd_adapt.config.build_report import BuildReport, PairBuildReport

ASSETS = REPO_ROOT / "viasd_adapt" / "assets"


def _fake_builder(report_source, report_class=None):
    """A stand-in for a builder: a pair folder holding a copy of ``report_source`` (as the builder
    writes it: through its report class, when given), returned as the built pair."""
    def build(preset, out_dir=None, seed=0, threads=1, **_):
        folder = out_dir / (preset if isinstance(preset, str) else preset.name)
        folder.mkdir(parents=True)
        data = json.loads(report_source.read_text())
        if report_class is None:
            (folder / "build_report.json").write_text(json.dumps(data))
        else:
            report_class.model_validate(data).save(folder / "build_report.json")
        return folder

    return build


@pytest.mark.parametrize("written_by_the_builder", [True, False], ids=["tagged", "untagged"])
def test_models_build_prints_the_stdlib_pairs_report(monkeypatch, tmp_path, written_by_the_builder):
    from viasd_adapt.training import build as build_module

    shipped = ASSETS / "demo" / "build_report.json"
    report = json.loads(shipped.read_text())
    with monkeypatch.context() as patched:
        patched.setattr(build_module, "build_pair",
                        _fake_builder(shipped, PairBuildReport if written_by_the_builder else None))
        result = CliRunner().invoke(cli, ["models", "build", "--preset", "tiny", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert f"built tiny in {report['build_seconds']:.0f}s" in result.output
    losses = report["heldout_loss"]
    assert f"held-out loss: target {losses['target']:.3f}, draft {losses['draft']:.3f}" in result.output
    assert f"drafter acceptance: {report['drafter_acceptance']['speculative_acceptance_rate']:.1%}" in result.output
    written = json.loads((tmp_path / "tiny" / "build_report.json").read_text())
    assert (written.get("format") == BuildReport.FORMAT) == written_by_the_builder


def test_models_build_prints_the_distilled_drafters_report(monkeypatch, tmp_path):
    from viasd_adapt.training import distill_build

    shipped = ASSETS / "smollm2" / "build_report.json"
    report = json.loads(shipped.read_text())
    with monkeypatch.context() as patched:
        patched.setattr(distill_build, "build_distilled", _fake_builder(shipped))
        result = CliRunner().invoke(cli, ["models", "build", "--preset", "smollm2", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    heldout = report["drafter"]["heldout"]
    assert f"held-out top-1 agreement with the target {heldout['top1_agreement']:.1%}" in result.output
    assert f"EAGLE head: held-out top-1 agreement {report['eagle_head']['heldout_top1_agreement_draft_vocab']:.1%}" \
        in result.output


def test_a_report_without_what_is_printed_is_refused_by_file_and_field(monkeypatch, tmp_path):
    from viasd_adapt.training import build as build_module

    partial = tmp_path / "partial.json"
    data = json.loads((ASSETS / "demo" / "build_report.json").read_text())
    del data["drafter_acceptance"]
    partial.write_text(json.dumps(data))
    with monkeypatch.context() as patched:
        patched.setattr(build_module, "build_pair", _fake_builder(partial))
        result = CliRunner().invoke(cli, ["models", "build", "--preset", "tiny", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert str(tmp_path / "out" / "tiny" / "build_report.json") in result.output
    assert "field 'drafter_acceptance': Field required" in result.output and "Traceback" not in result.output


def test_a_rebuild_recognises_an_earlier_build_by_its_report_tagged_or_not(tmp_path):
    from viasd_adapt.errors import ConfigError
    from viasd_adapt.training.build import check_build_destination

    for tagged in (True, False):
        folder = tmp_path / f"demo-{tagged}"
        folder.mkdir()
        shutil.copy(ASSETS / "demo" / "build_report.json", folder / "build_report.json")
        if tagged:
            BuildReport.load(folder / "build_report.json").save(folder / "build_report.json")
        check_build_destination(folder, "demo")  # an earlier build of the same preset: accepted
        with pytest.raises(ConfigError, match="not an earlier build of the 'tiny' recipe"):
            check_build_destination(folder, "tiny")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "build_report.json").write_text(json.dumps({"preset": {"name": 3}}))
    with pytest.raises(ConfigError, match="not an earlier build"):
        check_build_destination(tmp_path / "broken", "demo")
