"""Per-cycle tier decisions (docs/method.md sections 4 and 5) on constructed distributions.

Statistical tests use the suite's chi-square goodness-of-fit test (tests/support/stats.py) at
significance 1e-3 (a correct sampler fails one such test with probability 0.001; the seeds are
fixed, so the outcome is reproducible) and check that the same test *does* reject a plausible wrong
answer, so it has the power to fail.
"""

from __future__ import annotations

import hashlib

import pytest
import torch

from tests.support.stats import ALPHA, counts_of, outside_support, samples_pvalue
from viasd_adapt.errors import ConfigError
from viasd_adapt.core.rules import lossless_accept_prob, tolerant_accept_prob
from viasd_adapt.checks import check_max_new_tokens
from viasd_adapt.core.settings import Mode, TierSettings
from viasd_adapt.core.tiers import (
    Tier,
    audit_cycle,
    cascade_candidates,
    join_cycle,
    effective_distribution,
    escalate,
    route_block,
    verify_block,
)


SIGNIFICANCE = ALPHA
LOSSY = TierSettings(alpha1=0.5, alpha2=0.3, gamma=2, mode="lossy")


def rows(*dists: list[float]) -> torch.Tensor:
    return torch.tensor(dists, dtype=torch.float32)


def fits(samples: list[int], expected: torch.Tensor) -> float:
    """Chi-square p-value of ``samples`` against ``expected``; a sample in a cell of zero mass is an
    error here even in a control (every expected distribution in this module covers its samples)."""
    assert outside_support(counts_of(samples, expected.shape[0]), expected) == 0, (samples, expected)
    return samples_pvalue(samples, expected)


# ============================================================================== verify_block


def test_verify_block_greedy_stops_at_first_mismatch():
    tokens = torch.tensor([2, 0, 1])
    proposer = torch.full((3, 4), 0.25)
    verifier = rows([0.1, 0.1, 0.7, 0.1], [0.6, 0.2, 0.1, 0.1], [0.1, 0.2, 0.3, 0.4], [0.9, 0.05, 0.03, 0.02])
    accept = lossless_accept_prob(tokens, proposer, verifier[:-1], greedy=True)
    verdict = verify_block(tokens, proposer, verifier, accept, greedy=True)
    assert verdict.n_accepted == 2
    assert verdict.next_token == 3  # argmax of the verifier at the rejected position


def test_verify_block_greedy_all_accepted_takes_bonus():
    tokens = torch.tensor([2, 0])
    proposer = torch.full((2, 4), 0.25)
    verifier = rows([0.1, 0.1, 0.7, 0.1], [0.6, 0.2, 0.1, 0.1], [0.1, 0.8, 0.05, 0.05])
    verdict = verify_block(tokens, proposer, verifier, lossless_accept_prob(tokens, proposer, verifier[:-1], True), True)
    assert (verdict.n_accepted, verdict.next_token) == (2, 1)


def test_verify_block_rejects_bad_shapes():
    with pytest.raises(ValueError, match="bonus"):
        verify_block(torch.tensor([1, 2]), torch.full((2, 3), 1 / 3), torch.full((2, 3), 1 / 3), torch.ones(2), True)


def test_verify_block_sampling_is_lossless_at_one_position():
    """Standard SD: x ~ p, accept w.p. min(1, q/p), else resample norm(max(0, q-p)) -> exactly q."""
    gen = torch.Generator().manual_seed(0)
    p = rows([0.5, 0.3, 0.15, 0.05])
    q = rows([0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25])
    outs = []
    for _ in range(6000):
        x = torch.multinomial(p[0], 1, generator=gen)
        verdict = verify_block(x, p, q, lossless_accept_prob(x, p, q[:-1], False), False, gen)
        outs.append(int(x[0]) if verdict.n_accepted == 1 else verdict.next_token)
    assert fits(outs, q[0]) > SIGNIFICANCE
    assert fits(outs, p[0]) < SIGNIFICANCE  # the test can tell the draft distribution apart


# ============================================================================== slim stage: each branch


