"""Lossless mode: greedy output token-identical to the unpatched paths, on every tiny family."""

from __future__ import annotations

import pytest
import torch

from tests.test_hf_pairs import make_pair
from viasd_adapt.adapters import hf
from viasd_adapt.models.tiny import FAMILIES
from viasd_adapt.settings import TierSettings
from viasd_adapt.tiers import Tier

torch.set_num_threads(1)

PROMPTS = [[3], [5, 17, 2, 40, 9], [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22]]
LENGTHS = [1, 9, 26]  # 26 new tokens cross Gemma2's 16-token sliding window


@pytest.mark.parametrize("family", FAMILIES)
def test_lossless_greedy_is_token_identical_to_stock_assisted_and_plain_greedy(family):
    target, drafter, mask = make_pair(family)
    drafter.generation_config.num_assistant_tokens = 5  # short blocks: more cycles per call
    settings = TierSettings(mode="lossless")
    for prompt, n_new in zip(PROMPTS, LENGTHS):
        ids = torch.tensor([prompt])
        plain = target.generate(ids, max_new_tokens=n_new, do_sample=False)
        stock = target.generate(ids, assistant_model=drafter, max_new_tokens=n_new, do_sample=False)
        with hf.tiered(target, mask=mask, settings=settings) as session:
            out = target.generate(ids, assistant_model=drafter, max_new_tokens=n_new, do_sample=False,
                                  return_dict_in_generate=True)
        assert out.sequences.tolist() == stock.tolist() == plain.tolist(), (family, prompt, n_new)
        metrics = out.viasd_metrics
        assert metrics is session.last_metrics
        assert metrics.committed == out.sequences.shape[1] - len(prompt)
        assert metrics.draft_tokens + metrics.slim_tokens + metrics.full_tokens == metrics.committed
        assert metrics.full_passes == metrics.cycles  # one q forward per stock cycle
        assert metrics.slim_passes <= metrics.cycles
    assert "generate" not in target.__dict__


def test_lossless_uses_the_slim_tier_and_keeps_drafts():
    """Guards against a wrapper that silently does nothing: u must correct some drafts and keep others."""
    target, drafter, mask = make_pair("llama", sharpness=3.0)
    drafter.generation_config.num_assistant_tokens = 5
    totals = {Tier.DRAFT: 0, Tier.SLIM: 0, Tier.FULL: 0}
    with hf.tiered(target, mask=mask, settings=TierSettings(mode="lossless")) as session:
        for start in range(6):
            target.generate(torch.tensor([[start, start + 7, start + 3]]), assistant_model=drafter,
                            max_new_tokens=24, do_sample=False)
    for tier in session.metrics.token_tiers:
        totals[Tier(tier)] += 1
    assert totals[Tier.DRAFT] > 0 and totals[Tier.SLIM] > 0 and totals[Tier.FULL] > 0
    assert session.metrics.slim_passes > 0
    assert len(session.history) == 6


def test_mode_none_counts_stock_assisted_generation_without_changing_it():
    target, drafter, mask = make_pair("qwen2")
    drafter.generation_config.num_assistant_tokens = 4
    ids = torch.tensor([[1, 2, 3, 4]])
    stock = target.generate(ids, assistant_model=drafter, max_new_tokens=20, do_sample=False)
    calls = []
    hook = target.register_forward_pre_hook(lambda module, args: calls.append(module is target))
    try:
        with hf.tiered(target, settings=TierSettings(mode="none")) as session:
            out = target.generate(ids, assistant_model=drafter, max_new_tokens=20, do_sample=False)
    finally:
        hook.remove()
    assert out.tolist() == stock.tolist()
    assert session.metrics.slim_passes == 0 and session.metrics.slim_tokens == 0
    assert session.metrics.full_passes == sum(calls)  # metrics agree with an independent count
    assert session.metrics.committed == 20


def test_tiered_calls_leave_the_assistants_draft_schedule_as_stock_would():
    """Mode none is stock: the heuristic draft length evolves and persists exactly as unpatched.
    A tiered call drafts ``gamma`` tokens itself and leaves the assistant's config untouched, so it
    changes nothing that later calls depend on."""
    target, drafter, mask = make_pair("llama", sharpness=3.0)
    ids = torch.tensor([[5, 17, 2, 40, 9]])
    config = drafter.generation_config

    def run(n, mode=None):
        config.num_assistant_tokens, config.num_assistant_tokens_schedule = 4, "heuristic"
        if mode is None:
            target.generate(ids, assistant_model=drafter, max_new_tokens=n, do_sample=False)
        else:
            with hf.tiered(target, mask=mask, settings=TierSettings(mode=mode)):
                target.generate(ids, assistant_model=drafter, max_new_tokens=n, do_sample=False)
        return config.num_assistant_tokens

    stock = {n: run(n) for n in (10, 20)}
    assert set(stock.values()) != {4}  # the heuristic moved: the comparisons below can fail
    assert {n: run(n, "none") for n in stock} == stock
    for mode in ("lossless", "lossy", "lenient"):
        assert run(10, mode) == 4
