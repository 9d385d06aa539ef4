"""The one metrics type every adapter and the benchmark report.

Definitions (also in docs/method.md sections 10 and 11):

* ``committed`` = ``draft_tokens + slim_tokens + full_tokens``: every generated token is
  attributed to exactly one tier, the tier of the decision that committed it:

  - tier 1, ``draft_tokens``: the drafter's token, kept (by gate 1 in lossy mode, by q's check in
    the others);
  - tier 2, ``slim_tokens``: a token the slim verifier produced (lossy tier 2; in lossless mode, a
    slim-verifier candidate that q then accepted);
  - tier 3, ``full_tokens``: a token committed by a full-verifier decision: q's correction or bonus
    token in every mode, and in lossy mode also the drafts q accepted after an escalation.

  Only lossy/audit modes *escalate*; ``escalated_cycles`` counts those cycles. In none, lenient
  and lossless modes q runs every cycle and its corrections are ordinary tier-3 tokens.
* ``rejection_rate`` = rejected drafts / judged drafts. A draft is *judged* when some verifier looked
  at it (positions after the first final rejection of a block are discarded, not judged), and
  *rejected* when it was judged and not committed as drafted.
* ``mean_accepted_length`` = committed tokens per cycle (the usual "tau" of SD papers, counting the
  corrected or bonus token).
* ``full_passes_per_token``, ``slim_passes_per_token``, ``draft_passes_per_token``: forward
  passes of each model per committed token. ``resumed_full_passes`` of the full passes started at
  the slim verifier's first skipped layer (shared prefix), so they cost less than a full pass.
* ``tier_cycles``: of the ``cycles``, those verified with the slim tier: every drafting cycle of a
  fixed tiered mode, the cycles the controller gave the tier when it adapts
  (:mod:`viasd_adapt.core.adaptive`), none in modes none and lenient (nor the prefill's cycle).
* Audit (audit mode, and lenient mode where q is at hand anyway): per committed token, the chance
  that lossless q verification would have overruled it, and the TV distance of the effective
  distribution from q; ``overrule_by_tier`` splits the overrules by the tier that committed them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from viasd_adapt.core.tiers import AuditRecord, CycleResult, Tier

_TIERS = (int(Tier.DRAFT), int(Tier.SLIM), int(Tier.FULL))


@dataclass
class TierMetrics:
    """Counters of one generation (or a sum of several).

    ``token_tiers`` holds the tier of every committed token in order; the per-tier counts derive
    from it, so they always add up to ``committed``, also after a trim at EOS or the token budget.
    """

    drafted: int = 0
    drafts_judged: int = 0
    drafts_rejected: int = 0
    cycles: int = 0
    escalated_cycles: int = 0
    full_passes: int = 0
    resumed_full_passes: int = 0
    slim_passes: int = 0
    draft_passes: int = 0
    tier_cycles: int = 0
    token_tiers: list[int] = field(default_factory=list)
    accepted_lengths: list[int] = field(default_factory=list)
    # the audit, one entry per audited token: its index in the generation, its tier, the chance
    # lossless q would have overruled it, and the TV distance of its effective distribution from q
    audit_positions: list[int] = field(default_factory=list)
    audit_tiers: list[int] = field(default_factory=list)
    audit_overrule: list[float] = field(default_factory=list)
    audit_tv: list[float] = field(default_factory=list)

    # ------------------------------------------------------------------ recording
    def record_cycle(self, result: CycleResult, drafted: int) -> None:
        """Adds one cycle's committed tokens and draft accounting."""
        self.cycles += 1
        self.escalated_cycles += int(result.escalated)
        self.drafted += drafted
        self.drafts_judged += result.drafts_judged
        self.drafts_rejected += result.drafts_rejected
        self.token_tiers += [int(t) for t in result.tiers]
        self.accepted_lengths.append(len(result.tokens))

    def record_audit(self, record: AuditRecord, offset: int) -> None:
        """Adds a shadow audit; ``offset`` is the generated-token index of the cycle's first token."""
        self.audit_positions += [offset + j for j in record.positions]
        self.audit_tiers += [int(t) for t in record.tiers]
        self.audit_overrule += list(record.overrule)
        self.audit_tv += list(record.tv)

    def trim_to(self, n_tokens: int) -> None:
        """Drops tokens committed past ``n_tokens`` (generation stopped mid-block: EOS, budget),
        and their audit entries."""
        surplus = self.committed - n_tokens
        if surplus <= 0:
            return
        keep = [i for i, position in enumerate(self.audit_positions) if position < n_tokens]
        for name in ("audit_positions", "audit_tiers", "audit_overrule", "audit_tv"):
            values = getattr(self, name)
            setattr(self, name, [values[i] for i in keep])
        del self.token_tiers[n_tokens:]
        for i in reversed(range(len(self.accepted_lengths))):  # the surplus may span several cycles
            cut = min(surplus, self.accepted_lengths[i])
            self.accepted_lengths[i] -= cut
            surplus -= cut
            if not surplus:
                break

    # ------------------------------------------------------------------ derived
    def _count(self, tier: Tier) -> int:
        return sum(1 for t in self.token_tiers if t == tier)

    @property
    def draft_tokens(self) -> int:
        return self._count(Tier.DRAFT)

    @property
    def slim_tokens(self) -> int:
        return self._count(Tier.SLIM)

    @property
    def full_tokens(self) -> int:
        return self._count(Tier.FULL)

    @property
    def committed(self) -> int:
        return len(self.token_tiers)

    @property
    def rejection_rate(self) -> float:
        return self.drafts_rejected / self.drafts_judged if self.drafts_judged else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return self.committed / self.cycles if self.cycles else 0.0

    def _per_token(self, count: int) -> float:
        return count / self.committed if self.committed else 0.0

    @property
    def full_passes_per_token(self) -> float:
        return self._per_token(self.full_passes)

    @property
    def slim_passes_per_token(self) -> float:
        return self._per_token(self.slim_passes)

    @property
    def draft_passes_per_token(self) -> float:
        return self._per_token(self.draft_passes)

    @property
    def audited(self) -> int:
        return len(self.audit_overrule)

    @property
    def overruled_positions(self) -> list[int]:
        """Indices of audited tokens lossless q would more likely than not have overruled."""
        return [p for p, o in zip(self.audit_positions, self.audit_overrule) if o >= 0.5]

    @property
    def overrule_rate(self) -> float | None:
        return sum(self.audit_overrule) / self.audited if self.audited else None

    @property
    def tv_distance(self) -> float | None:
        return sum(self.audit_tv) / self.audited if self.audited else None

    @property
    def overrule_rate_by_tier(self) -> dict[int, float | None]:
        """Mean overrule probability of the tokens each tier committed (None: tier never audited)."""
        rates = {}
        for tier in _TIERS:
            values = [o for t, o in zip(self.audit_tiers, self.audit_overrule) if t == tier]
            rates[tier] = sum(values) / len(values) if values else None
        return rates

    def merge(self, other: "TierMetrics") -> "TierMetrics":
        """Sum of two metrics (for aggregating prompts); lists are concatenated."""
        merged = TierMetrics()
        for name, value in asdict(self).items():
            setattr(merged, name, value + getattr(other, name))
        return merged

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(
            committed=self.committed,
            draft_tokens=self.draft_tokens,
            slim_tokens=self.slim_tokens,
            full_tokens=self.full_tokens,
            rejection_rate=self.rejection_rate,
            mean_accepted_length=self.mean_accepted_length,
            full_passes_per_token=self.full_passes_per_token,
            slim_passes_per_token=self.slim_passes_per_token,
            draft_passes_per_token=self.draft_passes_per_token,
            audited=self.audited,
            overruled_positions=self.overruled_positions,
            overrule_rate=self.overrule_rate,
            overrule_rate_by_tier={str(k): v for k, v in self.overrule_rate_by_tier.items()},
            tv_distance=self.tv_distance,
        )
        return data


__all__ = ["TierMetrics"]