def test_slim_stage_greedy_accept_all_and_slim_bonus():
    tokens = torch.tensor([0, 1])
    p = rows([0.6, 0.2, 0.1, 0.1], [0.2, 0.6, 0.1, 0.1])
    u = rows([0.5, 0.3, 0.1, 0.1], [0.1, 0.5, 0.3, 0.1], [0.05, 0.05, 0.85, 0.05])
    out = route_block(tokens, p, u, LOSSY, greedy=True)
    assert out.n_accepted == 2 and out.escalate_at is None
    assert out.slim_token == 2  # bonus from u, confident (0.85 >= 1 - 0.3)
    result = join_cycle(tokens, out)
    assert result.tokens == [0, 1, 2]
    assert result.tiers == [Tier.DRAFT, Tier.DRAFT, Tier.SLIM]
    assert (result.drafts_judged, result.drafts_rejected, result.escalated) == (2, 0, False)


def test_slim_stage_greedy_accept_all_unconfident_bonus_escalates():
    tokens = torch.tensor([0, 1])
    p = rows([0.6, 0.2, 0.1, 0.1], [0.2, 0.6, 0.1, 0.1])
    u = rows([0.5, 0.3, 0.1, 0.1], [0.1, 0.5, 0.3, 0.1], [0.3, 0.3, 0.3, 0.1])
    q = rows([0.7, 0.1, 0.1, 0.1], [0.1, 0.7, 0.1, 0.1], [0.1, 0.1, 0.1, 0.7])
    out = route_block(tokens, p, u, LOSSY, greedy=True)
    assert (out.n_accepted, out.slim_token, out.escalate_at) == (2, None, 2)
    verdict = escalate(tokens, p, q, out.escalate_at, LOSSY, greedy=True)
    assert (verdict.n_accepted, verdict.next_token) == (0, 3)  # q's bonus token
    result = join_cycle(tokens, out, verdict)
    assert result.tokens == [0, 1, 3]
    assert result.tiers == [Tier.DRAFT, Tier.DRAFT, Tier.FULL]
    assert (result.drafts_judged, result.drafts_rejected, result.escalated) == (2, 0, True)


def test_slim_stage_greedy_reject_then_slim_regenerates():
    tokens = torch.tensor([0, 1])
    p = rows([0.6, 0.2, 0.1, 0.1], [0.2, 0.6, 0.1, 0.1])
    # u(0) = 0.25 < 0.5 * 0.6: gate 1 rejects position 0; u is confident in token 3.
    u = rows([0.25, 0.0, 0.0, 0.75], [0.1, 0.5, 0.3, 0.1], [0.3, 0.3, 0.3, 0.1])
    out = route_block(tokens, p, u, LOSSY, greedy=True)
    assert (out.n_accepted, out.slim_token, out.escalate_at) == (0, 3, None)
    result = join_cycle(tokens, out)
    assert result.tokens == [3] and result.tiers == [Tier.SLIM]
    assert (result.drafts_judged, result.drafts_rejected) == (1, 1)
    with pytest.raises(ValueError):
        join_cycle(tokens, route_block(tokens, p, rows([0.25, 0.25, 0.25, 0.25], *u[1:].tolist()), LOSSY, True))


