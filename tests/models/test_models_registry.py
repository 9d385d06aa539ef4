"""Finding built and shipped pairs, and the `viasd models list` command."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from viasd_adapt.cli.main import cli
from viasd_adapt.errors import ViasdError
from viasd_adapt.models import registry


def _fake_pair(root, with_extras=False):
    for name in ("target", "draft"):
        (root / name).mkdir(parents=True)
        (root / name / "config.json").write_text("{}")
    if with_extras:
        (root / "eagle_head").mkdir()
        (root / "mask.json").write_text("{}")
    return root


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(registry.CACHE_ENV_VAR, str(tmp_path))
    return tmp_path


def test_cache_dir_follows_the_environment(cache):
    assert registry.cache_dir() == cache


def test_list_pairs_finds_built_pairs_and_their_extras(cache):
    _fake_pair(cache / "alpha", with_extras=True)
    _fake_pair(cache / "beta")
    (cache / "not-a-pair").mkdir()
    built = [pair for pair in registry.list_pairs() if pair.source == "built"]
    assert [pair.name for pair in built] == ["alpha", "beta"]
    assert built[0].mask == cache / "alpha" / "mask.json"
    assert built[0].eagle_head == cache / "alpha" / "eagle_head"
    assert built[1].mask is None and built[1].eagle_head is None


def test_resolve_pair_prefers_the_cache_and_accepts_paths(cache, tmp_path_factory):
    _fake_pair(cache / "alpha")
    assert registry.resolve_pair("alpha").root == cache / "alpha"
    elsewhere = _fake_pair(tmp_path_factory.mktemp("elsewhere") / "gamma")
    assert registry.resolve_pair(str(elsewhere)).target == elsewhere / "target"
    with pytest.raises(ViasdError, match="no model pair named"):
        registry.resolve_pair("missing")


def test_demo_pair_is_shipped():
    demo = registry.demo_pair_paths()
    assert (demo.target / "model.safetensors").is_file()
    assert (demo.draft / "model.safetensors").is_file()
    assert (demo.target / "tokenizer.json").is_file()


def test_demo_pair_error_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setattr(registry, "shipped_dir", lambda: tmp_path)
    with pytest.raises(ViasdError, match="viasd models build --recipe demo"):
        registry.demo_pair_paths()


def test_cli_list_json(cache):
    _fake_pair(cache / "alpha", with_extras=True)
    result = CliRunner().invoke(cli, ["models", "list", "--json"])
    assert result.exit_code == 0, result.output
    entries = json.loads(result.output)
    alpha = next(entry for entry in entries if entry["name"] == "alpha")
    assert alpha["target"] == str(cache / "alpha" / "target")
    assert alpha["mask"] == str(cache / "alpha" / "mask.json")
    assert set(alpha) >= {"name", "source", "target", "draft", "eagle_head", "mask"}


def test_cli_list_text(cache):
    _fake_pair(cache / "alpha")
    result = CliRunner().invoke(cli, ["models", "list"])
    assert result.exit_code == 0 and "alpha" in result.output
