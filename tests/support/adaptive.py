"""Controllers that make the adaptive tier switch, for the tests (and one that cheats, as a control).

* :class:`Alternating`: a :class:`~viasd_adapt.core.adaptive.TierController` that gives the tier
  every other cycle, starting with the tier. It reads only how many cycles it has seen, so it is as
  non-anticipating as the real one; it makes both arms run in every sequence of two or more cycles,
  which the real controller does only where the arms cost about the same.
* :func:`switching`: every verify step opened inside it (any framework: the adaptive plan builds
  each generation's controller) gets an :class:`Alternating` controller; scoped, restored on exit.
* :func:`real_switching`: every verify step opened inside it gets the real controller, from the plan
  its run built, with knobs that make it probe an idle arm after one cycle: both arms run in short
  sequences, and every decision is still the real one.
* :class:`AnticipatingStep`: the CONTROL. A verify step that decides each cycle both ways (the tier,
  then untiered, each with its own draws) and keeps the decision that commits more tokens: its arm
  depends on the cycle's outcome. Each decision alone is exact; keeping the longer one is not, and
  a test that cannot tell it from the real thing has no power.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Iterator

from viasd_adapt.core.adaptive import AdaptivePlan, AdaptiveSettings, Arm, TierController
from viasd_adapt.core.cycle import StopRule
from viasd_adapt.core.verify_step import VerifyStep


class Alternating(TierController):
    """The tier on cycles 0, 2, 4, ... of a generation, untiered on the others."""

    def choose(self) -> Arm:
        return Arm.TIER if len(self.history) % 2 == 0 else Arm.PLAIN


@contextlib.contextmanager
def switching() -> Iterator[list[Alternating]]:
    """Every generation's controller is an :class:`Alternating` one (yields them, in order)."""
    made: list[Alternating] = []
    original = AdaptivePlan.controller

    def alternating(plan: AdaptivePlan) -> Alternating:
        controller = Alternating(plan.settings, dict(plan.priors), plan.most_tokens, plan.relative)
        made.append(controller)
        return controller

    AdaptivePlan.controller = alternating
    try:
        yield made
    finally:
        AdaptivePlan.controller = original


def both_arms_ran(controller: TierController) -> bool:
    """Whether one generation ran the tier and untiered verification."""
    return {Arm.TIER, Arm.PLAIN} <= set(controller.history)


class AnticipatingStep(VerifyStep):
    """The control (module docstring): picks each cycle's arm after seeing how the cycle turns out."""

    def decide(self, drafts, p, verifiers, generator=None, stop=StopRule(), draft_ids=None, policy=None):
        decided = [(arm, super(AnticipatingStep, self).decide(drafts, p, verifiers, generator, stop, draft_ids,
                                                              policy=self.policy_for(arm)))
                   for arm in (Arm.TIER, Arm.PLAIN)]
        arm, outcome = max(decided, key=lambda pair: len(pair[1].result.tokens))  # the tier on ties
        self._arm = arm
        return outcome




#: Knobs under which the real controller switches every other cycle or so: the idle arm is probed
#: as soon as it has gone unobserved for a cycle (a tier cycle that reveals the untiered one counts
#: as observing both). The decisions are still
#: the real :class:`TierController`'s, from the plan the run built (its prices and priors).
SWITCHING_SETTINGS = AdaptiveSettings(min_interval=1, max_interval=1, first_probe=1)


@contextlib.contextmanager
def real_switching(settings: AdaptiveSettings = SWITCHING_SETTINGS) -> Iterator[list[TierController]]:
    """Every generation's controller is the real one, from the plan its run built (any framework),
    with ``settings`` as its knobs; yields them, in order. Scoped, restored on exit."""
    made: list[TierController] = []
    original = AdaptivePlan.controller

    def real(plan: AdaptivePlan) -> TierController:
        controller = original(replace(plan, settings=settings))
        made.append(controller)
        return controller

    AdaptivePlan.controller = real
    try:
        yield made
    finally:
        AdaptivePlan.controller = original


__all__ = ["SWITCHING_SETTINGS", "Alternating", "AnticipatingStep", "both_arms_ran", "real_switching", "switching"]
