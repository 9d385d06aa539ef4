"""Lossy on the shipped demo pair.

The method's acceptance check (docs/method.md sections 1 and 4) for the HF adapter, with the tier on every
cycle (``adaptive=False``: the fixed tier is what is measured here): against stock transformers
assisted generation with the same drafter and block length, lossy mode makes fewer full-verifier
passes per token and rejects fewer drafts, and every committed token is attributed to one tier.
Lossless mode stays token-identical to plain greedy decoding of the target.

The paper's built-in rules are used. (On an earlier candidate pair whose drafter was sharper than
its target, greedy lossy needed the opt-in ``GreedyArgmaxAcceptance`` rules plugin (``viasd_adapt.core.plugins``, first written for the EAGLE
adapter to beat stock verification: the probability-ratio gate can reject the very token greedy q
would pick. On the shipped pair the built-in rules win by a wide margin.)
"""

from __future__ import annotations

import pytest

import viasd_adapt
from tests.support.expected_warnings import negative_delta_warning
from tests.support.pairs import load_shipped_demo_pair
from viasd_adapt.adapters import hf
from viasd_adapt.config.mask import MaskArtifact
from viasd_adapt.routing.view import block_output_arities
from viasd_adapt.core.settings import TierSettings


GAMMA, N_PROMPTS, N_NEW, PROMPT_TOKENS = 5, 4, 32, 64


def load_demo():
    from viasd_adapt.training.corpus import heldout_prompts

    pair, tokenizer, target, drafter = load_shipped_demo_pair()
    for model in (target, drafter):
        model.generation_config.eos_token_id = None  # fixed-length runs: same token count per row
    config = drafter.generation_config
    config.num_assistant_tokens, config.num_assistant_tokens_schedule = GAMMA, "constant"
    config.assistant_confidence_threshold = 0.0
    prompts = [tokenizer(text, return_tensors="pt")["input_ids"][:, -PROMPT_TOKENS:]
               for text in heldout_prompts(N_PROMPTS, seed=3)]
    return target, drafter, pair.mask, prompts


def run(target, drafter, prompts, mask, mode, plugins=()):
    calls, outputs = [], []
    # every full-verifier pass (plain, or resumed at the shared prefix) runs layer s1; no slim pass does
    s1 = MaskArtifact.load(mask).mask.first_skipped
    block_output_arities(target)  # a view's one-off probe of the layer outputs is not a pass
    hook = target.model.layers[s1].register_forward_pre_hook(lambda module, args: calls.append(True))
    try:
        with negative_delta_warning(expected=mode in ("lossy", "audit")), \
                hf.tiered(target,
                          context=viasd_adapt.context(target,
                                                      mask=mask if mode != "none" else None,
                                                      settings=TierSettings(mode=mode, gamma=GAMMA, adaptive=False),
                                                      plugins=plugins)) as session:  # a lossy tier on the shipped mask (Delta(u) < 0) warns
            for ids in prompts:
                outputs.append(target.generate(ids, assistant_model=drafter, max_new_tokens=N_NEW, do_sample=False))
    finally:
        hook.remove()
    assert not session.fallbacks
    return session.metrics, sum(calls), outputs


@pytest.fixture(scope="module")
def demo():
    return load_demo()


def test_lossy_beats_stock_assisted_generation_on_the_demo_pair(demo):
    target, drafter, mask, prompts = demo
    stock, stock_passes, _ = run(target, drafter, prompts, mask, "none")
    lossy, lossy_passes, _ = run(target, drafter, prompts, mask, "lossy")
    assert stock.committed == lossy.committed == N_PROMPTS * N_NEW
    assert (stock.full_passes, lossy.full_passes) == (stock_passes, lossy_passes)
    assert lossy.draft_tokens + lossy.slim_tokens + lossy.full_tokens == lossy.committed
    assert lossy.full_passes_per_token < stock.full_passes_per_token
    assert lossy.rejection_rate < stock.rejection_rate
    assert lossy.slim_passes > 0


def test_lossless_is_token_identical_on_the_demo_pair(demo):
    target, drafter, mask, prompts = demo
    _, _, outputs = run(target, drafter, prompts, mask, "lossless")
    for ids, out in zip(prompts, outputs):
        assert out.tolist() == target.generate(ids, max_new_tokens=N_NEW, do_sample=False).tolist()
