"""Where every committed token's tier is decided: one function, every framework, every mode.

:func:`decide_cycle` takes one block of drafts with the drafter's distributions ``p`` and the
target-side verifiers as *lazy* callables, decides what the cycle commits and which tier committed
each token, and reports how many slim and full passes it asked for. The verifiers are lazy
because whether q runs at all is part of the decision (lossy mode calls it only on escalation);
adapters wrap whatever runs their models (a KV-cached runner, EAGLE's tree, a shared-prefix
resume) in two callables and never decide a tier themselves.

Per cycle path (:class:`~viasd_adapt.core.modes.CyclePath`; each mode's row in the table of modes
says which it runs, :data:`_PATHS` maps a path to its function):

* full-only, ``none``: q verifies the drafts with the lossless SD rule (untiered SD).
* full-only, ``lenient``: q verifies the drafts and accepts x when ``q(x) >= (1 - a) p(x)`` (sampling), or
  when ``q(x) >= (1 - a) max_v q(v)`` (greedy); ``a = 0`` is exactly ``none`` in both cases.
* cascade, ``lossless``: p -> u -> q. u verifies the drafts losslessly and adds its own
  correction (or bonus); q verifies those candidates against u's distribution. With
  ``CyclePolicy.slim_extends_only`` u judges no draft and only adds the token after the block
  (EAGLE's ``route`` strategy); q then verifies each candidate against the distribution it came from.
* three tiers, ``lossy`` / ``audit``: gate 1 (p -> u), the router (tier 2), escalation to q (tier 3); audit
  also runs q in shadow every cycle and scores each committed token against it.

Everything here is pure tensor code around the callables: :mod:`viasd_adapt.core.tiers` holds the
per-stage math, and every acceptance rule (lossless, lenient, gate 1, the router, escalation) is
asked of the policy's rules object (:class:`~viasd_adapt.core.rules.TierRules`), so a plugin that
answers a rule hook decides it here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from viasd_adapt.core.modes import CyclePath, mode_row
from viasd_adapt.core.rules import BUILTIN_RULES, TierRules, rule_for
from viasd_adapt.core.settings import Mode, TierSettings
from viasd_adapt.core.tiers import (
    AuditRecord,
    CycleResult,
    Tier,
    audit_cycle,
    audit_lenient_cycle,
    cascade_candidates,
    escalate,
    extension_candidates,
    join_cycle,
    route_block,
    verified_cycle,
    verify_block,
)

#: ``tokens (n,) -> probs (n + 1, V)``: a verifier's warped next-token distributions after the
#: committed sequence extended by ``tokens`` (one row per token, plus the row after the last).
VerifierCall = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Verifiers:
    """The target-side models a cycle may consult.

    ``slim`` is None for the modes that need no slim verifier (none, lenient).
    """

    full: VerifierCall
    slim: VerifierCall | None = None


@dataclass(frozen=True)
class CyclePolicy:
    """How a framework verifies: the settings, greedy or sampling, the rules, whether a block
    that is committed whole earns a bonus token after it (PEARL's next block takes that position,
    so it sets ``bonus_after_block=False``), and, in lossless mode, whether the slim verifier only
    extends the block instead of judging it (:func:`~viasd_adapt.core.tiers.extension_candidates`)."""

    settings: TierSettings
    greedy: bool
    rules: TierRules = BUILTIN_RULES
    bonus_after_block: bool = True
    slim_extends_only: bool = False
    reveal_untiered: bool = False


@dataclass(frozen=True)
class StopRule:
    """Where generation stops: a token budget, EOS ids, and optionally a caller's test
    ``stop_after(kept_tokens)`` (e.g. transformers' stopping criteria over the prefix + kept tokens),
    asked after each token so that generation ends at the first token that satisfies it, exactly
    where one-token-at-a-time decoding would. Applied to every cycle *before* it is counted or
    shown to observers, so no hook ever sees a token the caller drops."""

    budget: int | None = None
    eos: frozenset[int] = frozenset()
    stop_after: Callable[[list[int]], bool] | None = None

    @classmethod
    def of(cls, budget: int | None = None, eos: Iterable[int] = (),
           stop_after: Callable[[list[int]], bool] | None = None) -> "StopRule":
        return cls(budget, frozenset(int(e) for e in eos), stop_after)

    def split(self, tokens: list[int]) -> tuple[list[int], bool]:
        """The tokens to keep (up to the budget and the first EOS, inclusive) and whether to stop."""
        kept: list[int] = []
        for token in tokens if self.budget is None else tokens[: self.budget]:
            kept.append(token)
            if token in self.eos or (self.stop_after is not None and self.stop_after(kept)):
                return kept, True
        return kept, self.budget is not None and len(kept) >= self.budget

    def clip(self, result: CycleResult) -> CycleResult:
        kept, _ = self.split(result.tokens)
        del result.tokens[len(kept) :], result.tiers[len(kept) :]
        return result


@dataclass
class CycleOutcome:
    """One decided cycle: the committed tokens with their tiers, the passes it asked for, and (in
    audit and lenient modes) how each committed token scores against q."""

    result: CycleResult
    slim_passes: int = 0
    full_passes: int = 0
    audit: AuditRecord | None = None
    #: with ``CyclePolicy.reveal_untiered``, in a tiered cycle whose full pass saw drafts: the
    #: probability that untiered SD's rule accepts each of the first drafts that pass saw (0 or 1
    #: when greedy), in order; None when the cycle ran no full pass over the drafts
    untiered_accept: tuple[float, ...] | None = None


@dataclass
class _Calls:
    """Counts the verifier calls a decision makes."""

    verifiers: Verifiers
    slim_passes: int = 0
    full_passes: int = 0
    untiered_accept: tuple[float, ...] | None = None

    def slim(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.verifiers.slim is None:
            raise ValueError("this mode needs a slim verifier, but Verifiers.slim is None")
        self.slim_passes += 1
        return self.verifiers.slim(tokens)

    def full(self, tokens: torch.Tensor) -> torch.Tensor:
        self.full_passes += 1
        return self.verifiers.full(tokens)


def end_at_block(result: CycleResult, drafts: list[int]) -> CycleResult:
    """Drops what a cycle committed after its block when it committed the whole block.

    Used when the framework has no bonus position (PEARL). Whether the tokens are dropped depends
    only on the tokens before them, so a mode that was exact stays exact.
    """
    g = len(drafts)
    if len(result.tokens) > g and result.tokens[:g] == drafts:
        del result.tokens[g:], result.tiers[g:]
    return result


def decide_cycle(
    drafts: torch.Tensor,
    p: torch.Tensor,
    verifiers: Verifiers,
    policy: CyclePolicy,
    generator: torch.Generator | None = None,
    stop: StopRule = StopRule(),
    draft_ids: list[int] | None = None,
) -> CycleOutcome:
    """Decides one cycle (see the module docstring for each mode).

    Args:
        drafts: ``(g,)`` draft token ids, on the same device as ``p``.
        p: ``(g, V)`` the drafter's warped distributions at the draft positions.
        verifiers: the lazy slim and full verifiers.
        policy: settings (the mode among them), greedy or sampling, rules, bonus position.
        generator: the random source of every acceptance draw and resample.
        stop: the budget and EOS cut applied before the cycle is audited or counted.
        draft_ids: ``drafts`` as host ids when the caller has them (saves reading them back from
            the device); read once here otherwise.
    """
    calls = _Calls(verifiers)
    mode = policy.settings.mode
    ids = list(draft_ids) if draft_ids is not None else drafts.tolist()
    if len(ids) != drafts.shape[0]:
        raise ValueError(f"draft_ids has {len(ids)} ids for {drafts.shape[0]} drafts")
    result, audit = _PATHS[mode_row(mode).path](drafts, ids, p, calls, policy, generator, stop)
    return CycleOutcome(result, calls.slim_passes, calls.full_passes, audit, calls.untiered_accept)


def untiered_accept(drafts: torch.Tensor, p: torch.Tensor, q: torch.Tensor, seen: int, policy: CyclePolicy) -> tuple[float, ...]:
    """What a full pass over the first ``seen`` drafts shows of untiered SD's cycle: the probability
    that its rule (the lossless one, asked of the run's rules, as mode ``none`` asks it) accepts each
    of those drafts. ``q``'s rows ``0 .. seen - 1`` must be q's distributions at those drafts.
    Computed after the cycle's own decision and from no random draw, so the cycle is unchanged."""
    if seen <= 0:
        return ()
    accept = rule_for(Mode.NONE).drafts.accept_prob(policy.rules, drafts[:seen], p[:seen], q[:seen], policy.settings,
                                                    policy.greedy)
    return tuple(float(a) for a in accept.clamp(0.0, 1.0).tolist())


def _finish(result: CycleResult, ids: list[int], policy: CyclePolicy, stop: StopRule) -> CycleResult:
    if not policy.bonus_after_block:
        end_at_block(result, ids)
    return stop.clip(result)


def _full_only(drafts, ids, p, calls: _Calls, policy: CyclePolicy, generator, stop) -> tuple[CycleResult, AuditRecord | None]:
    """The full-only path (none, lenient): q alone verifies the drafts with the mode's check; a mode
    whose row scores its tokens (lenient) gets the audit record, which q at hand makes free."""
    g, greedy, settings, rules = drafts.shape[0], policy.greedy, policy.settings, policy.rules
    q = calls.full(drafts)
    accept = rule_for(settings.mode).drafts.accept_prob(rules, drafts, p, q, settings, greedy)
    verdict = verify_block(drafts, p, q, accept, greedy, generator)
    n = verdict.n_accepted
    result = _finish(verified_cycle(ids[:n] + [verdict.next_token], n, g, g), ids, policy, stop)
    if not mode_row(settings.mode).scores:
        return result, None
    return result, audit_lenient_cycle(drafts, p, q, result, settings, greedy, rules)


def _cascade(drafts, ids, p, calls: _Calls, policy: CyclePolicy, generator, stop) -> tuple[CycleResult, None]:
    """The cascade path (lossless): p -> u -> q. Every committed token is q's (argmax, or exactly q-distributed)."""
    g, greedy, rules = drafts.shape[0], policy.greedy, policy.rules
    u = calls.slim(drafts)
    if policy.slim_extends_only:
        candidates, candidate_probs, n_kept = extension_candidates(drafts, p, u, greedy, generator)
    else:
        candidates, candidate_probs, n_kept = cascade_candidates(drafts, p, u, greedy, generator, rules)
    if not policy.bonus_after_block and n_kept == g:
        candidates, candidate_probs = candidates[:g], candidate_probs[:g]  # u's bonus would be dropped
    q = calls.full(candidates)
    accept = rule_for(policy.settings.mode).then.accept_prob(rules, candidates, candidate_probs, q, policy.settings, greedy)
    verdict = verify_block(candidates, candidate_probs, q, accept, greedy, generator)
    n = verdict.n_accepted
    if policy.reveal_untiered:  # q's rows 0 .. n_kept follow the kept drafts, which are the block's first
        calls.untiered_accept = untiered_accept(drafts, p, q, min(n_kept + 1, g), policy)
    # the kept drafts are known on the host; only u's own token (when q kept it) is read back
    candidate_ids = ids[: min(n, n_kept)] + (candidates[n_kept:n].tolist() if n > n_kept else [])
    result = verified_cycle(candidate_ids + [verdict.next_token], n, n_kept, g)
    return _finish(result, ids, policy, stop), None


def _three_tiers(drafts, ids, p, calls: _Calls, policy: CyclePolicy, generator, stop) -> tuple[CycleResult, AuditRecord | None]:
    """The three-tier path (lossy, audit): gate 1, the router, and escalation to q only when u is
    unsure; a mode whose row scores its tokens (audit) also runs q in shadow every cycle."""
    g, greedy, settings = drafts.shape[0], policy.greedy, policy.settings
    audit = mode_row(settings.mode).scores
    u = calls.slim(drafts)
    q = calls.full(drafts) if audit else None  # shadow q every cycle; reused if the cycle escalates
    route = route_block(drafts, p, u, settings, greedy, generator, policy.rules)
    if route.n_accepted == g and not policy.bonus_after_block:
        result = CycleResult(list(ids), [Tier.DRAFT] * g, drafts_judged=g, drafts_rejected=0)
    else:
        escalation = None
        if route.escalate_at is not None:
            q = q if q is not None else calls.full(drafts)
            escalation = escalate(drafts, p, q, route.escalate_at, settings, greedy, generator, policy.rules)
            if policy.reveal_untiered:  # q saw the whole block
                calls.untiered_accept = untiered_accept(drafts, p, q, g, policy)
        result = join_cycle(ids, route, escalation)
    result = _finish(result, ids, policy, stop)
    record = audit_cycle(drafts, p, u, q, route, result, settings, greedy, policy.rules) if audit else None
    return result, record


#: Each cycle path's decision (the mode's row says which path it runs).
_PATHS = {CyclePath.FULL_ONLY: _full_only, CyclePath.CASCADE: _cascade, CyclePath.THREE_TIERS: _three_tiers}


__all__ = [
    "CycleOutcome",
    "CyclePolicy",
    "StopRule",
    "VerifierCall",
    "Verifiers",
    "decide_cycle",
    "end_at_block",
    "untiered_accept",
]
