"""The adaptive tier: per sequence, whether each cycle uses the slim verifier or verifies untiered.

Whether the slim tier pays depends on the pair, the text and the hardware, and often it does not.
Rather than ask the user to know in advance, a :class:`TierController` decides cycle by cycle
between two *arms*:

* :attr:`Arm.TIER`: the cycle runs the configured tiered mode (lossless cascade or lossy);
* :attr:`Arm.PLAIN`: the cycle verifies the way the untiered framework does (mode ``none``).

It decides on **cost per committed token**, not on acceptance: each arm's estimate is the ratio of
the (discounted) priced passes to the (discounted) committed tokens of the cycles that measured it,
where every pass is priced in full-equivalent units by a :class:`PassPrices` table. Acceptance alone
is a poor signal: a tier can raise acceptance and still cost more, because its slim pass is not free.

Its estimates describe the sequence being generated:

* **both arms are learnt from the sequence.** A tier cycle whose full pass saw the drafts (the
  lossless cascade's q over the kept drafts; a lossy cycle that escalated) shows what untiered SD
  would have committed over the same drafts (:class:`Revealed`): the untiered arm is observed on
  that cycle too, at no cost. Such paired cycles also measure the tier's *difference* from untiered
  SD on the same drafts, known far better than either arm's level, which moves with the text; while
  the tier is idle, its estimate is the untiered arm's current level plus that difference;
* **older observations are discounted** (``discount`` per cycle, 0.9): an estimate rests on the
  last ten or so observations, so a sequence whose text changes character (prose, then code) moves
  its estimates with it;
* **the idle arm is probed** where nothing reveals it (an untiered cycle shows nothing of the tier;
  a lossy cycle that does not escalate shows nothing of untiered SD): once it has gone unobserved
  for ``gap / probe_budget`` cycles (bounded), where ``gap`` is how much more it is believed to cost
  per token. A probe costs about ``probe_budget`` of the run while the idle arm loses: rare where
  it loses badly, frequent where the arms are close and a wrong choice costs little;
* **priors are relative and fade**: a :class:`RelativePrior` states the tier against the untiered
  arm as it is being measured (from ``tuned.json``'s measured points, the difference the
  calibration measured between the arms; with nothing measured, a slim pass more per cycle for no
  more tokens: :mod:`viasd_adapt.engine.priors` says which, and why), worth a few pseudo-cycles that
  fade with the same discount, so the sequence's own cycles outweigh it after a few cycles. A
  controller made with no prior at all starts untiered (the baseline the tier must beat) and tries
  the tier after ``first_probe`` cycles.

The knobs (:class:`AdaptiveSettings`) were chosen on synthetic sequences with fixed seeds
(``tests/support/synthetic_arms.py``; ``docs/adaptive.md`` states the sweep).

It is deterministic: the same history gives the same choice, so runs repeat and greedy output
stays reproducible.

Why it keeps every mode's guarantee: the arm of a cycle is chosen from the cycles *before* it
(:meth:`TierController.choose` reads nothing of the cycle it decides), and each arm on its own is
a valid verification of the cycle. Lossless stays exact (both arms commit exactly q's tokens, or
q's distribution when sampling, given the prefix), and a lossy sequence can only gain fidelity on
the cycles that run untiered.

Where it runs: :class:`AdaptivePlan` holds a run's prices, priors and knobs, and the verify step
(:class:`viasd_adapt.core.verify_step.VerifyStep`) builds one controller per generation from it,
asks it each cycle's arm and shows it each cycle's priced passes and committed tokens: once, for
every framework.

Pure Python: no model, no tensor; unit-tested on synthetic arms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping

from viasd_adapt.core.settings import TierSettings
from viasd_adapt.errors import ConfigError


class Arm(str, Enum):
    """What a cycle runs: the tiered mode, or untiered verification."""

    TIER = "tier"
    PLAIN = "plain"

    @property
    def other(self) -> "Arm":
        return Arm.PLAIN if self is Arm.TIER else Arm.TIER


@dataclass(frozen=True)
class PassPrices:
    """What one forward of each kind costs, in full-equivalent passes (one full target pass over a
    draft block costs 1), as :mod:`viasd_adapt.bench.costs` prices rows.

    ``draft``: one drafter forward (0 for prompt lookup, which runs no model); ``slim``: one slim
    verifier pass; ``resumed``: one full pass that starts at the slim verifier's first skipped layer.
    """

    draft: float = 0.0
    slim: float = 1.0
    resumed: float = 1.0
    full: float = 1.0

    def __post_init__(self) -> None:
        for name in ("draft", "slim", "resumed", "full"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < float("inf"):
                raise ConfigError(f"pass price {name} must be a finite number >= 0, got {value!r}")
        if self.full <= 0:
            raise ConfigError(f"the full pass must cost something, got {self.full!r}")

    def cycle_cost(self, draft_passes: float, slim_passes: float, full_passes: float, resumed_passes: float = 0.0) -> float:
        """The priced passes of one cycle (``full_passes`` counts the resumed ones too)."""
        return (self.draft * draft_passes + self.slim * slim_passes
                + self.full * (full_passes - resumed_passes) + self.resumed * resumed_passes)

    @classmethod
    def from_seconds(cls, c_draft: float, c_slim: float | None, c_resume: float | None, c_full_block: float) -> "PassPrices":
        """Prices from measured forward times (a bench's or ``viasd tune``'s costs)."""
        if not c_full_block or c_full_block <= 0:
            raise ConfigError(f"a full block pass must take some time, got {c_full_block!r}")
        slim = c_slim / c_full_block if c_slim else 1.0
        resumed = c_resume / c_full_block if c_resume else 1.0
        return cls(draft=c_draft / c_full_block, slim=slim, resumed=resumed)

    @classmethod
    def from_layers(cls, num_layers: int, retained: int, first_skipped: int, draft: float = 0.0) -> "PassPrices":
        """Prices by layer counts when nothing was measured: a slim pass runs ``retained`` of
        ``num_layers`` layers; a resumed pass runs the layers from the first skipped one on."""
        if not 0 < retained <= num_layers or not 0 <= first_skipped <= num_layers:
            raise ConfigError(f"layer counts disagree: {retained} retained and first skipped {first_skipped} of {num_layers}")
        return cls(draft=draft, slim=retained / num_layers, resumed=(num_layers - first_skipped) / num_layers)


@dataclass(frozen=True)
class ArmPrior:
    """What is believed about an arm before the sequence starts: its cost per committed token and
    how many cycles that belief is worth (``weight``), at ``tokens_per_cycle`` committed tokens."""

    cost_per_token: float
    weight: float = 2.0
    tokens_per_cycle: float = 2.0

    def __post_init__(self) -> None:
        for name in ("cost_per_token", "weight", "tokens_per_cycle"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < float("inf"):
                raise ConfigError(f"arm prior {name} must be a finite number > 0, got {value!r}")


def _tier_cycle(plain_cost: float, plain_tokens: float, extra_cost: float, extra_tokens: float) -> tuple[float, float]:
    """A tier cycle's priced passes and committed tokens, stated against an untiered cycle's: the
    untiered level plus the tier's difference, a cycle costing something and committing at least
    one token."""
    return max(plain_cost + extra_cost, 1e-6), max(1.0, plain_tokens + extra_tokens)


@dataclass(frozen=True)
class RelativePrior:
    """A belief about the tier stated against the untiered arm, for when nothing was measured: a
    tier cycle costs ``extra_cost`` more than an untiered one (its slim pass) and commits
    ``extra_tokens`` more tokens, worth ``weight`` cycles. The lossless cascade can add at most one
    token per cycle (the slim verifier's correction, when the target keeps it), so with
    ``extra_tokens = 0`` the tier has to show that it buys its slim pass before it runs.

    Measured points state the tier this way too (:mod:`viasd_adapt.engine.priors`): the difference
    the calibration measured between the arms, per cycle, carries over to a sequence whose level
    differs (other text, other timings) better than either arm's absolute cost does. A lossy cycle
    that skips q can cost less than an untiered one: ``extra_cost`` may be negative.

    ``reference``: the untiered arm's cost and tokens per cycle where the difference was measured
    (the calibration's), or None. It decides only the first cycle, before the sequence has shown
    either arm: the arm the calibration found cheaper runs first. It is never an estimate of the
    untiered arm: the calibration's prompts are not the run's, so its level would be stale."""

    extra_cost: float
    extra_tokens: float = 0.0
    weight: float = 2.0
    reference: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.extra_cost, bool) or not isinstance(self.extra_cost, (int, float)) \
                or not math.isfinite(self.extra_cost):
            raise ConfigError(f"relative prior extra_cost must be a finite number, got {self.extra_cost!r}")
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) or not 0.0 <= self.weight < float("inf"):
            raise ConfigError(f"relative prior weight must be a finite number >= 0, got {self.weight!r}")
        if isinstance(self.extra_tokens, bool) or not isinstance(self.extra_tokens, (int, float)) \
                or not -1.0 <= self.extra_tokens <= 1.0:
            raise ConfigError(f"relative prior extra_tokens must be in [-1, 1], got {self.extra_tokens!r}")
        if self.reference is not None:
            if len(self.reference) != 2 or any(isinstance(v, bool) or not isinstance(v, (int, float))
                                               or not 0.0 < v < float("inf") for v in self.reference):
                raise ConfigError("relative prior reference must be (cost per cycle, tokens per cycle), two finite "
                                  f"numbers > 0, got {self.reference!r}")

    def favours_tier(self) -> bool:
        """Whether the tier is the cheaper arm at :attr:`reference` (False without one: the tier must
        show that it pays)."""
        if self.reference is None:
            return False
        cost, tokens = self.reference
        tier_cost, tier_tokens = _tier_cycle(cost, tokens, self.extra_cost, self.extra_tokens)
        return tier_cost / tier_tokens < cost / tokens


@dataclass(frozen=True)
class AdaptiveSettings:
    """The controller's knobs (module docstring; ``docs/adaptive.md`` says how they were chosen).

    Attributes:
        discount: weight kept per cycle by older observations and the prior, in (0, 1]: with 0.9 an
            arm's estimate rests mostly on its last ten or so observations, so it follows the text.
        probe_budget: the share of a run's cost the controller may spend probing the idle arm while
            it loses: the idle arm is tried once every ``gap / probe_budget`` cycles, where ``gap`` is
            how much more it is believed to cost per token (a cheap probe may come often; one that
            costs the tier's slim pass for nothing comes rarely).
        min_interval, max_interval: the fewest and the most cycles between two probes of the idle arm.
        first_probe: with nothing known of the other arm (no prior), try it after this many cycles.
    """

    discount: float = 0.9
    probe_budget: float = 0.01
    min_interval: int = 4
    max_interval: int = 40
    first_probe: int = 2

    def __post_init__(self) -> None:
        if isinstance(self.discount, bool) or not isinstance(self.discount, (int, float)) or not 0.0 < self.discount <= 1.0:
            raise ConfigError(f"adaptive discount must be in (0, 1], got {self.discount!r}")
        if isinstance(self.probe_budget, bool) or not isinstance(self.probe_budget, (int, float)) \
                or not 0.0 < self.probe_budget < float("inf"):
            raise ConfigError(f"adaptive probe_budget must be a finite number > 0, got {self.probe_budget!r}")
        for name in ("min_interval", "max_interval", "first_probe"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"adaptive {name} must be an integer >= 1, got {value!r}")
        if self.max_interval < self.min_interval:
            raise ConfigError(f"adaptive max_interval ({self.max_interval}) must be >= min_interval ({self.min_interval})")


@dataclass(frozen=True)
class Revealed:
    """What a cycle of one arm showed about the other arm's cycle over the same drafts.

    A tier cycle whose full pass saw the draft block (the lossless cascade's q over the kept
    drafts; a lossy cycle that escalated) knows, for every draft that pass saw, the probability
    that untiered SD's rule accepts it (0 or 1 when greedy): ``accept``, in draft order, for the
    first drafts of the block. ``drafted``: the drafts in the block; ``bonus``: whether a block
    accepted whole earns a token after it; ``cost``: the priced passes that untiered cycle would
    have run (a drafter pass per draft and one full pass).

    ``paired``: whether the cycle is a fair sample of the two arms on the same drafts. A lossless
    cascade reveals on every tier cycle, so its cycles are; a lossy cycle reveals only when it
    escalated, which is when the slim verifier was unsure, its dearest cycles, so the difference
    between the arms on those cycles overstates the tier's cost. Such a cycle still tells the
    untiered arm's level, but not the difference.
    """

    accept: tuple[float, ...]
    drafted: int
    cost: float
    bonus: bool = True
    paired: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.drafted, bool) or not isinstance(self.drafted, int) or self.drafted < 1:
            raise ValueError(f"a revealed cycle drafts at least one token, got {self.drafted!r}")
        if len(self.accept) > self.drafted or any(not 0.0 <= a <= 1.0 for a in self.accept):
            raise ValueError(f"accept must be at most {self.drafted} probabilities, got {self.accept!r}")
        if not self.cost >= 0:
            raise ValueError(f"a revealed cycle cannot cost {self.cost}")

    def expected_tokens(self, unseen_accept: float) -> float:
        """The tokens the untiered cycle commits, in expectation over its acceptance draws: the drafts
        it accepts, then one token (its correction, or the bonus after a whole block). A draft the
        full pass did not see is accepted with probability ``unseen_accept``."""
        accepted, reach = 0.0, 1.0  # reach: the chance that the first k drafts are all accepted
        for k in range(self.drafted):
            reach *= self.accept[k] if k < len(self.accept) else unseen_accept
            if reach <= 0.0:
                break
            accepted += reach
        return accepted + (1.0 - reach) + (reach if self.bonus else 0.0)

    @property
    def complete(self) -> bool:
        """Whether the cycle is known without a guess: every draft seen, or one rejected outright."""
        return len(self.accept) == self.drafted or 0.0 in self.accept


@dataclass
class _ArmState:
    """Discounted sums of one arm's observations (its own cycles and what other cycles revealed of
    it): priced cost, committed tokens, cycles."""

    cost: float = 0.0
    tokens: float = 0.0
    cycles: float = 0.0

    def estimate(self) -> float | None:
        """Cost per committed token, or None when nothing is known of the arm."""
        return self.cost / self.tokens if self.tokens > 0 else None

    def add(self, cost: float, tokens: float, cycles: float = 1.0) -> None:
        self.cost += cost
        self.tokens += tokens
        self.cycles += cycles

    def decay(self, factor: float) -> None:
        self.cost *= factor
        self.tokens *= factor
        self.cycles *= factor


@dataclass
class TierController:
    """Chooses each cycle's arm from the cycles before it (module docstring).

    Use: ``arm = controller.choose()`` before the cycle, ``controller.observe(arm, cost, tokens,
    revealed)`` after it. ``choose`` is a pure function of what was observed: calling it twice gives
    the same arm, and it never looks at the cycle it decides. ``most_tokens``: the most tokens one
    cycle can commit (gamma + 1).
    """

    settings: AdaptiveSettings = field(default_factory=AdaptiveSettings)
    priors: dict[Arm, ArmPrior] = field(default_factory=dict)
    most_tokens: int = 6
    relative: RelativePrior | None = None

    def __post_init__(self) -> None:
        if isinstance(self.most_tokens, bool) or not isinstance(self.most_tokens, int) or self.most_tokens < 1:
            raise ConfigError(f"most_tokens (gamma + 1) must be an integer >= 1, got {self.most_tokens!r}")
        self._arms = {arm: _ArmState() for arm in Arm}
        for arm, prior in self.priors.items():
            tokens = prior.weight * prior.tokens_per_cycle
            self._arms[Arm(arm)].add(tokens * prior.cost_per_token, tokens, prior.weight)
        self.cycles = 0
        self._relative_weight = self.relative.weight if self.relative is not None else 0.0
        # discounted sums of the tier's difference from untiered SD on the cycles that showed both
        self._paired = _ArmState()
        # cycles since each arm was last observed (run, or revealed by the other arm's cycle)
        self._since = {arm: 0 for arm in Arm}
        # untiered SD's acceptance of a draft its full pass did not see: discounted sums, from a
        # prior of one draft accepted half the time
        self._accepted, self._judged = 0.5, 1.0
        self.history: list[Arm] = []
        #: per cycle, whether it revealed the arm it did not run
        self.revealed: list[bool] = []

    # ------------------------------------------------------------------ decisions
    def _views(self) -> dict[Arm, _ArmState]:
        """What is known of each arm: its observations, and for the tier its difference from the
        untiered arm, stated against the untiered arm's cycles as measured so far. That difference
        is the relative prior's, fading, and what the cycles that ran both arms over the same drafts
        showed (a tier cycle revealing the untiered one): paired on the same drafts, it is known far
        better than either arm's level, which moves with the text."""
        plain, tier = self._arms[Arm.PLAIN], self._arms[Arm.TIER]
        paired = self._paired
        weight = self._relative_weight + paired.cycles
        if weight <= 0 or plain.cycles <= 0:
            return self._arms
        relative = self.relative or RelativePrior(0.0, weight=0.0)
        extra_cost = (self._relative_weight * relative.extra_cost + paired.cost) / weight
        extra_tokens = (self._relative_weight * relative.extra_tokens + paired.tokens) / weight
        view = _ArmState(tier.cost, tier.tokens, tier.cycles)
        cost, tokens = _tier_cycle(plain.cost / plain.cycles, plain.tokens / plain.cycles, extra_cost, extra_tokens)
        view.add(weight * cost, weight * tokens, weight)
        return {Arm.TIER: view, Arm.PLAIN: plain}

    def estimates(self) -> dict[Arm, float | None]:
        """Each arm's current cost per committed token (None: unknown)."""
        return {arm: state.estimate() for arm, state in self._views().items()}

    def exploited(self) -> Arm:
        """The arm believed cheaper. With nothing known of either, the arm the calibration found
        cheaper (:meth:`RelativePrior.favours_tier`), else the untiered arm: it is the baseline the
        tier must beat, and the one whose cost the first cycles measure."""
        return self._cheaper(self.estimates())

    def _cheaper(self, estimates: dict[Arm, float | None]) -> Arm:
        tier, plain = estimates[Arm.TIER], estimates[Arm.PLAIN]
        if tier is None and plain is None:
            return Arm.TIER if self.relative is not None and self.relative.favours_tier() else Arm.PLAIN
        if tier is None or plain is None:
            return Arm.TIER if plain is None else Arm.PLAIN
        return Arm.TIER if tier < plain else Arm.PLAIN

    def probe_interval(self) -> int:
        """Cycles between two probes of the idle arm: ``gap / probe_budget`` (AdaptiveSettings),
        within ``min_interval .. max_interval``."""
        estimates = self.estimates()
        return self._interval(estimates, self._cheaper(estimates))

    def _interval(self, estimates: dict[Arm, float | None], best: Arm) -> int:
        if estimates[best] is None or estimates[best.other] is None:
            return self.settings.min_interval
        gap = max(0.0, estimates[best.other] / estimates[best] - 1.0)
        interval = math.ceil(gap / self.settings.probe_budget)
        return min(self.settings.max_interval, max(self.settings.min_interval, interval))

    def choose(self) -> Arm:
        """The arm of the next cycle, from the cycles before it only: the arm believed cheaper,
        unless the other one has gone unobserved for :meth:`probe_interval` cycles."""
        estimates = self.estimates()
        best = self._cheaper(estimates)
        if estimates[best.other] is None:  # never seen: tried once the exploited arm has a first measure
            return best.other if self.cycles >= self.settings.first_probe else best
        return best.other if self._since[best.other] >= self._interval(estimates, best) else best

    # ------------------------------------------------------------------ observations
    def unseen_accept(self) -> float:
        """How often untiered SD accepts a draft, as the revealed cycles show it (discounted)."""
        return self._accepted / self._judged

    def observe(self, arm: Arm, cost: float, tokens: int, revealed: Revealed | None = None) -> None:
        """One finished cycle of ``arm``: its priced passes and the tokens it committed, and what it
        revealed of the untiered arm when ``arm`` is the tier (:class:`Revealed`)."""
        arm = Arm(arm)
        if not cost >= 0 or not tokens >= 0:
            raise ValueError(f"a cycle cannot cost {cost} or commit {tokens} tokens")
        discount = self.settings.discount
        for state in self._arms.values():
            state.decay(discount)
        self._relative_weight *= discount
        self._paired.decay(discount)
        self._arms[arm].add(cost, tokens)
        self._since[arm] = 0
        self._since[arm.other] += 1
        if revealed is not None and arm is Arm.TIER:
            self._accepted, self._judged = self._accepted * discount, self._judged * discount
            self._accepted += sum(revealed.accept)
            self._judged += len(revealed.accept)
            plain_tokens = revealed.expected_tokens(self.unseen_accept())
            self._arms[Arm.PLAIN].add(revealed.cost, plain_tokens)
            if revealed.paired:
                self._paired.add(cost - revealed.cost, tokens - plain_tokens)
            self._since[Arm.PLAIN] = 0
        self.cycles += 1
        self.history.append(arm)
        self.revealed.append(revealed is not None and arm is Arm.TIER)

    @property
    def tier_cycles(self) -> int:
        return sum(1 for arm in self.history if arm is Arm.TIER)


@dataclass(frozen=True)
class AdaptivePlan:
    """What every controller of a run starts from: the prices, the priors, the knobs.

    One per run (an adapter's set-up call, :func:`viasd_adapt.engine.context.open_context`, builds it
    from ``tuned.json``'s measurements or the mask's layer counts); each generation gets a fresh
    :class:`TierController` from it (:meth:`controller`), so no sequence's evidence leaks into
    another's choices. ``sources`` says in words where the prices and priors came from.
    """

    prices: PassPrices = field(default_factory=PassPrices)
    priors: Mapping[Arm, ArmPrior] = field(default_factory=dict)
    relative: RelativePrior | None = None
    most_tokens: int = 6
    settings: AdaptiveSettings = field(default_factory=AdaptiveSettings)
    sources: tuple[str, ...] = ()

    def controller(self) -> TierController:
        """A fresh controller for one generation."""
        return TierController(self.settings, dict(self.priors), self.most_tokens, self.relative)

    @classmethod
    def fallback(cls, settings: TierSettings) -> "AdaptivePlan":
        """The plan of a verify step built without one (a ``TieredVerifier`` or ``VerifyStep`` made
        directly, with no tier opened): the slim pass priced by the skip ratio (it runs about
        ``1 - ratio`` of the layers), a resumed pass as a full one (the first skipped layer is not
        known here), drafting free; the tier stated against the untiered arm as a slim pass more per
        cycle (:class:`RelativePrior`), as with nothing measured."""
        prices = PassPrices(slim=1.0 - settings.ratio)
        return cls(prices, {}, RelativePrior(extra_cost=prices.slim), settings.gamma + 1,
                   sources=("prices: by the skip ratio (no tier opened)",
                            "priors: the tier stated against the untiered arm (nothing measured)"))


__all__ = ["AdaptivePlan", "AdaptiveSettings", "Arm", "ArmPrior", "PassPrices", "RelativePrior", "Revealed", "TierController"]
