"""Per-cycle decisions of the three-tier verifier, as pure functions.

No model appears here: the inputs are the draft tokens and the distributions p (drafter), u (slim
verifier) and q (full verifier) over a block, already warped by :mod:`viasd_adapt.core.sampling`.
Adapters run the models; these functions decide what to commit. The acceptance rules they apply come
from a rules object (:class:`~viasd_adapt.core.rules.TierRules`: the built-in rules, or a plugin
manager's hooks), called by keyword.

Shapes, for a block of ``g`` draft tokens:
    tokens  ``(g,)``      the drafts
    p       ``(g, V)``    the drafter's distribution at each draft position
    u, q    ``(g+1, V)``  the verifier's distribution at each draft position plus the bonus position
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

import torch

from viasd_adapt.core.modes import CyclePath, mode_row
from viasd_adapt.core.rules import BUILTIN_RULES, TierRules, gather_token_probs, rule_for
from viasd_adapt.core.sampling import normalise_residual, sample_or_argmax
from viasd_adapt.core.settings import Mode, TierSettings


class Tier(IntEnum):
    """Which tier committed a token."""

    DRAFT = 1  # accepted as drafted (gate 1 in lossy mode; q's check in lossless mode)
    SLIM = 2  # produced by the slim verifier
    FULL = 3  # committed after the full verifier ran (escalation, or q's correction/bonus)


@dataclass(frozen=True)
class BlockVerdict:
    """Outcome of one speculative verification of a block by a single verifier."""

    n_accepted: int
    next_token: int
    accept_probs: torch.Tensor


def _check_block(tokens: torch.Tensor, proposer: torch.Tensor, verifier: torch.Tensor) -> None:
    g = tokens.shape[0]
    if tokens.dim() != 1 or proposer.shape[0] != g or verifier.shape[0] != g + 1:
        raise ValueError(
            f"block shapes disagree: tokens {tuple(tokens.shape)}, proposer {tuple(proposer.shape)}, "
            f"verifier {tuple(verifier.shape)} (verifier needs one more row, for the bonus token)"
        )
    if proposer.shape[-1] != verifier.shape[-1]:
        raise ValueError(
            f"proposer and verifier vocabularies differ: {proposer.shape[-1]} vs {verifier.shape[-1]}"
        )


def _acceptance_draws(accept_probs: torch.Tensor, greedy: bool, generator: torch.Generator | None) -> torch.Tensor:
    """Which positions pass. Greedy rules return 0/1, so a fixed 0.5 draw makes them exact."""
    if greedy:
        draws = torch.full_like(accept_probs, 0.5)
    else:
        draws = torch.rand(accept_probs.shape, generator=generator, device=accept_probs.device)
    return draws < accept_probs


def leading_true(mask: torch.Tensor) -> torch.Tensor:
    """Number of leading True entries of a 1-D bool tensor, as a 0-d long tensor on its device.

    A cumulative product instead of ``nonzero``: ``nonzero`` must size its output, which waits for
    the device, and reading its first entry waits again. This waits for nothing.
    """
    return mask.to(torch.long).cumprod(0).sum()


def first_false(mask: torch.Tensor) -> int:
    """Index of the first False entry of a 1-D bool tensor, or its length when all are True (one
    host sync)."""
    return int(leading_true(mask))


def to_host(*tensors: torch.Tensor) -> list[int]:
    """Several integer (or bool) tensors read back in one device-to-host transfer, flattened and
    concatenated in order. A decision that needs a count and a token costs one sync, not one each."""
    device = tensors[0].device
    return torch.cat([t.reshape(-1).to(device=device, dtype=torch.long) for t in tensors]).tolist()


def verify_block(
    tokens: torch.Tensor,
    proposer: torch.Tensor,
    verifier: torch.Tensor,
    accept_probs: torch.Tensor,
    greedy: bool,
    generator: torch.Generator | None = None,
) -> BlockVerdict:
    """Speculative verification of ``tokens`` (drawn from ``proposer``) by ``verifier``.

    Walks the block, stops at the first rejection and replaces that token with the verifier's
    argmax (greedy) or a sample from ``norm(max(0, verifier - proposer))``. If every token passes,
    the next token is the verifier's bonus token. With the lossless rule's ``accept_probs`` this is the standard
    lossless rule; other acceptance probabilities make it tolerant.

    Greedy, the count and the verifier's argmax of every row come back in one transfer (the token
    is the argmax of row n either way); sampling needs the count before it can draw.
    """
    _check_block(tokens, proposer, verifier)
    passed = _acceptance_draws(accept_probs, greedy, generator)
    if greedy:
        values = to_host(leading_true(passed), verifier.argmax(dim=-1))
        n = values[0]
        return BlockVerdict(n, values[1 + n], accept_probs)
    n = first_false(passed)
    if n < tokens.shape[0]:
        residual = normalise_residual(verifier[n] - proposer[n], verifier[n])
        next_token = sample_or_argmax(residual, False, generator)
    else:
        next_token = sample_or_argmax(verifier[n], greedy, generator)
    return BlockVerdict(n, next_token, accept_probs)


# --------------------------------------------------------------------------- lossy: three tiers


@dataclass(frozen=True)
class RouteDecision:
    """Tiers 1 and 2 of a block: what gate 1 and the router decided before q is (maybe) consulted.

    Exactly one of ``slim_token`` and ``escalate_at`` is set. ``n_accepted == len(tokens)`` means
    the whole block passed gate 1 and the undecided position is the bonus position.
    """

    n_accepted: int
    slim_token: int | None
    escalate_at: int | None
    gate1_probs: torch.Tensor
    confidence: torch.Tensor
    resolves: torch.Tensor


def three_tier_checks(settings: TierSettings):
    """The checks of the three tiers (gate 1, then escalation): the row of ``settings``' mode when it
    runs the three tiers (lossy, audit, or a mode added to the table), else lossy's (a stage asked on
    its own, with settings of another mode)."""
    row = mode_row(settings.mode)
    return row.rule if row.path is CyclePath.THREE_TIERS else rule_for(Mode.LOSSY)


def route_block(
    tokens: torch.Tensor,
    p: torch.Tensor,
    u: torch.Tensor,
    settings: TierSettings,
    greedy: bool,
    generator: torch.Generator | None = None,
    rules: TierRules = BUILTIN_RULES,
) -> RouteDecision:
    """Tiers 1 and 2: gate 1 on every draft, then the router lets the slim verifier resolve the
    first rejected position (or the bonus position) itself, or asks for escalation (tier 3)."""
    _check_block(tokens, p, u)
    gate1 = three_tier_checks(settings).drafts.accept_prob(rules, tokens, p, u, settings, greedy)
    passed = _acceptance_draws(gate1, greedy, generator)
    confidence = rules.viasd_slim_confidence(p=p, u=u, settings=settings)
    resolves = rules.viasd_slim_resolves(confidence=confidence, settings=settings).bool()
    # k, whether u resolves position k, and (greedy) u's argmax there: one transfer
    rows = resolves.numel()
    values = to_host(leading_true(passed), resolves, *([u.argmax(dim=-1)] if greedy else []))
    k = values[0]
    if not values[1 + k]:
        return RouteDecision(k, None, k, gate1, confidence, resolves)
    if greedy:
        token = values[1 + rows + k]
    elif k < tokens.shape[0]:
        token = sample_or_argmax(normalise_residual(u[k] - p[k], u[k]), False, generator)
    else:
        token = sample_or_argmax(u[k], False, generator)
    return RouteDecision(k, token, None, gate1, confidence, resolves)


def escalate(
    tokens: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor,
    start: int,
    settings: TierSettings,
    greedy: bool,
    generator: torch.Generator | None = None,
    rules: TierRules = BUILTIN_RULES,
) -> BlockVerdict:
    """Tier 3: q verifies ``tokens[start:]`` (the first of them already failed gate 1)."""
    _check_block(tokens, p, q)
    rest, p_rest, q_rest = tokens[start:], p[start:], q[start:]
    accept = three_tier_checks(settings).then.accept_prob(rules, rest, p_rest, q_rest, settings, greedy)
    return verify_block(rest, p_rest, q_rest, accept, greedy, generator)


@dataclass
class CycleResult:
    """The tokens one cycle committed, with each token's tier and the cycle's draft accounting."""

    tokens: list[int] = field(default_factory=list)
    tiers: list[Tier] = field(default_factory=list)
    drafts_judged: int = 0
    drafts_rejected: int = 0
    escalated: bool = False

    @property
    def drafts_kept(self) -> int:
        return self.drafts_judged - self.drafts_rejected


def verified_cycle(tokens: list[int], n_accepted: int, n_drafts: int, drafted: int) -> CycleResult:
    """A cycle whose candidates q verified (plain SD, the lossless cascade, EAGLE's paths).

    ``tokens`` are what the cycle commits: the first ``n_accepted`` are candidates q kept (drafts
    for the first ``n_drafts`` candidates, slim-verifier tokens after them), the rest q's own
    correction or bonus. ``drafted`` is the block length: the drafts kept, plus the one q rejected
    when it stopped inside the block, are the judged drafts.
    """
    tiers = [Tier.DRAFT if i < n_drafts else Tier.SLIM for i in range(n_accepted)]
    tiers += [Tier.FULL] * (len(tokens) - n_accepted)
    kept = min(n_accepted, n_drafts)
    stopped_inside = int(kept < drafted)
    return CycleResult(list(tokens), tiers, kept + stopped_inside, stopped_inside)


def join_cycle(
    tokens: torch.Tensor | list[int], slim: RouteDecision, escalation: BlockVerdict | None = None
) -> CycleResult:
    """Joins tiers 1-2 (``slim``) and, if any, the escalation into the committed tokens of the cycle.

    ``tokens``: the drafts, as a tensor or (cheaper on a GPU: no read-back) as host ids."""
    drafts = tokens.tolist() if isinstance(tokens, torch.Tensor) else list(tokens)
    g, k = len(drafts), slim.n_accepted
    result = CycleResult(drafts[:k], [Tier.DRAFT] * k)
    if slim.slim_token is not None:
        result.tokens.append(slim.slim_token)
        result.tiers.append(Tier.SLIM)
        result.drafts_judged = min(k + 1, g)
        result.drafts_rejected = int(k < g)
        return result
    if escalation is None:
        raise ValueError("the slim stage escalated, so the escalation verdict is required")
    n2 = escalation.n_accepted
    result.tokens += drafts[k : k + n2] + [escalation.next_token]
    result.tiers += [Tier.FULL] * (n2 + 1)
    result.escalated = True
    result.drafts_judged = k + n2 + int(k + n2 < g)
    result.drafts_rejected = int(k + n2 < g)
    return result


# --------------------------------------------------------------------------- lossless: cascade


def cascade_candidates(
    tokens: torch.Tensor,
    p: torch.Tensor,
    u: torch.Tensor,
    greedy: bool,
    generator: torch.Generator | None = None,
    rules: TierRules = BUILTIN_RULES,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The lossless cascade p -> u: u verifies the drafts with the lossless rule (``rules``).

    Returns ``(candidates, candidate_probs, n_drafts_kept)``: the kept drafts plus u's correction
    (or bonus) token, and u's distribution at each candidate position. Every candidate is then
    distributed as u given its prefix, so q verifying the candidates against ``candidate_probs``
    with the lossless rule yields exactly q's distribution: the slim tier changes cost, never
    output.
    """
    accept = rule_for(Mode.LOSSLESS).drafts.accept_prob(rules, tokens, p, u, None, greedy)
    verdict = verify_block(tokens, p, u, accept, greedy, generator)
    n = verdict.n_accepted
    candidates = torch.cat([tokens[:n], tokens.new_tensor([verdict.next_token])])
    return candidates, u[: n + 1], n


def extension_candidates(tokens: torch.Tensor, p: torch.Tensor, u: torch.Tensor, greedy: bool,
                         generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The lossless cascade with u as a proposer only: every draft stays a candidate, and u adds
    the token after the block (its row ``g``).

    Returns ``(candidates, candidate_probs, n_drafts_kept = g)`` like :func:`cascade_candidates`;
    each candidate's probability is that of the distribution it was drawn from (p for the drafts,
    u for the extra token), so q's lossless check of them stays exact. Used where the drafts were
    already chosen by another rule (EAGLE's tree, whose first-sample chain is the block) and u's
    judgement of them would only cost acceptance.
    """
    g = tokens.shape[0]
    extra = sample_or_argmax(u[g], greedy, generator)
    return torch.cat([tokens, tokens.new_tensor([extra])]), torch.cat([p, u[g : g + 1]]), g


# --------------------------------------------------------------------------- audit


def _tv(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(0.5 * (a - b).abs().sum())


def _kept_mass(check, rules: TierRules, proposer: torch.Tensor, verifier: torch.Tensor,
               settings: TierSettings) -> torch.Tensor:
    """Per-token probability of "drafted as v and accepted" at one position: ``p(v)`` times the
    probability the check accepts v, asked of ``rules`` about every token of the vocabulary."""
    return proposer * check.every_token_accept_prob(rules, proposer, verifier, settings)


def _escalated_position_distribution(p: torch.Tensor, q: torch.Tensor, gate_mass_1: torch.Tensor,
                                     escalation_accept: torch.Tensor) -> torch.Tensor:
    """Distribution of the token q commits at a position whose draft already failed gate 1."""
    rejected_mass = (1.0 - gate_mass_1.sum()).clamp_min(1e-30)
    draft_given_rejection = (p - gate_mass_1).clamp_min(0.0) / rejected_mass
    kept = draft_given_rejection * escalation_accept
    return kept + (1.0 - kept.sum()).clamp_min(0.0) * normalise_residual(q - p, q)


def effective_distribution(
    p: torch.Tensor | None,
    u: torch.Tensor,
    q: torch.Tensor,
    settings: TierSettings,
    slim_resolves: bool,
    after_escalation: bool = False,
    rules: TierRules = BUILTIN_RULES,
) -> torch.Tensor:
    """Exact distribution of the token the lossy sampler commits at one position.

    ``p is None`` marks the bonus position (no draft). ``after_escalation`` marks positions that q
    verifies directly, after an earlier position in the same block was escalated. This is what the
    audit compares with q; it realises the paper's mixture pi = (1-d2)((1-d1) p + d1 u) + d2 q.
    Gate 1 and escalation are asked of ``rules`` (:func:`~viasd_adapt.core.rules.rule_for`), so a
    plugin that answers them is what the audit scores.
    """
    checks = three_tier_checks(settings)
    if p is None:
        return q if after_escalation or not slim_resolves else u
    if after_escalation:
        kept = _kept_mass(checks.then, rules, p, q, settings)
        return kept + (1.0 - kept.sum()).clamp_min(0.0) * normalise_residual(q - p, q)
    kept = _kept_mass(checks.drafts, rules, p, u, settings)
    rejected = (1.0 - kept.sum()).clamp_min(0.0)
    if slim_resolves:
        return kept + rejected * normalise_residual(u - p, u)
    escalation_accept = checks.then.every_token_accept_prob(rules, p, q, settings)
    return kept + rejected * _escalated_position_distribution(p, q, kept, escalation_accept)


@dataclass
class AuditRecord:
    """Audit of one cycle: for each committed token, the chance lossless q would have overruled it,
    the total-variation distance between the effective distribution and q at its position, and
    the tier that committed it (so overrules can be reported per tier)."""

    overrule: list[float] = field(default_factory=list)
    tv: list[float] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    tiers: list[int] = field(default_factory=list)


def _point_mass(row: torch.Tensor, token: int) -> torch.Tensor:
    mass = torch.zeros_like(row)
    mass[token] = 1.0
    return mass


def _score_token(token: int, pi: torch.Tensor | None, q_row: torch.Tensor, greedy: bool) -> tuple[float, float]:
    """(overrule, TV) of one committed token whose effective distribution is ``pi``.

    Greedy compares point masses: the token against q's argmax (so TV is 0 or 1). Sampling: the
    overrule probability is ``1 - min(1, q(x) / pi(x))``, the rejection chance under lossless
    verification with pi as the proposal.
    """
    if greedy:
        q_choice = int(q_row.argmax())
        overrule = float(token != q_choice)
        return overrule, overrule
    ratio = q_row[token] / pi[token].clamp_min(1e-30)
    return float(1.0 - ratio.clamp(max=1.0)), _tv(pi, q_row)


def audit_cycle(
    tokens: torch.Tensor,
    p: torch.Tensor,
    u: torch.Tensor,
    q: torch.Tensor,
    slim: RouteDecision,
    result: CycleResult,
    settings: TierSettings,
    greedy: bool,
    rules: TierRules = BUILTIN_RULES,
) -> AuditRecord:
    """Scores a lossy cycle against the full verifier run in shadow (see :func:`_score_token`)."""
    g, k = tokens.shape[0], slim.n_accepted

    def effective(j: int) -> torch.Tensor:
        return effective_distribution(p[j] if j < g else None, u[j], q[j], settings, bool(slim.resolves[min(j, g)]),
                                      after_escalation=j > k, rules=rules)

    return _audit(result, q, greedy, effective)


def _audit(result: CycleResult, q: torch.Tensor, greedy: bool, effective) -> AuditRecord:
    """Scores each committed token of ``result`` against q; ``effective(j)`` is the sampler's
    distribution at position j (not asked for in greedy decoding, which compares point masses)."""
    record = AuditRecord()
    for j, (token, tier) in enumerate(zip(result.tokens, result.tiers)):
        overrule, tv = _score_token(token, None if greedy else effective(j), q[j], greedy)
        record.overrule.append(overrule)
        record.tv.append(tv)
        record.positions.append(j)
        record.tiers.append(int(tier))
    return record


def audit_lenient_cycle(
    tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor, result: CycleResult, settings: TierSettings, greedy: bool,
    rules: TierRules = BUILTIN_RULES,
) -> AuditRecord:
    """The same audit for the lenient baseline, which has q at hand anyway (so it is free).

    At a draft position the lenient sampler commits each token v with probability ``p(v)`` times
    the mode's check of the drafts (the lenient rule, asked of ``rules``), plus the leftover mass spread as
    ``norm(max(0, q - p))``; at the bonus position it samples q itself.
    """
    g = tokens.shape[0]

    def effective(j: int) -> torch.Tensor:
        if j >= g:
            return q[j]
        kept = _kept_mass(rule_for(settings.mode).drafts, rules, p[j], q[j], settings)
        return kept + (1.0 - kept.sum()).clamp_min(0.0) * normalise_residual(q[j] - p[j], q[j])

    return _audit(result, q, greedy, effective)


__all__ = ["Tier"]
