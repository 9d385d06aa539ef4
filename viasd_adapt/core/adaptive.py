"""The adaptive tier: per sequence, whether each cycle uses the slim verifier or verifies untiered.

Whether the slim tier pays depends on the pair, the text and the hardware, and often it does not.
Rather than ask the user to know in advance, a :class:`TierController` decides cycle by cycle
between two *arms*:

* :attr:`Arm.TIER`: the cycle runs the configured tiered mode (lossless cascade or lossy);
* :attr:`Arm.PLAIN`: the cycle verifies the way the untiered framework does (mode ``none``).

It decides on **cost per committed token**, not on acceptance: each arm's estimate is the ratio of
its (discounted) priced passes to its (discounted) committed tokens, where every pass is priced in
full-equivalent units by a :class:`PassPrices` table. Acceptance alone is a poor signal: a tier
can raise acceptance and still cost more, because its slim pass is not free.

The rule is an optimistic two-armed bandit on that cost, in the family of discounted UCB
(Garivier and Moulines, "On Upper-Confidence Bound Policies for Switching Bandit Problems", 2011),
written for a cost to minimise and a ratio estimate:

* each arm's estimate is ``cost / tokens`` over its cycles. The noise is in the tokens: a cycle
  commits 1 to gamma + 1 of them while its priced passes hardly vary. So the arm's *optimistic*
  estimate divides its cost per cycle by an upper confidence bound on its mean tokens per cycle,
  ``mean + confidence * spread / sqrt(cycles)``, where the spread is the tokens' standard deviation,
  shrunk towards that of a uniform draw over 1 .. gamma + 1 while few cycles are seen (two
  unlucky one-token cycles must not condemn an arm);
* it runs the arm whose estimate is lower, unless the other arm's optimistic estimate is lower
  still: then it tries the other arm. So
  an arm that is clearly worse is tried rarely, and one that might be better is tried until the
  evidence says which;
* older cycles are **discounted** (``discount`` per cycle): a neglected arm's evidence fades, its
  error grows, and it is tried again now and then. That is how the choice goes both ways, and how
  a sequence whose text changes character (prose, then code) moves its estimates with it;
* it **starts from a prior**: :class:`ArmPrior` pseudo-cycles per arm, which fade with the same
  discount, and a :class:`RelativePrior` that states the tier against the untiered arm as it is
  being measured: from ``tuned.json``'s measured points, the difference the calibration measured
  between the arms; with nothing measured, the lossless cascade's a slim pass more per cycle, for
  at most one more token, which lossy is presumed too (:mod:`viasd_adapt.engine.priors` says which,
  and why). A controller made with no prior at all starts untiered (the baseline the tier must
  beat) and tries the tier after ``first_probe`` cycles.

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
    weight: float = 8.0
    tokens_per_cycle: float = 2.0

    def __post_init__(self) -> None:
        for name in ("cost_per_token", "weight", "tokens_per_cycle"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < float("inf"):
                raise ConfigError(f"arm prior {name} must be a finite number > 0, got {value!r}")


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
    that skips q can cost less than an untiered one: ``extra_cost`` may be negative."""

    extra_cost: float
    extra_tokens: float = 0.0
    weight: float = 3.0

    def __post_init__(self) -> None:
        if isinstance(self.extra_cost, bool) or not isinstance(self.extra_cost, (int, float)) \
                or not math.isfinite(self.extra_cost):
            raise ConfigError(f"relative prior extra_cost must be a finite number, got {self.extra_cost!r}")
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) or not 0.0 <= self.weight < float("inf"):
            raise ConfigError(f"relative prior weight must be a finite number >= 0, got {self.weight!r}")
        if isinstance(self.extra_tokens, bool) or not isinstance(self.extra_tokens, (int, float)) \
                or not -1.0 <= self.extra_tokens <= 1.0:
            raise ConfigError(f"relative prior extra_tokens must be in [-1, 1], got {self.extra_tokens!r}")


