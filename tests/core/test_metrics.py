"""TierMetrics: the one metrics type. Counts derive from token tiers, so they always add up."""

from __future__ import annotations

import json

import pytest

from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.core.tiers import AuditRecord, CycleResult, Tier

D, S, F = Tier.DRAFT, Tier.SLIM, Tier.FULL


def cycle(tiers, judged, rejected, escalated=False):
    return CycleResult(list(range(len(tiers))), list(tiers), judged, rejected, escalated)


def sample_metrics() -> TierMetrics:
    m = TierMetrics()
    m.record_cycle(cycle([D, D, S], judged=3, rejected=1), drafted=4)  # 2 kept, 1 rejected, u resolved
    m.record_cycle(cycle([D, D, D, D, F], judged=4, rejected=0, escalated=True), drafted=4)  # all kept + q bonus
    m.record_cycle(cycle([F, F], judged=2, rejected=1, escalated=True), drafted=4)  # escalated at 0
    m.full_passes, m.slim_passes = 3, 3
    return m


def test_counts_derive_from_tiers_and_add_up():
    m = sample_metrics()
    assert (m.draft_tokens, m.slim_tokens, m.full_tokens) == (6, 1, 3)
    assert m.committed == 10 == m.draft_tokens + m.slim_tokens + m.full_tokens
    assert (m.drafted, m.drafts_judged, m.drafts_rejected, m.cycles) == (12, 9, 2, 3)
    assert m.accepted_lengths == [3, 5, 2]
    assert m.rejection_rate == pytest.approx(2 / 9)
    assert m.mean_accepted_length == pytest.approx(10 / 3)
    assert m.full_passes_per_token == pytest.approx(0.3)
    assert m.slim_passes_per_token == pytest.approx(0.3)


def test_empty_metrics_have_safe_ratios():
    m = TierMetrics()
    assert (m.committed, m.rejection_rate, m.mean_accepted_length, m.full_passes_per_token) == (0, 0.0, 0.0, 0.0)
    assert m.overrule_rate is None and m.tv_distance is None


def test_audit_records_rates_and_positions():
    m = sample_metrics()
    m.record_audit(AuditRecord(overrule=[0.0, 0.7, 0.2], tv=[0.1, 0.3, 0.2], positions=[0, 1, 2]), offset=0)
    m.record_audit(AuditRecord(overrule=[1.0, 0.5], tv=[1.0, 0.0], positions=[0, 1]), offset=3)
    assert m.audited == 5
    assert m.overrule_rate == pytest.approx(2.4 / 5)
    assert m.tv_distance == pytest.approx(1.6 / 5)
    assert m.overruled_positions == [1, 3, 4]  # overrule chance >= 0.5, shifted by the cycle offset


def test_trim_within_the_last_cycle():
    m = sample_metrics()
    m.trim_to(9)
    assert m.committed == 9 and m.token_tiers[-1] == F and m.full_tokens == 2
    assert m.accepted_lengths == [3, 5, 1]
    m.trim_to(20)  # never grows
    assert m.committed == 9


def test_trim_across_cycles_keeps_lengths_consistent():
    m = sample_metrics()
    m.trim_to(4)
    assert m.token_tiers == [D, D, S, D]
    assert sum(m.accepted_lengths) == m.committed == 4
    assert m.accepted_lengths == [3, 1, 0]


def test_merge_sums_and_concatenates_without_touching_inputs():
    a, b = sample_metrics(), sample_metrics()
    b.record_audit(AuditRecord([1.0], [0.5], [0]), offset=0)
    before = (a.to_dict(), b.to_dict())
    merged = a.merge(b)
    assert (a.to_dict(), b.to_dict()) == before
    assert merged.committed == 20 and merged.cycles == 6 and merged.drafted == 24
    assert merged.draft_tokens == 12 and merged.slim_tokens == 2 and merged.full_tokens == 6
    assert merged.rejection_rate == pytest.approx(4 / 18)
    assert merged.accepted_lengths == a.accepted_lengths + b.accepted_lengths
    assert merged.audited == 1 and merged.tv_distance == pytest.approx(0.5)
    assert merged.full_passes == 6


def test_to_dict_is_json_ready_and_has_the_derived_fields():
    m = sample_metrics()
    data = json.loads(json.dumps(m.to_dict()))
    for key in ("committed", "draft_tokens", "slim_tokens", "full_tokens", "rejection_rate", "mean_accepted_length",
                "full_passes_per_token", "slim_passes_per_token", "overrule_rate", "tv_distance", "full_passes",
                "slim_passes", "accepted_lengths"):
        assert key in data, key
    assert data["committed"] == 10 and data["draft_tokens"] == 6 and data["token_tiers"] == [1, 1, 2, 1, 1, 1, 1, 3, 3, 3]


def test_trim_drops_the_audit_of_trimmed_tokens():
    from viasd_adapt.core.tiers import AuditRecord

    m = TierMetrics()
    m.record_cycle(cycle([D, D, F], judged=2, rejected=0), drafted=2)
    m.record_audit(AuditRecord(overrule=[0.0, 1.0, 0.0], tv=[0.1, 0.9, 0.0], positions=[0, 1, 2], tiers=[1, 1, 3]), offset=0)
    m.record_cycle(cycle([D, F], judged=1, rejected=0), drafted=1)
    m.record_audit(AuditRecord(overrule=[1.0, 0.0], tv=[1.0, 0.0], positions=[0, 1], tiers=[1, 3]), offset=3)
    assert m.audited == 5 and m.overruled_positions == [1, 3]
    m.trim_to(3)
    assert m.audited == 3 and m.overruled_positions == [1]
    assert m.overrule_rate == pytest.approx(1 / 3) and m.overrule_rate_by_tier == {1: 0.5, 2: None, 3: 0.0}
