"""The one writer of :class:`~viasd_adapt.core.metrics.TierMetrics`: it records decided cycles and
shows them to the observer hooks.

Every framework records through a :class:`CycleLedger` (held by its
:class:`~viasd_adapt.core.verify_step.VerifyStep`), so "count the cycle, then notify observers" exists
once, and observers see exactly the tokens the metrics count, in the same order. Nothing else
writes a :class:`TierMetrics` field: passes a framework runs outside a decided cycle (a drafter's
forwards, resumed q passes), a cut after the fact and plain decoding come here too
(tests/core/test_one_runtime.py checks it).
"""

from __future__ import annotations

from viasd_adapt.core.cycle import CycleOutcome, StopRule
from viasd_adapt.core.hooks import TierObserver
from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.core.tiers import CycleResult, Tier


class CycleLedger:
    """Records the cycles of one generation into ``metrics`` and notifies ``observer`` (the
    observer hooks, the drafter-quality monitor among them)."""

    def __init__(self, observer: TierObserver | None = None, metrics: TierMetrics | None = None,
                 stop: StopRule | None = None):
        self.observer = observer
        self.metrics = metrics if metrics is not None else TierMetrics()
        # For frameworks whose own loop overshoots the budget or runs past EOS (EAGLE): each cycle is
        # cut here, before it is counted or shown to observers (cycles after the stop keep no token).
        self.stop = stop
        self.stopped = False

    def _cut(self, outcome: CycleOutcome) -> CycleOutcome:
        if self.stopped:  # a cycle the framework ran past the stop: its passes count, no token does
            n = 0
        else:
            budget = None if self.stop.budget is None else self.stop.budget - self.metrics.committed
            kept, self.stopped = StopRule(budget, self.stop.eos).split(outcome.result.tokens)
            n = len(kept)
        del outcome.result.tokens[n:], outcome.result.tiers[n:]
        audit = outcome.audit
        if audit is not None:
            keep = [i for i, position in enumerate(audit.positions) if position < n]
            for name in ("overrule", "tv", "positions", "tiers"):
                values = getattr(audit, name)
                values[:] = [values[i] for i in keep]
        return outcome

    def record(self, outcome: CycleOutcome, drafted: int, draft_passes: int = 0, resumed_full_passes: int = 0,
               tier: bool = False) -> None:
        """One decided cycle: its tokens and tiers, draft accounting, passes and audit.

        ``draft_passes`` and ``resumed_full_passes`` are for frameworks whose drafter and target
        passes happen per cycle in the adapter's own code (EAGLE's head, resumed q passes).
        ``tier``: whether the cycle was verified with the slim tier (``TierMetrics.tier_cycles``).
        """
        if self.stop is not None:
            outcome = self._cut(outcome)
        first_index = self.metrics.committed
        self.metrics.record_cycle(outcome.result, drafted=drafted)
        self.metrics.slim_passes += outcome.slim_passes
        self.metrics.full_passes += outcome.full_passes
        self.metrics.draft_passes += draft_passes
        self.metrics.resumed_full_passes += resumed_full_passes
        self.metrics.tier_cycles += int(tier)
        if outcome.audit is not None:
            self.metrics.record_audit(outcome.audit, offset=first_index)
        if self.observer is not None:
            self.observer.cycle(outcome.result, self.metrics, first_index)

    def record_prefill(self, token: int, draft_passes: int = 0) -> None:
        """The first token, from one q pass over the prompt (a cycle with no drafts)."""
        self.record(CycleOutcome(CycleResult([int(token)], [Tier.FULL]), full_passes=1), drafted=0, draft_passes=draft_passes)


    def count_draft_passes(self, passes: int) -> None:
        """Drafter forwards run outside the recorded cycles (a drafter model's own loop)."""
        self.metrics.draft_passes += passes

    def count_resumed_full_passes(self, passes: int) -> None:
        """Of the full passes recorded, how many resumed at the slim verifier's first skipped layer."""
        self.metrics.resumed_full_passes += passes

    def keep_first(self, n_tokens: int) -> None:
        """Drops what was recorded past ``n_tokens`` (a framework whose loop committed more than it
        outputs: PEARL's last round, EAGLE's pending root)."""
        self.metrics.trim_to(n_tokens)

    def record_plain_decoding(self, tokens: list[int]) -> None:
        """Autoregressive decoding by the target alone: one full pass, one tier-3 token, per token."""
        for token in tokens:
            self.record(CycleOutcome(CycleResult([int(token)], [Tier.FULL]), full_passes=1), drafted=0)


def plain_decoding_metrics(tokens: list[int]) -> TierMetrics:
    """The metrics of autoregressive decoding of ``tokens`` (the ``ar`` baseline rows)."""
    ledger = CycleLedger()
    ledger.record_plain_decoding(tokens)
    return ledger.metrics


__all__ = ["CycleLedger", "plain_decoding_metrics"]