@dataclass(frozen=True)
class AdaptiveSettings:
    """The controller's knobs (module docstring).

    Attributes:
        confidence: how many standard errors of optimism an arm gets (0: purely greedy, never tries
            an arm believed worse once both are known).
        discount: weight kept per cycle by older observations and the prior, in (0, 1].
        first_probe: with nothing known of the other arm, try it after this many cycles.
        prior_cycles: how many cycles' worth the spread of a uniform draw counts for, against the
            spread actually seen (module docstring).
    """

    confidence: float = 1.0
    discount: float = 0.99
    first_probe: int = 2
    prior_cycles: float = 2.0

    def __post_init__(self) -> None:
        for name in ("confidence", "prior_cycles"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < float("inf"):
                raise ConfigError(f"adaptive {name} must be a finite number >= 0, got {value!r}")
        if isinstance(self.discount, bool) or not isinstance(self.discount, (int, float)) or not 0.0 < self.discount <= 1.0:
            raise ConfigError(f"adaptive discount must be in (0, 1], got {self.discount!r}")
        if isinstance(self.first_probe, bool) or not isinstance(self.first_probe, int) or self.first_probe < 1:
            raise ConfigError(f"adaptive first_probe must be an integer >= 1, got {self.first_probe!r}")


#: The relative spread of a prior's tokens per cycle (a cycle commits 1 to gamma + 1 tokens).
PRIOR_SPREAD = 0.5


@dataclass
class _ArmState:
    """Discounted sums of one arm: priced cost, committed tokens and their squares, cycles (prior
    pseudo-cycles included)."""

    cost: float = 0.0
    tokens: float = 0.0
    squares: float = 0.0
    cycles: float = 0.0

    def estimate(self) -> float | None:
        """Cost per committed token, or None when nothing is known of the arm."""
        return self.cost / self.tokens if self.tokens > 0 else None

    def optimistic(self, confidence: float, most_tokens: int, prior_cycles: float) -> float | None:
        """The cost per token if the arm commits ``confidence`` standard errors more tokens per cycle
        than seen (at most ``most_tokens``); None when nothing is known of the arm."""
        if self.cycles <= 0 or self.tokens <= 0:
            return None
        mean = self.tokens / self.cycles
        seen = max(0.0, self.squares / self.cycles - mean * mean)
        uniform = (most_tokens - 1) ** 2 / 12.0  # the variance of a uniform draw over 1 .. most_tokens
        variance = (self.cycles * seen + prior_cycles * uniform) / (self.cycles + prior_cycles)
        bound = min(float(most_tokens), mean + confidence * math.sqrt(variance / self.cycles))
        return (self.cost / self.cycles) / bound

    def add(self, cost: float, tokens: float, cycles: float = 1.0, squares: float | None = None) -> None:
        self.cost += cost
        self.tokens += tokens
        self.squares += tokens * tokens if squares is None else squares
        self.cycles += cycles

    def decay(self, factor: float) -> None:
        self.cost *= factor
        self.tokens *= factor
        self.squares *= factor
        self.cycles *= factor


@dataclass
class TierController:
    """Chooses each cycle's arm from the cycles before it (module docstring).

    Use: ``arm = controller.choose()`` before the cycle, ``controller.observe(arm, cost, tokens)``
    after it. ``choose`` is a pure function of what was observed: calling it twice gives the
    same arm, and it never looks at the cycle it decides. ``most_tokens``: the most tokens one
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
            self._arms[Arm(arm)].add(tokens * prior.cost_per_token, tokens, prior.weight,
                                     squares=tokens * prior.tokens_per_cycle * (1 + PRIOR_SPREAD ** 2))
        self.cycles = 0
        self._relative_weight = self.relative.weight if self.relative is not None else 0.0
        self.history: list[Arm] = []

    # ------------------------------------------------------------------ decisions
    def _views(self) -> dict[Arm, _ArmState]:
        """What is known of each arm: its own cycles, and for the tier the relative prior's
        pseudo-cycles, stated against the untiered arm's cycles as measured so far."""
        plain, tier = self._arms[Arm.PLAIN], self._arms[Arm.TIER]
        if self._relative_weight <= 0 or plain.cycles <= 0:
            return self._arms
        view = _ArmState(tier.cost, tier.tokens, tier.squares, tier.cycles)
        weight, relative = self._relative_weight, self.relative
        cost = max(plain.cost / plain.cycles + relative.extra_cost, 1e-6)
        tokens = max(1.0, plain.tokens / plain.cycles + relative.extra_tokens)
        view.add(weight * cost, weight * tokens, weight, squares=weight * tokens * tokens * (1 + PRIOR_SPREAD ** 2))
        return {Arm.TIER: view, Arm.PLAIN: plain}

    def estimates(self) -> dict[Arm, float | None]:
        """Each arm's current cost per committed token (None: unknown)."""
        return {arm: state.estimate() for arm, state in self._views().items()}

    def exploited(self) -> Arm:
        """The arm believed cheaper. With nothing known of either, the untiered arm: it is the
        baseline the tier must beat, and the one whose cost the first cycles measure."""
        estimates = self.estimates()
        tier, plain = estimates[Arm.TIER], estimates[Arm.PLAIN]
        if tier is None and plain is None:
            return Arm.PLAIN
        if tier is None or plain is None:
            return Arm.TIER if plain is None else Arm.PLAIN
        return Arm.TIER if tier < plain else Arm.PLAIN

    def choose(self) -> Arm:
        """The arm of the next cycle, from the cycles before it only."""
        best = self.exploited()
        views = self._views()
        other = views[best.other]
        if other.estimate() is None:  # never seen: tried once the exploited arm has a first measure
            return best.other if self.cycles >= self.settings.first_probe else best
        optimistic = other.optimistic(self.settings.confidence, self.most_tokens, self.settings.prior_cycles)
        return best.other if optimistic < views[best].estimate() else best

    # ------------------------------------------------------------------ observations
    def observe(self, arm: Arm, cost: float, tokens: int) -> None:
        """One finished cycle of ``arm``: its priced passes and the tokens it committed."""
        arm = Arm(arm)
        if not cost >= 0 or not tokens >= 0:
            raise ValueError(f"a cycle cannot cost {cost} or commit {tokens} tokens")
        for state in self._arms.values():
            state.decay(self.settings.discount)
        self._relative_weight *= self.settings.discount
        self._arms[arm].add(cost, tokens)
        self.cycles += 1
        self.history.append(arm)

    @property
    def tier_cycles(self) -> int:
        return sum(1 for arm in self.history if arm is Arm.TIER)


@dataclass(frozen=True)
class AdaptivePlan:
    """What every controller of a run starts from: the prices, the priors, the knobs.

    One per run (an adapter's set-up call, :func:`viasd_adapt.engine.tier.open_tier`, builds it
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


__all__ = ["AdaptivePlan", "AdaptiveSettings", "Arm", "ArmPrior", "PassPrices", "RelativePrior", "TierController"]
