"""The verify step: the one object every framework calls, once per cycle.

A framework (the engine's loop, HF assisted generation, PEARL, EAGLE's tree) supplies what only it
knows: the drafts, the drafter's distributions ``p`` and the target-side verifiers as lazy
callables over its own model runners. Everything else about verifying is the same everywhere and
lives here, built once per run:

* the **rules** (the plugin manager's rule hooks, :func:`~viasd_adapt.core.hooks.hook_rules`, with the
  built-in VIA-SD rules registered last) and the **policy** (settings, greedy or sampling, whether a
  whole block earns a bonus token);
* the **observers**: the observer hooks and the drafter-quality monitor, itself a plugin
  (:class:`~viasd_adapt.core.monitor.DrafterMonitorPlugin`);
* the **ledger** (:class:`~viasd_adapt.core.ledger.CycleLedger`), the one writer of the run's
  :class:`~viasd_adapt.core.metrics.TierMetrics`.

Per cycle a framework calls :meth:`VerifyStep.verify` (decide with
:func:`viasd_adapt.core.cycle.decide_cycle`, then record), or :meth:`decide` and :meth:`record` apart
when it must act between the two (EAGLE plans its commit, and may pay one more q pass, before the
cycle is counted). A framework's own stock loop (mode ``none`` in HF and EAGLE) decides for itself;
its cycles are still counted here, through :meth:`observe`. Compare vLLM v1, where every proposer
feeds one rejection sampler under one speculative config.

**The adaptive tier** (:mod:`viasd_adapt.core.adaptive`) lives here too, once for every framework.
When the settings adapt (:attr:`~viasd_adapt.core.settings.TierSettings.adapts`) the step owns one
:class:`~viasd_adapt.core.adaptive.TierController` per generation, and each cycle has an *arm*:

* :meth:`next_arm`: the coming cycle's arm, chosen from the cycles recorded before it and fixed
  until this cycle is recorded. A framework that runs different model work per arm (EAGLE: u over
  the tree, or q over it) asks before it runs any verifier; the others need not ask;
* :meth:`decide` decides with the arm's policy: the run's (TIER), or the same with mode ``none``
  (PLAIN: the untiered framework's verification, so the slim verifier is never called);
* :meth:`record` counts the cycle (``TierMetrics.tier_cycles`` counts the tier's) and, after the
  stop cut, shows the controller its priced passes and committed tokens, and, for a tier cycle
  whose full pass saw the drafts, what untiered SD would have committed over them
  (:class:`~viasd_adapt.core.adaptive.Revealed`: the untiered arm is learnt on tier cycles too).

A step whose settings do not adapt has a fixed arm: the tier in the tiered modes, untiered in none
and lenient. Nothing else changes for it: same decisions, same tokens, same metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator

import contextlib

import pluggy
import torch

from viasd_adapt.core.adaptive import AdaptivePlan, Arm, Revealed, TierController
from viasd_adapt.core.settings import check_settings
from viasd_adapt.core.cycle import CycleOutcome, CyclePolicy, StopRule, Verifiers, decide_cycle
from viasd_adapt.core.hooks import TierObserver, hook_rules, make_plugin_manager
from viasd_adapt.core.ledger import CycleLedger
from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.core.monitor import DrafterQualityMonitor, JunkThresholds, with_monitor
from viasd_adapt.core.settings import Mode, TierSettings
from viasd_adapt.core.tiers import CycleResult


@dataclass(frozen=True)
class MeasuredPasses:
    """The slim and full passes a framework ran for one cycle, counted where its models run."""

    slim: int
    full: int


class VerifyStep:
    """One run's verify step: rules, observers (the drafter-quality monitor among them) and the
    ledger, for every cycle of every generation of the run.

    Args:
        settings: the tier settings (checked here, once).
        framework: the name observers and the monitor's warning give the framework.
        plugin_manager: the run's plugin manager; None builds one with ``plugins``.
        plugins: user plugins for a manager built here (rules and observers, :mod:`viasd_adapt.core.hooks`).
        greedy: greedy decoding or sampling (each generation may say again: :meth:`new_generation`).
        bonus_after_block: see :class:`~viasd_adapt.core.cycle.CyclePolicy` (False for PEARL).
        thresholds: when the drafter-quality monitor calls a drafter junk.
        watch_drafter: False leaves the drafter-quality monitor out of this run (a tuning sweep's
            candidates, whose tolerances are far from the defaults on purpose, are no verdict on the
            drafter); the monitor runs only in lossy runs anyway.
        adaptive: the prices and priors of the adaptive tier's controllers, when the settings adapt
            (:func:`viasd_adapt.engine.context.open_context` builds them); None:
            :meth:`AdaptivePlan.fallback`. Ignored when the settings do not adapt.
    """

    def __init__(self, settings: TierSettings, framework: str, plugin_manager: pluggy.PluginManager | None = None,
                 plugins: tuple = (), greedy: bool = True, bonus_after_block: bool = True,
                 thresholds: JunkThresholds = JunkThresholds(), adaptive: AdaptivePlan | None = None,
                 watch_drafter: bool = True):
        check_settings(settings)
        self.settings = settings
        #: the plan of every generation's controller; None when the settings do not adapt
        self.adaptive = (adaptive or AdaptivePlan.fallback(settings)) if settings.adapts else None
        # the untiered arm verifies as mode none does; its settings are otherwise the run's
        self._plain_settings = settings.with_(mode=Mode.NONE) if settings.mode.uses_slim else settings
        self.framework = framework
        #: the manager the run was given (its context's): never changed
        self.plugin_manager = plugin_manager if plugin_manager is not None else make_plugin_manager(plugins)
        # The monitor plugin runs only where it can act (lossy), in a manager of this run's own (the
        # given one's plugins as they are now, then the monitor): the given manager may serve other
        # runs, in other threads.
        self.watch_drafter = watch_drafter
        hooks, self._monitor_plugin = (with_monitor(self.plugin_manager) if settings.mode is Mode.LOSSY and watch_drafter
                                       else (self.plugin_manager, None))
        self.rules = hook_rules(hooks)
        self.observer = TierObserver(hooks, framework, settings.mode.value)
        self.thresholds = thresholds
        self.bonus_after_block = bonus_after_block
        self.new_generation(greedy)

    # ------------------------------------------------------------------ generations
    def new_generation(self, greedy: bool | None = None, stop: StopRule | None = None,
                       most_tokens: int | None = None) -> TierMetrics:
        """Starts a generation: fresh metrics (earlier outputs keep theirs), fresh monitor evidence
        and, when the tier adapts, a fresh controller (a sequence's choices rest on its own cycles).

        ``stop``: for frameworks whose own loop overshoots the budget or runs past EOS (EAGLE), the
        ledger cuts each cycle to it before counting (:class:`~viasd_adapt.core.ledger.CycleLedger`).
        ``most_tokens``: the most tokens one cycle commits, when the framework learns it only now
        (EAGLE: its tree's depth + 1); the plan's otherwise.
        """
        greedy = self.policy.greedy if greedy is None else greedy
        self.policy = CyclePolicy(self.settings, greedy, self.rules, self.bonus_after_block,
                                  reveal_untiered=self.adaptive is not None)
        self.monitor = DrafterQualityMonitor(self.settings.mode, greedy, self.framework, self.thresholds,
                                             enabled=self.watch_drafter)
        self.ledger = CycleLedger(self.observer, stop=stop)
        if self.adaptive is not None and most_tokens is not None and most_tokens != self.adaptive.most_tokens:
            self.adaptive = replace(self.adaptive, most_tokens=most_tokens)
        self.controller: TierController | None = self.adaptive.controller() if self.adaptive is not None else None
        self._arm: Arm | None = None
        return self.ledger.metrics

    def set_greedy(self, greedy: bool) -> None:
        """Says, once the generation has started, whether it decodes greedily or samples (a framework
        that learns it only at its prefill: EAGLE samples exactly when it is given a logits
        processor). The run's policy and the drafter-quality monitor follow; the generation's
        metrics and the monitor's evidence so far are kept."""
        self.policy = replace(self.policy, greedy=greedy)
        self.monitor.greedy = greedy

    @property
    def metrics(self) -> TierMetrics:
        """The current generation's metrics."""
        return self.ledger.metrics

    @property
    def greedy(self) -> bool:
        return self.policy.greedy

    @contextlib.contextmanager
    def _watched(self) -> Iterator[None]:
        if self._monitor_plugin is None:
            yield
            return
        with self._monitor_plugin.watching(self.monitor):
            yield

    # ------------------------------------------------------------------ arms
    def next_arm(self) -> Arm:
        """The arm of the coming cycle: the tier, or untiered verification.

        Chosen by the controller from the cycles recorded before this one (never from this
        cycle's drafts or verdict: that is what keeps every mode's guarantee), and the same on
        every call until the cycle is recorded. Without a controller: the tier in the tiered
        modes, untiered in none and lenient.
        """
        if self._arm is None:
            if self.controller is not None:
                self._arm = self.controller.choose()
            else:
                self._arm = Arm.TIER if self.settings.mode.uses_slim else Arm.PLAIN
        return self._arm

    def settings_for(self, arm: Arm) -> TierSettings:
        """The settings a cycle of ``arm`` verifies with: the run's (TIER), or the same in mode none."""
        return self.settings if arm is Arm.TIER else self._plain_settings

    def policy_for(self, arm: Arm) -> CyclePolicy:
        """The run's policy for a cycle of ``arm`` (the untiered arm: the same, in mode none)."""
        if arm is Arm.TIER or self._plain_settings is self.settings:
            return self.policy
        return replace(self.policy, settings=self._plain_settings)

    # ------------------------------------------------------------------ cycles
    def decide(self, drafts: torch.Tensor, p: torch.Tensor, verifiers: Verifiers,
               generator: torch.Generator | None = None, stop: StopRule = StopRule(),
               draft_ids: list[int] | None = None, policy: CyclePolicy | None = None) -> CycleOutcome:
        """One cycle's decision (:func:`~viasd_adapt.core.cycle.decide_cycle`), not yet recorded,
        with the policy of the cycle's arm (:meth:`next_arm`).

        ``policy`` replaces it for this one decision (EAGLE's lossless route asks u only for the
        token after the block; a framework that asked :meth:`next_arm` builds its arm's policy
        itself); the rules stay the run's.
        """
        policy = policy or self.policy_for(self.next_arm())
        with self._watched():
            return decide_cycle(drafts, p, verifiers, policy, generator, stop, draft_ids)

    def record(self, outcome: CycleOutcome, drafted: int, draft_passes: int = 0, resumed_full_passes: int = 0,
               measured: MeasuredPasses | None = None) -> None:
        """Counts a decided cycle and shows it to the observers (:meth:`CycleLedger.record`), then,
        when the tier adapts, to the controller.

        The slim and full passes counted are the verifier calls the decision made, unless the
        framework ``measured`` the cycle's passes where its models ran: then those. EAGLE does, since
        its verifiers read rows of passes made before the decision (one forward over the whole
        tree) or shared between decisions (two paths checked by one q pass), and it may run one
        more q pass after deciding (true head features).

        The controller sees the cycle's priced passes
        (:meth:`~viasd_adapt.core.adaptive.PassPrices.cycle_cost`) and the tokens it committed after
        the stop cut. Draft passes: ``draft_passes`` when the framework counts them per cycle
        (EAGLE's head); otherwise ``drafted``, one drafter forward per drafted token, since the
        engine, HF and PEARL count their drafter's passes once, at the end of the generation.
        """
        if measured is not None:
            outcome = CycleOutcome(outcome.result, measured.slim, measured.full, outcome.audit, outcome.untiered_accept)
        arm = self.next_arm()
        self._arm = None
        with self._watched():
            self.ledger.record(outcome, drafted, draft_passes, resumed_full_passes, tier=arm is Arm.TIER)
        if self.controller is not None:
            prices = self.adaptive.prices
            cost = prices.cycle_cost(draft_passes or drafted, outcome.slim_passes, outcome.full_passes, resumed_full_passes)
            revealed = None
            if arm is Arm.TIER and outcome.untiered_accept is not None and drafted > 0:
                # only the cascade reveals on every tier cycle; lossy reveals on its escalations alone
                revealed = Revealed(outcome.untiered_accept, drafted, prices.cycle_cost(draft_passes or drafted, 0, 1),
                                    bonus=self.bonus_after_block, paired=self.settings.mode is Mode.LOSSLESS)
            self.controller.observe(arm, cost, len(outcome.result.tokens), revealed)

    def verify(self, drafts: torch.Tensor, p: torch.Tensor, verifiers: Verifiers,
               generator: torch.Generator | None = None, stop: StopRule = StopRule(),
               draft_ids: list[int] | None = None, draft_passes: int = 0) -> CycleOutcome:
        """Decides and records one cycle of ``drafts``: what most frameworks call per cycle."""
        outcome = self.decide(drafts, p, verifiers, generator, stop, draft_ids)
        self.record(outcome, drafted=int(drafts.shape[0]), draft_passes=draft_passes)
        return outcome

    def observe(self, result: CycleResult, drafted: int, full_passes: int = 1, draft_passes: int = 0) -> None:
        """Counts a cycle that a framework's own stock loop decided (mode ``none``)."""
        self.record(CycleOutcome(result, full_passes=full_passes), drafted=drafted, draft_passes=draft_passes)

    def prefill(self, token: int, draft_passes: int = 0) -> None:
        """The first token, from one q pass over the prompt (:meth:`CycleLedger.record_prefill`)."""
        with self._watched():
            self.ledger.record_prefill(token, draft_passes)


__all__ = ["Arm", "MeasuredPasses", "VerifyStep"]