def test_slim_stage_greedy_reject_unconfident_escalates_tolerant_vs_framework():
    tokens = torch.tensor([0, 1])
    p = rows([0.6, 0.2, 0.1, 0.1], [0.2, 0.6, 0.1, 0.1])
    u = rows([0.5, 0.3, 0.1, 0.1], [0.3, 0.1, 0.3, 0.3], [0.3, 0.3, 0.3, 0.1])  # rejects position 1
    # q at position 1: q(1) = 0.45 >= (1 - 0.3) * 0.6 = 0.42, but q's argmax is token 2.
    q = rows([0.7, 0.1, 0.1, 0.1], [0.05, 0.45, 0.5, 0.0], [0.1, 0.1, 0.1, 0.7])
    out = route_block(tokens, p, u, LOSSY, greedy=True)
    assert (out.n_accepted, out.slim_token, out.escalate_at) == (1, None, 1)

    tolerant = escalate(tokens, p, q, 1, LOSSY, greedy=True)
    assert (tolerant.n_accepted, tolerant.next_token) == (1, 3)  # kept, then q's bonus
    result = join_cycle(tokens, out, tolerant)
    assert result.tokens == [0, 1, 3]
    assert result.tiers == [Tier.DRAFT, Tier.FULL, Tier.FULL]
    assert (result.drafts_judged, result.drafts_rejected, result.escalated) == (2, 0, True)

    framework = LOSSY.with_(escalation_rule="framework")
    strict = escalate(tokens, p, q, 1, framework, greedy=True)
    assert (strict.n_accepted, strict.next_token) == (0, 2)  # lossless greedy: argmax only
    result = join_cycle(tokens, out, strict)
    assert result.tokens == [0, 2] and result.tiers == [Tier.DRAFT, Tier.FULL]
    assert (result.drafts_judged, result.drafts_rejected) == (2, 1)


def test_slim_stage_sampling_deterministic_branches():
    """Acceptance probabilities of exactly 0 or 1 and one-token residuals make sampling decidable."""
    gen = torch.Generator().manual_seed(3)
    tokens = torch.tensor([0, 1])
    p = rows([0.5, 0.5, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0])
    # Position 0: u(0) = 0.5 >= 0.5 * 0.5 -> accept w.p. 1. Position 1: u(1) = 0 -> reject w.p. 1;
    # u is confident (0.9), and the residual max(0, u - p) lives on token 3 only.
    u = rows([0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.1, 0.9], [0.25] * 4)
    for _ in range(20):
        out = route_block(tokens, p, u, LOSSY, greedy=False, generator=gen)
        assert (out.n_accepted, out.escalate_at) == (1, None) and out.slim_token in (2, 3)
    # The residual norm(max(0, u - p)) = (0, 0, 0.1, 0.9): token 2 must show up too, at ~10%.
    seen = [route_block(tokens, p, u, LOSSY, False, gen).slim_token for _ in range(3000)]
    assert fits(seen, u[1]) > SIGNIFICANCE


# ============================================================================== accounting fuzz


def random_case(gen: torch.Generator, g: int, vocab: int, sharp: float):
    def dist(n):
        return torch.softmax(torch.randn(n, vocab, generator=gen) * sharp, dim=-1)

    p, u, q = dist(g), dist(g + 1), dist(g + 1)
    tokens = torch.multinomial(p, 1, generator=gen).squeeze(-1)
    return tokens, p, u, q


@pytest.mark.parametrize("greedy", [True, False])
@pytest.mark.parametrize("rule", ["tolerant", "framework"])
def test_combine_cycle_accounting_adds_up(greedy, rule):
    gen = torch.Generator().manual_seed(11)
    settings = TierSettings(gamma=4, escalation_rule=rule)
    seen_kinds = set()
    for _ in range(300):
        g = int(torch.randint(1, 5, (1,), generator=gen))
        tokens, p, u, q = random_case(gen, g, vocab=5, sharp=2.5)
        slim = route_block(tokens, p, u, settings, greedy, gen)
        escalation = escalate(tokens, p, q, slim.escalate_at, settings, greedy, gen) if slim.escalate_at is not None else None
        result = join_cycle(tokens, slim, escalation)
        n_draft, n_slim, n_full = (result.tiers.count(t) for t in (Tier.DRAFT, Tier.SLIM, Tier.FULL))
        assert len(result.tokens) == len(result.tiers) == n_draft + n_slim + n_full
        assert 1 <= len(result.tokens) <= g + 1
        assert n_draft == slim.n_accepted
        assert result.tokens[:n_draft] == tokens[:n_draft].tolist()
        assert 0 <= result.drafts_rejected <= 1 and result.drafts_judged <= g
        # Drafts kept as drafted, by gate 1 or by q on escalation:
        kept = n_draft + (escalation.n_accepted if escalation else 0)
        assert result.drafts_kept == kept
        assert result.tokens[:kept] == tokens[:kept].tolist()
        assert result.drafts_rejected == int(kept < g)
        assert result.escalated == (escalation is not None) == (n_full > 0)
        assert n_slim == int(slim.slim_token is not None)
        seen_kinds.add((n_slim > 0, result.escalated, kept == g))
    assert len(seen_kinds) >= 4, seen_kinds  # every branch was exercised


