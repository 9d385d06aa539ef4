"""Every option a framework cannot honour is refused by name, before anything loads, in every
framework: the frameworks declare what they ignore (``registry.Framework.ignores``) and the
commands refuse it (``registry.refuse_unhonoured``), instead of running without it and recording
it as if it had been used (``--framework eagle --draft prompt-lookup`` ran the EAGLE head)."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from tests.support.pairs import save_char_pair
from viasd_adapt.cli.main import cli
from viasd_adapt.frameworks import registry as frameworks


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return save_char_pair(tmp_path_factory.mktemp("options") / "pair", with_mask=True)


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def refused(result, option, *needles):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and "Loading weights" not in result.output  # nothing was loaded
    line = result.output.strip().splitlines()[-1]
    assert line.startswith(f"error: {option}"), line
    for needle in needles:
        assert needle in line, (needle, line)


def test_eagle_refuses_a_drafter_by_name(pair):
    for draft in ("prompt-lookup", pair / "draft"):
        refused(invoke("generate", "--framework", "eagle", "--target", pair / "target", "--draft", draft, "--prompt", "x"),
                f"--draft {draft}", "--framework eagle cannot use a drafter", "EAGLE head")
    refused(invoke("generate", "--framework", "eagle", "--target", pair / "target", "--gamma", 3, "--prompt", "x"),
            "--gamma 3", "draft block length", "tree")


@pytest.mark.parametrize("option, value, needle", [
    ("--draft", None, "runs the target alone"),
    ("--mask", None, "no tier"),
    ("--alpha1", 0.2, "no tier"),
    ("--alpha2", 0.2, "no tier"),
    ("--lenience", 0.2, "no tier"),
    ("--preset", "conservative", "no tier"),
    ("--gamma", 3, "one token per target pass"),
    ("--eagle-head", None, "runs the target alone"),
])
def test_the_target_alone_refuses_what_only_a_drafter_or_a_tier_uses(pair, option, value, needle):
    value = {"--draft": pair / "draft", "--mask": pair / "mask.json", "--eagle-head": pair}.get(option, value)
    refused(invoke("generate", "--framework", "ar", "--target", pair / "target", option, value, "--prompt", "x"),
            f"{option} {value}", "--framework ar cannot use", needle)


@pytest.mark.parametrize("framework", ["hf", "engine", "pearl"])
def test_drafting_frameworks_refuse_an_eagle_head(pair, framework):
    refused(invoke("generate", "--framework", framework, "--target", pair / "target", "--draft", pair / "draft",
                   "--eagle-head", pair, "--prompt", "x"),
            f"--eagle-head {pair}", f"--framework {framework} cannot use an eagle head", "only eagle reads")


def test_the_bench_refuses_what_none_of_its_frameworks_honours(pair):
    common = ["bench", "--target", pair / "target", "--draft", pair / "draft", "--max-new-tokens", 2]
    refused(invoke(*common, "--frameworks", "hf,pearl", "--eagle-head", pair), f"--eagle-head {pair}",
            "--frameworks hf, pearl cannot use an eagle head")
    refused(invoke(*common, "--frameworks", "eagle", "--gamma", 3), "--gamma 3", "--frameworks eagle", "tree")
    refused(invoke(*common, "--frameworks", "lookup", "--mask", pair / "mask.json"), "--mask", "lookup has no tier")
    refused(invoke(*common, "--frameworks", "lookup", "--alpha1", 0.1), "--alpha1 0.1", "no tier")


def test_every_framework_declares_only_known_inputs_and_honours_what_it_runs():
    for name, framework in frameworks.FRAMEWORKS.items():
        assert set(framework.ignores) <= set(frameworks.RUN_INPUTS), name
        assert framework.honours(frameworks.SAMPLING), name  # every framework samples
        assert framework.honours(frameworks.EAGLE_HEAD) == framework.needs_eagle_head, name
        assert framework.honours(frameworks.TIER) == framework.has_tier, name
        assert framework.honours(frameworks.MASK) == framework.has_tier, name
    assert not frameworks.get("eagle").honours(frameworks.DRAFTER)
    assert [f for f in frameworks.FRAMEWORKS if frameworks.get(f).honours(frameworks.DRAFTER)] == ["engine", "hf", "pearl"]
    # several frameworks: refused only when none of them can use it
    frameworks.refuse_unhonoured(["lookup", "hf"], [(frameworks.MASK, "--mask m.json")])
    with pytest.raises(ValueError, match="unknown run input"):
        frameworks.refuse_unhonoured(["hf"], [("colour", "--colour")])


def test_eagle_from_a_pair_with_a_drafter_runs_its_head_and_records_no_drafter(pair, tmp_path):
    pytest.importorskip("eagle.model.ea_model")
    from viasd_adapt.training.eagle_head import train_eagle_head

    own = shutil.copytree(pair, tmp_path / "pair")
    train_eagle_head(own / "target", own / "eagle_head", seed=0, steps=4, batch_size=2, seq_len=16, max_train_chars=4_000)
    out = tmp_path / "out.json"
    result = invoke("generate", "--pair", own, "--framework", "eagle", "--mode", "none", "--prompt", "def f(x):",
                    "--max-new-tokens", 4, "--json", out, "--no-color")
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["paths"]["draft"] is None and data["paths"]["eagle_head"] == str(own / "eagle_head")
    assert data["framework"] == "eagle" and len(data["tokens"]) == 4
