"""The lenient rule as a logit transform: it must be the project's greedy lenient rule, and the identity at 0."""

from __future__ import annotations

import pytest
import torch

from viasd_adapt.core.rules import top_relative_accept
from viasd_adapt.serving.lenient import AuditCounts, accepted_drafts, apply_lenience, lenient_mask


def _rows(n=64, vocab=50, seed=0):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, vocab, generator=gen) * 2
    # a third of the drafts are q's argmax, a third its runner-up (near the top), a third random
    top2 = logits.topk(2, dim=-1).indices
    pick = torch.arange(n) % 3
    drafts = torch.where(pick == 0, top2[:, 0], torch.where(pick == 1, top2[:, 1], torch.randint(0, vocab, (n,), generator=gen)))
    return logits, drafts


@pytest.mark.parametrize("lenience", [0.0, 0.2, 0.4, 0.8])
def test_mask_is_the_projects_greedy_lenient_rule(lenience):
    logits, drafts = _rows()
    passes, regret = lenient_mask(logits, drafts, lenience)
    expected = top_relative_accept(drafts, torch.softmax(logits, -1), lenience).bool()
    # the same test q(x) >= (1 - a) max q, in log space; allow float noise at the boundary
    assert (passes == expected).float().mean() >= 0.98
    assert torch.all(regret >= 0)
    assert torch.all(regret[drafts == logits.argmax(-1)] == 0)


def test_lenience_zero_is_the_identity():
    logits, drafts = _rows()
    before = logits.clone()
    out, boosted, _ = apply_lenience(logits, torch.arange(len(drafts)), drafts, 0.0)
    assert out is logits and torch.equal(out, before) and not boosted.any()


def test_raised_drafts_become_the_argmax_exactly_where_the_rule_accepts():
    logits, drafts = _rows()
    passes, _ = lenient_mask(logits, drafts, 0.4)
    argmax_before = logits.argmax(-1)
    out, boosted, _ = apply_lenience(logits.clone(), torch.arange(len(drafts)), drafts, 0.4)
    now_accepted = out.argmax(-1) == drafts
    assert torch.equal(now_accepted, passes)  # stock greedy (argmax == draft) now computes the lenient rule
    assert torch.equal(boosted, passes & (drafts != argmax_before))
    # rows the rule rejects keep q's own argmax: the correction token is unchanged
    assert torch.equal(out.argmax(-1)[~passes], argmax_before[~passes])
    assert 0 < int(boosted.sum()) < len(drafts)  # the fixture exercises both cases


def test_rows_not_allowed_are_left_alone():
    logits, drafts = _rows()
    allowed = torch.zeros(len(drafts), dtype=torch.bool)
    before = logits.clone()
    out, boosted, _ = apply_lenience(logits, torch.arange(len(drafts)), drafts, 0.8, allowed)
    assert torch.equal(out, before) and not boosted.any()


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5])
def test_bad_lenience_is_refused(bad):
    logits, drafts = _rows(4)
    with pytest.raises(ValueError, match="lenience"):
        lenient_mask(logits, drafts, bad)


def test_shapes_are_checked():
    with pytest.raises(ValueError, match="expected"):
        lenient_mask(torch.zeros(3, 5), torch.zeros(2, dtype=torch.long), 0.2)


def test_accepted_drafts_reads_the_sampler_output():
    # request 0: 3 drafts, 2 accepted then a correction; request 1: 2 drafts all accepted + bonus;
    # request 2: no drafts (one token)
    out = torch.tensor([[5, 6, 7, -1], [1, 2, 3, -1], [9, -1, -1, -1]])
    flags, committed = accepted_drafts(out, [3, 2, 0])
    assert flags.tolist() == [True, True, False, True, True]
    assert committed == 3 + 3 + 1


def test_audit_counts_overrules_only_when_committed():
    counts = AuditCounts()
    boosted = torch.tensor([True, False, True])
    regret = torch.tensor([0.3, 0.0, 0.2])
    accepted = torch.tensor([True, True, False])  # the third was raised but came after a rejection
    counts.add_step(boosted, regret, accepted, committed=3)
    data = counts.to_json()
    assert data["overruled"] == 1 and data["committed_tokens"] == 3
    assert data["regret_per_token"] == pytest.approx(0.1)