# ============================================================================== lossless cascade


def test_cascade_greedy_is_exactly_q_greedy():
    gen = torch.Generator().manual_seed(5)
    for _ in range(200):
        g = int(torch.randint(1, 5, (1,), generator=gen))
        tokens, p, u, _ = random_case(gen, g, vocab=6, sharp=3.0)
        q_argmax = torch.randint(0, 6, (g + 2,), generator=gen)
        candidates, cand_probs, n_kept = cascade_candidates(tokens, p, u, greedy=True)
        assert candidates[:n_kept].tolist() == tokens[:n_kept].tolist()
        assert cand_probs.shape[0] == candidates.shape[0] == n_kept + 1
        # u's greedy verdict: keep while the draft is u's argmax, then u's argmax.
        assert candidates.tolist() == u[: n_kept + 1].argmax(-1).tolist()
        # q (a one-hot table, so that "q given this prefix" is well defined) verifies the candidates.
        c = candidates.shape[0]
        q = torch.nn.functional.one_hot(q_argmax[: c + 1], 6).float() * 0.7 + 0.05
        verdict = verify_block(candidates, cand_probs, q, lossless_accept_prob(candidates, cand_probs, q[:-1], True), True)
        committed = candidates[: verdict.n_accepted].tolist() + [verdict.next_token]
        assert committed == q_argmax[: len(committed)].tolist()


class PrefixModels:
    """p, u and q as functions of the prefix, so a multi-token cascade can be simulated exactly."""

    def __init__(self, vocab: int, seed: int):
        self.vocab, self.seed, self._memo = vocab, seed, {}

    def dist(self, name: str, prefix: tuple[int, ...]) -> torch.Tensor:
        key = (name, prefix)
        if key not in self._memo:
            digest = hashlib.sha256(f"{self.seed}/{name}/{prefix}".encode()).digest()
            gen = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))
            sharp = {"p": 1.5, "u": 1.0, "q": 1.2}[name]
            self._memo[key] = torch.softmax(torch.randn(self.vocab, generator=gen) * sharp, dim=-1)
        return self._memo[key]

    def joint_q(self) -> torch.Tensor:
        """q(x0) q(x1 | x0) over all pairs, flattened."""
        q0 = self.dist("q", ())
        return torch.stack([q0[a] * self.dist("q", (a,)) for a in range(self.vocab)]).reshape(-1)


def cascade_first_two(models: PrefixModels, gamma: int, gen: torch.Generator) -> tuple[int, int]:
    """One lossless cycle p -> u -> q; the second token comes from the next cycle (q) if needed."""
    drafts: list[int] = []
    p_rows = []
    for _ in range(gamma):
        row = models.dist("p", tuple(drafts))
        p_rows.append(row)
        drafts.append(int(torch.multinomial(row, 1, generator=gen)))
    tokens = torch.tensor(drafts)
    u = torch.stack([models.dist("u", tuple(drafts[:i])) for i in range(gamma + 1)])
    candidates, cand_probs, _ = cascade_candidates(tokens, torch.stack(p_rows), u, greedy=False, generator=gen)
    cand = candidates.tolist()
    q = torch.stack([models.dist("q", tuple(cand[:i])) for i in range(len(cand) + 1)])
    verdict = verify_block(candidates, cand_probs, q, lossless_accept_prob(candidates, cand_probs, q[:-1], False), False, gen)
    out = cand[: verdict.n_accepted] + [verdict.next_token]
    if len(out) < 2:
        out.append(int(torch.multinomial(models.dist("q", (out[0],)), 1, generator=gen)))
    return out[0], out[1]


