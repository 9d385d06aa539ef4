"""``viasd models build`` never deletes what is at its output directory, and writes normal permissions.

Before: an existing ``<out>/<preset>/`` was ``rmtree``'d (a searched mask.json, tuned.json,
eagle_head/ and the user's files with it) and the new directory was left mode 0700.
These tests exercise the placement step on real directories; no training is needed.
"""

from __future__ import annotations

import json
import os
import stat

import pytest
from click.testing import CliRunner

from viasd_adapt.cli.main import cli
from viasd_adapt.errors import ConfigError
from viasd_adapt.training.build import BUILD_ENTRIES, build_pair, check_build_destination, install_build


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fake_build(directory, preset="tiny", marker="new"):
    """A directory shaped like a finished build (content is irrelevant to placement)."""
    directory.mkdir()
    for name in ("tokenizer", "target", "draft"):
        (directory / name).mkdir()
        (directory / name / "config.json").write_text(marker)
    (directory / "build_report.json").write_text(json.dumps({"preset": {"name": preset}, "marker": marker}))
    return directory


def test_a_foreign_directory_is_refused_and_untouched(tmp_path):
    pair_dir = tmp_path / "tiny"
    pair_dir.mkdir()
    (pair_dir / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not an earlier build of the 'tiny' recipe.*nothing was deleted"):
        check_build_destination(pair_dir, "tiny")
    _fake_build(pair_dir.parent / "other", preset="demo")
    with pytest.raises(ConfigError, match="not an earlier build"):
        check_build_destination(pair_dir.parent / "other", "tiny")  # a build of another preset
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        check_build_destination(tmp_path / "afile", "tiny")
    assert (pair_dir / "notes.txt").read_text() == "mine"
    check_build_destination(tmp_path / "missing", "tiny")
    (tmp_path / "empty").mkdir()
    check_build_destination(tmp_path / "empty", "tiny")


def test_library_build_refuses_before_training(tmp_path):
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "mask.json").write_text("{}")
    with pytest.raises(ConfigError, match="nothing was deleted"):
        build_pair("tiny", out_dir=tmp_path, progress=False)
    assert (tmp_path / "tiny" / "mask.json").read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]  # no staging directory left


def test_cli_refuses_with_one_line(tmp_path):
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "notes.txt").write_text("mine")
    result = CliRunner().invoke(cli, ["models", "build", "--recipe", "tiny", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and result.output.count("\n") == 1
    assert (tmp_path / "tiny" / "notes.txt").read_text() == "mine"


def test_the_recipe_option_replaces_preset_which_still_works_hidden_and_warns(tmp_path):
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "notes.txt").write_text("mine")
    help_text = CliRunner().invoke(cli, ["models", "build", "--help"]).output
    assert "--recipe [" in help_text and "--preset" not in help_text  # in viasd bench, --preset names tier thresholds
    old = CliRunner().invoke(cli, ["models", "build", "--preset", "tiny", "--out", str(tmp_path)])
    assert old.exit_code == 2
    assert old.stderr.startswith("warning: `viasd models build --preset` is deprecated; use --recipe")
    assert "not an earlier build of the 'tiny' recipe" in old.stderr  # the recipe it named was the one built
    both = CliRunner().invoke(cli, ["models", "build", "--recipe", "demo", "--preset", "tiny", "--out", str(tmp_path)])
    assert both.exit_code == 2 and "--recipe demo and --preset tiny disagree" in both.output
    assert (tmp_path / "tiny" / "notes.txt").read_text() == "mine"


def test_new_pair_directory_gets_normal_permissions(tmp_path):
    staging = tmp_path / ".tiny-building-x"
    _fake_build(staging)
    os.chmod(staging, 0o700)  # what tempfile.mkdtemp creates
    assert install_build(staging, tmp_path / "tiny", "tiny") == []
    mode = stat.S_IMODE((tmp_path / "tiny").stat().st_mode)
    assert mode == 0o777 & ~_umask()
    assert (tmp_path / "tiny" / "build_report.json").is_file() and not staging.exists()


def test_rebuild_replaces_only_the_builds_own_entries(tmp_path):
    pair_dir = _fake_build(tmp_path / "tiny", marker="old")
    (pair_dir / "mask.json").write_text("searched")
    (pair_dir / "tuned.json").write_text("tuned")
    (pair_dir / "eagle_head").mkdir()
    (pair_dir / "eagle_head" / "config.json").write_text("head")
    staging = _fake_build(tmp_path / ".tiny-building-y", marker="new")
    kept = install_build(staging, pair_dir, "tiny")
    assert kept == ["eagle_head", "mask.json", "tuned.json"]
    assert (pair_dir / "mask.json").read_text() == "searched"
    assert (pair_dir / "eagle_head" / "config.json").read_text() == "head"
    for name in ("tokenizer", "target", "draft"):
        assert (pair_dir / name / "config.json").read_text() == "new"
    assert json.loads((pair_dir / "build_report.json").read_text())["marker"] == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]  # staging and the replaced entries are gone
    assert set(BUILD_ENTRIES) <= {p.name for p in pair_dir.iterdir()}
