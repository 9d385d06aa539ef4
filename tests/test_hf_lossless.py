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
        assert metrics.accepted + metrics.slim_regenerated + metrics.escalated == metrics.committed
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
    assert session.metrics.slim_passes == 0 and session.metrics.slim_regenerated == 0
    assert session.metrics.full_passes == sum(calls)  # metrics agree with an independent count
    assert session.metrics.committed == 20


def test_candidate_strategy_updates_reach_the_wrapped_generator(monkeypatch):
    """The stock draft-length heuristic must still see each cycle, counted in its own drafts."""
    from transformers.generation.candidate_generator import AssistedCandidateGenerator

    seen = []
    stock_update = AssistedCandidateGenerator.update_candidate_strategy

    def spy(self, input_ids, scores, num_matches):
        seen.append((int(num_matches), scores.shape[1]))
        return stock_update(self, input_ids, scores, num_matches)

    monkeypatch.setattr(AssistedCandidateGenerator, "update_candidate_strategy", spy)
    target, drafter, mask = make_pair("llama", sharpness=3.0)
    config = drafter.generation_config
    config.num_assistant_tokens, config.num_assistant_tokens_schedule = 4, "heuristic"
    ids = torch.tensor([[5, 17, 2, 40, 9]])
    with hf.tiered(target, mask=mask, settings=TierSettings(mode="lossless")) as session:
        target.generate(ids, assistant_model=drafter, max_new_tokens=30, do_sample=False)
    metrics = session.metrics
    assert len(seen) == metrics.cycles
    assert sum(rows - 1 for _, rows in seen) == metrics.drafted  # rows = that cycle's drafts + 1
    assert all(0 <= matches <= rows - 1 for matches, rows in seen)
    assert sum(matches for matches, _ in seen) == metrics.accepted  # drafts that survived both verifiers
    expected = 4  # transformers' heuristic, replayed: +2 after a fully accepted block, else -1
    for matches, rows in seen:
        expected = expected + 2 if matches == rows - 1 else max(1, expected - 1)
    assert config.num_assistant_tokens == expected  # persisted on the assistant, as the stock loop does