def test_cascade_candidate_is_distributed_as_u():
    gen = torch.Generator().manual_seed(1)
    p = rows([0.6, 0.25, 0.1, 0.05])
    u = rows([0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25])
    samples = []
    for _ in range(6000):
        x = torch.multinomial(p[0], 1, generator=gen)
        candidates, _, _ = cascade_candidates(x, p, u, greedy=False, generator=gen)
        samples.append(int(candidates[0]))
    assert fits(samples, u[0]) > SIGNIFICANCE
    assert fits(samples, p[0]) < SIGNIFICANCE


def test_cascade_then_q_yields_exactly_q_over_two_tokens():
    models = PrefixModels(vocab=3, seed=7)
    gen = torch.Generator().manual_seed(2)
    pairs = [cascade_first_two(models, gamma=3, gen=gen) for _ in range(5000)]
    joint = [a * 3 + b for a, b in pairs]
    assert fits(joint, models.joint_q()) > SIGNIFICANCE
    # Power check: the same samples are not distributed as u's joint.
    u0 = models.dist("u", ())
    joint_u = torch.stack([u0[a] * models.dist("u", (a,)) for a in range(3)]).reshape(-1)
    assert fits(joint, joint_u) < SIGNIFICANCE


# ============================================================================== effective distribution


def committed_at_zero(tokens, p, u, q, settings, gen):
    slim = route_block(tokens, p, u, settings, False, gen)
    escalation = escalate(tokens, p, q, slim.escalate_at, settings, False, gen) if slim.escalate_at is not None else None
    return join_cycle(tokens, slim, escalation), slim


P0 = [0.55, 0.25, 0.15, 0.05]
Q0 = [0.1, 0.3, 0.2, 0.4]
U_CONFIDENT = [0.02, 0.03, 0.9, 0.05]  # max 0.9 >= 0.7: slim resolves
U_UNSURE = [0.3, 0.1, 0.35, 0.25]  # max 0.35 < 0.7: escalate


@pytest.mark.parametrize("rule", ["tolerant", "framework"])
@pytest.mark.parametrize("u0", [U_CONFIDENT, U_UNSURE], ids=["slim-resolves", "escalates"])
def test_effective_distribution_matches_simulation_at_a_draft_position(u0, rule):
    settings = TierSettings(alpha1=0.5, alpha2=0.3, gamma=1, escalation_rule=rule)
    p, u, q = rows(P0), rows(u0, [0.25] * 4), rows(Q0, [0.25] * 4)
    gen = torch.Generator().manual_seed(4)
    samples = []
    resolves = None
    for _ in range(6000):
        x = torch.multinomial(p[0], 1, generator=gen)
        result, slim = committed_at_zero(x, p, u, q, settings, gen)
        samples.append(result.tokens[0])
        resolves = bool(slim.resolves[0])
    assert resolves == (u0 is U_CONFIDENT)
    pi = effective_distribution(p[0], u[0], q[0], settings, slim_resolves=resolves)
    assert float(pi.sum()) == pytest.approx(1.0, abs=1e-5)
    assert fits(samples, pi) > SIGNIFICANCE
    assert fits(samples, q[0]) < SIGNIFICANCE  # lossy: not q


@pytest.mark.parametrize("u_bonus", [U_CONFIDENT, U_UNSURE], ids=["slim-bonus", "full-bonus"])
def test_effective_distribution_matches_simulation_at_the_bonus_position(u_bonus):
    settings = TierSettings(gamma=1)
    p = rows(P0)
    u = rows(P0, u_bonus)  # u == p at the draft: gate 1 always accepts
    q = rows(Q0, [0.4, 0.3, 0.2, 0.1])
    gen = torch.Generator().manual_seed(6)
    samples = []
    for _ in range(4000):
        x = torch.multinomial(p[0], 1, generator=gen)
        result, _ = committed_at_zero(x, p, u, q, settings, gen)
        assert len(result.tokens) == 2
        samples.append(result.tokens[1])
    pi = effective_distribution(None, u[1], q[1], settings, slim_resolves=u_bonus is U_CONFIDENT)
    assert torch.equal(pi, u[1] if u_bonus is U_CONFIDENT else q[1])
    assert fits(samples, pi) > SIGNIFICANCE


