"""Prompt lookup through the tier (viasd_adapt.engine.prompt_lookup): the n-gram search matches
transformers' own, the drafter is a point mass, and lossless decoding with it is exact, greedy
(token-identical) and sampling (the joint of two generated tokens is the target's)."""

from __future__ import annotations

import dataclasses
import random
import warnings

import pytest
import torch

import viasd_adapt
from tests.support.pairs import greedy_reference, sharpen, truncated_pair
from tests.support.stats import ALPHA, chi_square_pvalue, exact_joint, joint_counts, outside_support
from viasd_adapt.adapters import hf
from tests.support.verifiers import tiered_verifier
from viasd_adapt.engine.loop import speculative_generate
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.engine.prompt_lookup import PromptLookupDrafter, lookup_continuation, point_mass
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.core.sampling import SamplingConfig, probs_from_logits
from viasd_adapt.core.settings import TierSettings

PROMPTS = [[1, 2, 3, 1, 2, 3, 1, 2], [5, 6, 7, 8, 5, 6, 9, 5, 6], [4, 4, 4, 4], [7]]


def test_the_ngram_search_proposes_what_transformers_prompt_lookup_proposes():
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    rng = random.Random(0)
    checked = 0
    for _ in range(1500):
        sequence = [rng.randrange(rng.randint(2, 6)) for _ in range(rng.randint(1, 30))]
        tokens, ngram, eos = rng.randint(1, 6), rng.randint(1, 3), rng.choice([None, 0])
        stock = PromptLookupCandidateGenerator(eos_token_id=None if eos is None else torch.tensor([eos]),
                                               num_output_tokens=tokens, max_matching_ngram_size=ngram, max_length=1000,
                                               vocab_size=8)
        expected = stock.get_candidates(torch.tensor([sequence]))[0][0, len(sequence):].tolist()
        assert lookup_continuation(sequence, tokens, ngram, () if eos is None else (eos,)) == expected, sequence
        checked += bool(expected)
    assert checked > 500  # most draws did find a continuation


def test_a_lookup_block_is_a_point_mass_and_costs_no_drafter_pass():
    drafter = PromptLookupDrafter(vocab_size=10)
    ids, p = drafter.draft([1, 2, 3, 1, 2], 3)
    assert ids == [3, 1, 2] and p.shape == (3, 10)
    assert torch.equal(p, point_mass([3, 1, 2], 10)) and torch.equal(p.sum(-1), torch.ones(3))
    assert drafter.draft([1, 2, 3], 3)[0] == [] and drafter.passes == 0 and drafter.misses == 1


@pytest.mark.parametrize("mode", ["none", "lossless"])
def test_engine_with_prompt_lookup_is_token_identical_to_greedy_decoding(mode):
    target = sharpen(tiny_model("llama", seed=1, vocab_size=12), 8.0)
    mask = RoutingMask.from_skipped(6, [2, 4])
    proposed = 0
    for prompt in PROMPTS:
        settings = TierSettings(mode=mode, gamma=4)
        slim = SlimVerifier(target, mask) if settings.mode.uses_slim else None
        drafter = PromptLookupDrafter(vocab_size=12)
        verifier = tiered_verifier(target, settings, SamplingConfig(), slim=slim, framework="engine")
        out = speculative_generate(drafter, verifier, prompt, 20)
        assert out.tokens == greedy_reference(target, prompt, 20)
        assert out.metrics.draft_passes == 0
        proposed += drafter.proposed
    assert proposed > 0


@pytest.mark.parametrize("mode", ["lossless", "lossy"])
def test_hf_prompt_lookup_runs_through_the_tier_instead_of_falling_back(mode):
    target = sharpen(tiny_model("llama", seed=2, vocab_size=12), 8.0)
    target.generation_config.pad_token_id = 0
    mask = RoutingMask.from_skipped(6, [2, 4])
    kwargs = dict(max_new_tokens=16, do_sample=False, eos_token_id=[], prompt_lookup_num_tokens=3)
    for prompt in PROMPTS[:3]:
        ids = torch.tensor([prompt])
        stock = target.generate(ids, **kwargs)
        with warnings.catch_warnings():
            warnings.simplefilter("error", hf.ViasdFallbackWarning)
            with hf.tiered(target,
                           context=viasd_adapt.context(target, mask=mask, settings=TierSettings(mode=mode))) as session:
                out = target.generate(ids, **kwargs)
        assert session.fallbacks == [] and session.last_metrics.draft_passes == 0
        assert session.last_metrics.draft_tokens + session.last_metrics.drafts_rejected > 0  # lookups were verified
        if mode == "lossless":
            assert out.tolist() == stock.tolist()


def test_mode_none_observes_stock_prompt_lookup_without_drafter_passes():
    target = sharpen(tiny_model("llama", seed=2, vocab_size=12), 8.0)
    target.generation_config.pad_token_id = 0
    ids = torch.tensor([PROMPTS[0]])
    kwargs = dict(max_new_tokens=12, do_sample=False, eos_token_id=[], prompt_lookup_num_tokens=3)
    stock = target.generate(ids, **kwargs)
    with hf.tiered(target, context=viasd_adapt.context(target, settings=TierSettings(mode="none"))) as session:
        out = target.generate(ids, **kwargs)
    assert out.tolist() == stock.tolist()
    metrics = session.last_metrics
    assert metrics.cycles > 0 and metrics.draft_passes == 0 and metrics.full_passes == metrics.cycles


SAMPLING = SamplingConfig(do_sample=True, temperature=0.8, top_k=6, top_p=0.95)
PROMPT = [7, 5, 5, 5, 5, 2, 11, 2, 11, 2]  # the target's own greedy loop: lookups are often right, not always


def _next_probs(model, sampling):
    def probs(prefixes):
        with torch.no_grad():
            rows = [model(torch.tensor([PROMPT + list(prefix)])).logits[0, -1] for prefix in prefixes]
        return probs_from_logits(torch.stack(rows), sampling)

    return probs


@pytest.mark.parametrize("mode", ["none", "lossless"])
def test_lossless_sampling_with_a_point_mass_drafter_follows_the_targets_exact_joint(mode):
    pair = truncated_pair("llama", vocab_size=12, layers=4, sharpness=12.0)
    totals = {"judged": 0, "rejected": 0}

    def sample(seed: int) -> list[int]:
        settings = TierSettings(mode=mode, gamma=2)
        slim = SlimVerifier(pair.target, pair.mask) if settings.mode.uses_slim else None
        verifier = tiered_verifier(pair.target, settings, SAMPLING, slim=slim, framework="engine")
        out = speculative_generate(PromptLookupDrafter(12), verifier, PROMPT, 2, generator=torch.Generator().manual_seed(seed),
                                   q_prefill=False)
        totals["judged"] += out.metrics.drafts_judged
        totals["rejected"] += out.metrics.drafts_rejected
        return out.tokens

    counts = joint_counts(sample, 300, 12)
    q = exact_joint(_next_probs(pair.target, SAMPLING))
    assert (q == 0).any() and outside_support(counts, q) == 0
    p_value = chi_square_pvalue(counts, q)
    assert p_value > ALPHA, f"the sampled joint differs from the target's (p = {p_value:.2e})"
    assert 0 < totals["rejected"] < totals["judged"]  # both the accept and the resample paths ran
    hotter = exact_joint(_next_probs(pair.target, dataclasses.replace(SAMPLING, temperature=1.2)))
    assert outside_support(counts, hotter) == 0 and chi_square_pvalue(counts, hotter) < ALPHA
