"""Pure helpers of :mod:`viasd_adapt.core.cycle`: the stop rule (budget, EOS) applied to every cycle
before it is counted, and PEARL's end-at-block rule (a fully committed block drops its bonus)."""

from __future__ import annotations

from viasd_adapt.core.cycle import StopRule, end_at_block
from viasd_adapt.core.tiers import CycleResult, Tier


def test_end_at_block_drops_only_tokens_after_a_fully_committed_block():
    block = [5, 6, 7]
    bonus = CycleResult([5, 6, 7, 9], [Tier.DRAFT] * 3 + [Tier.FULL], 3, 0)
    trimmed = end_at_block(bonus, block)
    assert trimmed.tokens == [5, 6, 7] and trimmed.tiers == [Tier.DRAFT] * 3
    assert (trimmed.drafts_judged, trimmed.drafts_rejected) == (3, 0)
    cascade = CycleResult([5, 6, 7, 4, 9], [Tier.DRAFT] * 3 + [Tier.SLIM, Tier.FULL], 3, 0)
    assert end_at_block(cascade, block).tokens == [5, 6, 7]
    corrected = CycleResult([5, 8], [Tier.DRAFT, Tier.FULL], 2, 1)
    assert end_at_block(corrected, block).tokens == [5, 8]
    # a correction at the last position that differs from the draft keeps the cycle as it is
    last = CycleResult([5, 6, 1], [Tier.DRAFT, Tier.DRAFT, Tier.FULL], 3, 1)
    assert end_at_block(last, block).tokens == [5, 6, 1]


def test_stop_rule_respects_budget_and_eos():
    assert StopRule.of(5).split([1, 2, 3]) == ([1, 2, 3], False)
    assert StopRule.of(2).split([1, 2, 3]) == ([1, 2], True)
    assert StopRule.of(5, {2}).split([1, 2, 3]) == ([1, 2], True)
    assert StopRule.of(3).split([1, 2, 3]) == ([1, 2, 3], True)