@pytest.mark.parametrize("rule", ["tolerant", "framework"])
def test_effective_distribution_matches_simulation_after_escalation(rule):
    settings = TierSettings(gamma=2, escalation_rule=rule)
    p = rows([0.5, 0.5, 0.0, 0.0], [0.5, 0.2, 0.2, 0.1])
    u = rows([0.0, 0.0, 0.5, 0.5], [0.25] * 4, [0.25] * 4)  # drafts 0/1 always rejected; unsure
    q = rows([0.45, 0.45, 0.05, 0.05], [0.1, 0.2, 0.3, 0.4], [0.25] * 4)
    gen = torch.Generator().manual_seed(8)
    samples = []
    for _ in range(7000):
        x0 = int(torch.multinomial(p[0], 1, generator=gen))
        x1 = int(torch.multinomial(p[1], 1, generator=gen))
        result, slim = committed_at_zero(torch.tensor([x0, x1]), p, u, q, settings, gen)
        assert slim.escalate_at == 0
        if result.drafts_kept >= 1:  # q kept position 0, so position 1 was verified by q directly
            samples.append(result.tokens[1])
    assert len(samples) > 5000
    pi = effective_distribution(p[1], u[1], q[1], settings, slim_resolves=False, after_escalation=True)
    assert fits(samples, pi) > SIGNIFICANCE
    if rule == "framework":
        torch.testing.assert_close(pi, q[1])  # the lossless rule reproduces q
    else:
        assert fits(samples, q[1]) < SIGNIFICANCE


def test_effective_distribution_is_u_when_gate_is_strict_and_slim_resolves():
    """alpha1 = 0 and a confident u: tiers 1+2 are exactly SD with u as the verifier."""
    settings = TierSettings(alpha1=0.0)
    pi = effective_distribution(rows(P0)[0], rows(U_CONFIDENT)[0], rows(Q0)[0], settings, slim_resolves=True)
    torch.testing.assert_close(pi, rows(U_CONFIDENT)[0])


# ============================================================================== audit


def test_audit_cycle_greedy_flags_overruled_tokens():
    tokens = torch.tensor([0, 1])
    p = rows([0.6, 0.2, 0.1, 0.1], [0.2, 0.6, 0.1, 0.1])
    u = rows([0.5, 0.3, 0.1, 0.1], [0.1, 0.5, 0.3, 0.1], [0.05, 0.05, 0.85, 0.05])
    q = rows([0.7, 0.1, 0.1, 0.1], [0.1, 0.2, 0.6, 0.1], [0.1, 0.1, 0.7, 0.1])
    slim = route_block(tokens, p, u, LOSSY, greedy=True)
    result = join_cycle(tokens, slim)
    assert result.tokens == [0, 1, 2]
    record = audit_cycle(tokens, p, u, q, slim, result, LOSSY, greedy=True)
    # q's argmaxes are 0, 2, 2: only position 1 (accepted by gate 1) would have been overruled.
    assert record.overrule == [0.0, 1.0, 0.0]
    assert record.tv == [0.0, 1.0, 0.0]
    assert record.positions == [0, 1, 2]


def test_audit_cycle_sampling_is_clean_when_slim_equals_full():
    settings = TierSettings(alpha1=0.0, gamma=2)
    tokens = torch.tensor([0, 3])
    p = rows(P0, [0.1, 0.2, 0.3, 0.4])
    q = rows(U_CONFIDENT, [0.05, 0.05, 0.05, 0.85], [0.8, 0.1, 0.05, 0.05])
    slim = route_block(tokens, p, q, settings, greedy=False, generator=torch.Generator().manual_seed(0))
    result = join_cycle(tokens, slim)
    record = audit_cycle(tokens, p, q, q, slim, result, settings, greedy=False)
    assert len(record.overrule) == len(result.tokens)
    assert max(record.tv) < 1e-5 and max(record.overrule) < 1e-5


