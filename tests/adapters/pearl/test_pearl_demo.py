"""PEARL on the shipped demo pair.

The method's acceptance check (docs/method.md sections 1 and 4) for PEARL, with the tier on every cycle
(``adaptive=False``): against PEARL without the tier (same drafter, same gamma, same
prompts and seeds), lossy mode rejects fewer drafts and makes fewer full-verifier passes per token;
lossless stays token-identical to the target's greedy decoding; audit fills its two numbers.
"""

from __future__ import annotations

import pytest

import viasd_adapt
from tests.support.expected_warnings import negative_delta_warning
from tests.support.pairs import greedy_reference, load_shipped_demo_pair
from viasd_adapt.adapters.pearl import pearl_generate
from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings


GAMMA, N_PROMPTS, N_NEW, PROMPT_TOKENS = 4, 3, 32, 48


@pytest.fixture(scope="module")
def demo():
    from viasd_adapt.training.corpus import heldout_prompts

    pair, tokenizer, target, drafter = load_shipped_demo_pair()
    prompts = [tokenizer(text)["input_ids"][-PROMPT_TOKENS:] for text in heldout_prompts(N_PROMPTS, seed=3)]
    return target, drafter, pair.mask, prompts


def run(demo, mode, sampling=SamplingConfig(), parallel=True):
    target, drafter, mask, prompts = demo
    total, outputs = TierMetrics(), []
    for seed, ids in enumerate(prompts):
        with negative_delta_warning(expected=mode in ("lossy", "audit")):  # the shipped mask's Delta(u) < 0
            out = pearl_generate(
                target, drafter, ids, N_NEW,
                context=viasd_adapt.context(target, settings=TierSettings(mode=mode, gamma=GAMMA, adaptive=False),
                                            mask=mask if mode != "none" else None),
                sampling=sampling, parallel=parallel, seed=seed,
            )
        assert out.metrics.draft_tokens + out.metrics.slim_tokens + out.metrics.full_tokens == len(out.tokens)
        total = total.merge(out.metrics)
        outputs.append(out.tokens)
    return total, outputs


@pytest.mark.parametrize("sampling", [SamplingConfig(), SamplingConfig(do_sample=True, temperature=0.8)],
                         ids=["greedy", "sampling"])
def test_lossy_cuts_rejections_and_full_passes_on_demo(demo, sampling):
    plain, _ = run(demo, "none", sampling)
    lossy, _ = run(demo, "lossy", sampling)
    assert lossy.rejection_rate < plain.rejection_rate
    assert lossy.full_passes_per_token < plain.full_passes_per_token


def test_lossless_and_none_match_target_greedy_on_demo(demo):
    target, _, _, prompts = demo
    expected = [greedy_reference(target, ids, N_NEW) for ids in prompts]
    for mode in ("none", "lossless"):
        _, outputs = run(demo, mode, parallel=mode == "none")
        assert outputs == expected


def test_audit_on_demo(demo):
    audit, _ = run(demo, "audit", SamplingConfig(do_sample=True, temperature=0.8))
    assert audit.audited == audit.committed
    assert 0.0 <= audit.overrule_rate <= 1.0 and 0.0 <= audit.tv_distance <= 1.0
