"""Controllers that make the adaptive tier switch, for the tests (and one that cheats, as a control).

* :class:`Alternating`: a :class:`~viasd_adapt.core.adaptive.TierController` that gives the tier
  every other cycle, starting with the tier. It reads only how many cycles it has seen, so it is as
  non-anticipating as the real one; it makes both arms run in every sequence of two or more cycles,
  which the real controller does only where the arms cost about the same.
* :func:`switching`: every verify step opened inside it (any framework: the adaptive plan builds
  each generation's controller) gets an :class:`Alternating` controller; scoped, restored on exit.
* :class:`AnticipatingStep`: the CONTROL. A verify step that decides each cycle both ways (the tier,
  then untiered, each with its own draws) and keeps the decision that commits more tokens: its arm
  depends on the cycle's outcome. Each decision alone is exact; keeping the longer one is not, and
  a test that cannot tell it from the real thing has no power.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from viasd_adapt.core.adaptive import AdaptivePlan, Arm, TierController
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


__all__ = ["Alternating", "AnticipatingStep", "both_arms_ran", "switching"]