def test_audit_cycle_sampling_reports_positive_tv_for_a_lossy_gate():
    settings = TierSettings(alpha1=0.5, gamma=1)
    tokens = torch.tensor([0])
    p, u, q = rows(P0), rows(U_CONFIDENT, [0.25] * 4), rows(Q0, [0.25] * 4)
    slim = route_block(tokens, p, u, settings, greedy=False, generator=torch.Generator().manual_seed(0))
    result = join_cycle(tokens, slim)
    record = audit_cycle(tokens, p, u, q, slim, result, settings, greedy=False)
    pi = effective_distribution(p[0], u[0], q[0], settings, bool(slim.resolves[0]))
    assert record.tv[0] == pytest.approx(0.5 * float((pi - q[0]).abs().sum()), abs=1e-6)
    token = result.tokens[0]
    assert record.overrule[0] == pytest.approx(max(0.0, 1 - float(q[0, token] / pi[token])), abs=1e-6)


# ============================================================================== settings


def test_paper_defaults():
    s = TierSettings()
    assert (s.alpha1, s.alpha2, s.gamma, s.ratio, s.beta, s.mode) == (0.5, 0.3, 5, 0.45, 1.0, Mode.LOSSY)
    assert TierSettings(mode="AUDIT").mode is Mode.AUDIT
    assert TierSettings(mode="lossless").escalation_tolerance == 0.0
    assert TierSettings(escalation_rule="framework").escalation_tolerance == 0.0
    assert TierSettings(alpha2=0.2).escalation_tolerance == 0.2


@pytest.mark.parametrize(
    "changes, name",
    [
        (dict(alpha1=1.0), "alpha1"),
        (dict(alpha1=-0.1), "alpha1"),
        (dict(alpha1=float("nan")), "alpha1"),
        (dict(alpha2=1.5), "alpha2"),
        (dict(alpha2=-0.1), "alpha2"),
        (dict(alpha2="0.3"), "alpha2"),
        (dict(gamma=0), "gamma"),
        (dict(gamma=2.5), "gamma"),
        (dict(gamma=True), "gamma"),
        (dict(ratio=0.0), "ratio"),
        (dict(ratio=1.0), "ratio"),
        (dict(beta=0.99), "beta"),
        (dict(mode="fast"), "mode"),
        (dict(escalation_rule="maybe"), "escalation_rule"),
    ],
)
def test_settings_validation_names_the_setting(changes, name):
    with pytest.raises(ConfigError, match=name):
        TierSettings(**changes)
    with pytest.raises(ConfigError, match=name):
        TierSettings().with_(**changes)


def test_max_new_tokens_validation():
    assert check_max_new_tokens(3) == 3
    for bad in (0, -1, 2.0, True, None):
        with pytest.raises(ConfigError, match="max_new_tokens"):
            check_max_new_tokens(bad)


def test_tolerant_rule_helper_matches_formula():
    tokens = torch.tensor([0, 1])
    p = rows([0.8, 0.2], [0.5, 0.5])
    v = rows([0.2, 0.8], [0.5, 0.5])
    got = tolerant_accept_prob(tokens, p, v, 0.5, greedy=False)
    torch.testing.assert_close(got, torch.tensor([0.2 / (0.5 * 0.8), 1.0]))
    torch.testing.assert_close(tolerant_accept_prob(tokens, p, v, 0.5, greedy=True), torch.tensor([0.0, 1.0]))


@pytest.mark.parametrize("bits", [[], [0], [1], [1, 1, 0, 1], [1, 1, 1], [0, 1, 1], [1, 0, 0, 0]])
def test_leading_true_and_one_transfer_read_back(bits):
    from viasd_adapt.core.tiers import first_false, leading_true, to_host

    mask = torch.tensor(bits, dtype=torch.bool)
    expected = bits.index(0) if 0 in bits else len(bits)
    assert first_false(mask) == int(leading_true(mask)) == expected
    assert to_host(leading_true(mask), mask, torch.tensor([7, 9])) == [expected, *bits, 7, 9]
