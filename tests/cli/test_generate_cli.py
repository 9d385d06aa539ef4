"""``viasd generate``: framework registry, tier rendering, --json output, clear errors."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from click.testing import CliRunner

from tests.support.pairs import save_pair_dir, truncated_pair
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.frameworks import registry as frameworks
from viasd_adapt.cli import generate as gen
from viasd_adapt.cli.main import cli
from viasd_adapt.bench.display import PLAIN_MARKERS, legend, render_tiers, token_pieces
from viasd_adapt.training.tokenizer import train_tokenizer
from viasd_adapt.core.tiers import Tier


TEXTS = ["def add(a, b):\n    return a + b\n", "for i in range(10):\n    print(i)\n", "class Point:\n    x = 0\n"] * 20


@pytest.fixture(scope="module")
def pair_dir(tmp_path_factory):
    """A tiny pair on disk laid out like a built pair: target/, draft/ (each with its tokenizer), mask.json."""
    tokenizer = train_tokenizer(TEXTS, 320)
    target, draft, mask = truncated_pair("llama", vocab_size=len(tokenizer), layers=6, sharpness=3.0)
    return save_pair_dir(tmp_path_factory.mktemp("pair"), target, draft, tokenizer, mask,
                         eos_token_id=tokenizer.eos_token_id)


def invoke(*args):
    return CliRunner().invoke(cli, ["generate", *map(str, args)])


def paths(root, mask=True, framework="hf"):
    if framework == "ar":  # the target alone: a drafter or a mask would be refused by name
        return ["--target", root / "target"]
    out = ["--target", root / "target", "--draft", root / "draft"]
    return out + (["--mask", root / "mask.json"] if mask else [])


@pytest.mark.parametrize("framework,mode", [("ar", "none"), ("hf", "none"), ("hf", "lenient"), ("hf", "lossless"), ("hf", "lossy"),
                                            ("hf", "audit"), ("engine", "lossy")])
def test_generate_writes_tokens_text_and_metrics(pair_dir, tmp_path, framework, mode):
    out_json = tmp_path / "out.json"
    fixed = ("--no-adaptive",) if mode in ("lossless", "lossy") else ()  # the tier on every cycle: it must run
    result = invoke("--framework", framework, *paths(pair_dir, framework=framework), "--mode", mode, "--prompt", "def add(a, b):",
                    "--max-new-tokens", 12, "--json", out_json, "--no-color", *fixed)
    assert result.exit_code == 0, result.output
    data = json.loads(out_json.read_text())
    assert 1 <= len(data["tokens"]) <= 12 and len(data["tiers"]) == len(data["tokens"])
    assert data["metrics"]["committed"] == len(data["tokens"])
    m = data["metrics"]
    assert m["draft_tokens"] + m["slim_tokens"] + m["full_tokens"] == m["committed"]
    if framework == "ar":
        assert set(data["tiers"]) == {int(Tier.FULL)} and m["full_passes"] == len(data["tokens"])
    if mode in ("none", "lenient"):
        assert m["slim_passes"] == 0
    if mode in ("lossy", "audit", "lossless"):
        assert m["slim_passes"] > 0
    assert "legend:" in result.output and "tokens:" in result.output
    assert data["text"] in result.output.replace("\u2039", "").replace("\u203a", "").replace("\u00ab", "").replace("\u00bb", "")


def test_generate_says_how_many_cycles_ran_the_tier(pair_dir, tmp_path):
    """The summary line counts the tier's cycles: those the adaptive tier chose (the default), or
    every drafting cycle with --no-adaptive; untiered modes say nothing of a tier."""
    import re

    out_json = tmp_path / "out.json"
    for flag, suffix in (("--adaptive", " (adaptive)"), ("--no-adaptive", "")):
        result = invoke("--framework", "engine", *paths(pair_dir), "--mode", "lossless", flag, "--prompt", "def add(a, b):",
                        "--max-new-tokens", 12, "--json", out_json, "--no-color")
        assert result.exit_code == 0, result.output
        m = json.loads(out_json.read_text())["metrics"]
        found = re.search(r"\[engine / lossless\] .* tier on (\d+) of (\d+) cycles(.*)$", result.output, re.MULTILINE)
        assert found and (int(found[1]), int(found[2]), found[3]) == (m["tier_cycles"], m["cycles"], suffix), result.output
        assert json.loads(out_json.read_text())["settings"].get("adaptive", True) is (flag == "--adaptive")
    assert m["tier_cycles"] == m["slim_passes"] == m["cycles"] - 1  # every cycle but the prefill
    result = invoke("--framework", "engine", *paths(pair_dir), "--mode", "none", "--prompt", "x", "--max-new-tokens", 4, "--no-color")
    assert result.exit_code == 0 and "tier on" not in result.output


def test_hf_lossless_cli_matches_ar_greedy(pair_dir, tmp_path):
    texts = {}
    for framework, mode in (("ar", "none"), ("hf", "lossless")):
        out_json = tmp_path / f"{framework}.json"
        result = invoke("--framework", framework, *paths(pair_dir, framework=framework), "--mode", mode, "--prompt", "for i in",
                        "--max-new-tokens", 16, "--json", out_json)
        assert result.exit_code == 0, result.output
        texts[framework] = json.loads(out_json.read_text())["tokens"]
    assert texts["ar"] == texts["hf"]


def test_clear_errors(pair_dir):
    cases = [
        (["--framework", "hf", *paths(pair_dir), "--mode", "lossy", "--prompt", "x", "--max-new-tokens", 0], "max_new_tokens"),
        (["--framework", "hf", *paths(pair_dir, mask=False), "--mode", "lossy", "--prompt", "x", "--target", pair_dir / "target"], "needs --mask"),
        (["--framework", "ar", *paths(pair_dir), "--mode", "lossy", "--prompt", "x"], "no tier"),
        (["--framework", "hf", *paths(pair_dir), "--prompt", "x", "--top-p", 0], "top_p"),
        (["--framework", "hf", *paths(pair_dir), "--prompt", "x", "--temperature", "nan"], "temperature"),
        (["--framework", "hf", *paths(pair_dir), "--prompt", "x", "--lenience", 1.0], "lenience"),
        (["--framework", "hf", *paths(pair_dir), "--prompt", "x", "--alpha1", 1.5], "alpha1"),
    ]
    for args, message in cases:
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output and "Traceback" not in result.output


def test_one_registry_serves_every_command(monkeypatch):
    """generate, bench and tune read the same registry; a registered framework is runnable by name."""
    from viasd_adapt.core.metrics import TierMetrics
    from viasd_adapt.models.pair import LoadedPair
    from viasd_adapt.frameworks.requests import RunOutput, RunRequest

    calls = []

    def fake_run(pair, request):
        calls.append(request.mode)
        return RunOutput([5, 6], TierMetrics(token_tiers=[int(Tier.SLIM), int(Tier.FULL)]))

    module = type(sys)("fake_framework_module")
    module.run = fake_run
    monkeypatch.setitem(sys.modules, "fake_framework_module", module)
    monkeypatch.setitem(frameworks.FRAMEWORKS, "fake", frameworks.Framework("fake", "a test", "fake_framework_module:run"))
    pair = LoadedPair(torch.nn.Linear(1, 1), torch.nn.Linear(1, 1), None, None, torch.device("cpu"))
    out = frameworks.run("fake", pair, RunRequest("lossy", [1], 2, TierSettings()))
    assert out.tokens == [5, 6] and out.tiers == [int(Tier.SLIM), int(Tier.FULL)] and calls == ["lossy"]
    with pytest.raises(gen.ConfigError, match="unknown framework"):
        frameworks.get("nonexistent")
    with pytest.raises(gen.ConfigError, match="no plain"):
        frameworks.run("fake", pair, RunRequest("plain", [1], 2, TierSettings()))


def test_rendering_marks_every_tier_and_reassembles_the_text():
    tokenizer = train_tokenizer(TEXTS, 320)
    ids = tokenizer("def add(a, b):\n    return a + b")["input_ids"][1:]
    pieces = token_pieces(tokenizer, ids)
    assert "".join(pieces) == tokenizer.decode(ids)
    tiers = [int(Tier.DRAFT), int(Tier.SLIM), int(Tier.FULL)] * len(ids)
    plain = render_tiers(pieces, tiers[: len(ids)], colour=False)
    assert PLAIN_MARKERS[Tier.SLIM][0] + pieces[1] + PLAIN_MARKERS[Tier.SLIM][1] in plain
    assert PLAIN_MARKERS[Tier.FULL][0] + pieces[2] + PLAIN_MARKERS[Tier.FULL][1] in plain
    coloured = render_tiers(pieces, tiers[: len(ids)], colour=True)
    assert "\x1b[" in coloured and "\x1b[" not in plain
    assert "slim verifier" in legend(False) and "full verifier" in legend(True)
    with pytest.raises(ValueError):
        render_tiers(pieces, tiers[:1], colour=False)


def test_defaults_come_from_the_demo_pair(pair_dir, monkeypatch, tmp_path):
    from viasd_adapt.models.registry import read_pair

    monkeypatch.setattr(gen, "_registered_pair", lambda name: read_pair(pair_dir, name="demo", source="shipped"))
    out_json = tmp_path / "demo.json"
    result = invoke("--prompt", "class Point:", "--max-new-tokens", 6, "--json", out_json)
    assert result.exit_code == 0, result.output
    data = json.loads(out_json.read_text())
    assert data["framework"] == "hf" and data["mode"] == "lossy"
    assert data["paths"]["target"] == str(pair_dir / "target") and data["paths"]["mask"] == str(pair_dir / "mask.json")
    monkeypatch.setattr(gen, "_registered_pair", lambda name: None)
    result = invoke("--prompt", "x")
    assert result.exit_code == 2 and "demo pair is not installed" in result.output


def test_pair_option_names_a_pair_directory_and_excludes_target(pair_dir, tmp_path):
    out_json = tmp_path / "pair.json"
    result = invoke("--pair", pair_dir, "--prompt", "class Point:", "--max-new-tokens", 4, "--json", out_json)
    assert result.exit_code == 0, result.output
    data = json.loads(out_json.read_text())
    assert data["paths"]["target"] == str(pair_dir / "target") and data["paths"]["draft"] == str(pair_dir / "draft")
    both = invoke("--pair", pair_dir, "--target", pair_dir / "target", "--prompt", "x")
    assert both.exit_code == 2 and "either --pair or --target" in both.output
    unknown = invoke("--pair", "no-such-pair", "--prompt", "x")
    assert unknown.exit_code == 2 and "no-such-pair" in unknown.output
