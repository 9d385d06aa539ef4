"""Synthetic sequences for the adaptive tier's controller: both arms drawn per cycle from the same
drafts, so a tier cycle can reveal what untiered SD would have committed, as the real cascade does.

A :class:`Regime` says how often untiered SD accepts a draft (``plain_accept``), how often the tier
accepts one (``tier_accept``: the lossy router keeps more, the lossless cascade about as many), what
a cycle of each arm costs in full-equivalent passes, and how often a tier cycle's full pass sees the
block (``reveal``: always for the lossless cascade, on escalation only for lossy). :func:`drive`
runs a controller through a list of regimes with a fixed seed and returns the arm of every cycle
and the cheaper arm of every cycle's regime.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from viasd_adapt.core.adaptive import Arm, Revealed, TierController

GAMMA = 5


@dataclass(frozen=True)
class Regime:
    plain_accept: float
    tier_accept: float
    plain_cost: float
    tier_cost: float
    reveal: float = 1.0
    cycles: int = 100
    #: the lossless cascade: the tier commits what untiered SD commits on the same drafts, plus the
    #: slim verifier's correction where untiered SD rejected a draft and q keeps it (this often);
    #: None: the tier's verdicts are drawn on their own, at ``tier_accept`` (lossy)
    rescue: float | None = None

    def tier_tokens_per_cycle(self) -> float:
        if self.rescue is None:
            return self.tokens_per_cycle(self.tier_accept)
        return self.tokens_per_cycle(self.plain_accept) + self.rescue * (1 - self.plain_accept ** GAMMA)

    @staticmethod
    def tokens_per_cycle(accept: float) -> float:
        """Expected tokens of a cycle whose drafts are each accepted with probability ``accept``."""
        return sum(accept ** k for k in range(GAMMA + 1))

    def per_token(self, arm: Arm) -> float:
        if arm is Arm.TIER:
            return self.tier_cost / self.tier_tokens_per_cycle()
        return self.plain_cost / self.tokens_per_cycle(self.plain_accept)

    @property
    def cheaper(self) -> Arm:
        return Arm.TIER if self.per_token(Arm.TIER) < self.per_token(Arm.PLAIN) else Arm.PLAIN


def _accepted(rng: random.Random, accept: float) -> list[int]:
    """One block's untiered verdicts, up to and including the first rejection."""
    verdicts = []
    for _ in range(GAMMA):
        verdicts.append(1 if rng.random() < accept else 0)
        if not verdicts[-1]:
            break
    return verdicts


def drive(controller: TierController, regimes: list[Regime], seed: int) -> tuple[list[Arm], list[Arm], list[float]]:
    """Runs ``controller`` through ``regimes``; returns per cycle the arm it chose, the cheaper arm,
    and the cost per token it paid that cycle's regime (cost, tokens summed by the caller)."""
    rng = random.Random(seed)
    chosen, cheaper, costs = [], [], []
    for regime in regimes:
        for _ in range(regime.cycles):
            arm = controller.choose()
            plain = _accepted(rng, regime.plain_accept)
            if regime.rescue is None:
                tier_tokens = sum(_accepted(rng, regime.tier_accept)) + 1
            else:
                rescued = plain[-1] == 0 and rng.random() < regime.rescue
                tier_tokens = sum(plain) + 1 + int(rescued)
            if arm is Arm.PLAIN:
                cost, tokens, revealed = regime.plain_cost, sum(plain) + 1, None
            else:
                cost, tokens = regime.tier_cost, tier_tokens
                revealed = (Revealed(tuple(float(v) for v in plain), GAMMA, regime.plain_cost)
                            if rng.random() < regime.reveal else None)
            controller.observe(arm, cost, tokens, revealed)
            chosen.append(arm)
            cheaper.append(regime.cheaper)
            costs.append(cost / tokens)
    return chosen, cheaper, costs


def on_cheaper(chosen: list[Arm], cheaper: list[Arm], start: int, end: int) -> float:
    """Share of the cycles ``start .. end - 1`` that ran their regime's cheaper arm."""
    pairs = list(zip(chosen, cheaper))[start:end]
    return sum(a is b for a, b in pairs) / len(pairs)


#: the tier pays by about a fifth: the lossy router keeps more drafts than q would, for a slim pass
#: that often replaces the full one (tier cycles reveal untiered SD a third of the time: escalations)
LOSSY_PAYS = Regime(plain_accept=0.55, tier_accept=0.8, plain_cost=1.1, tier_cost=0.95, reveal=0.35)
#: the tier loses by about a third: the router escalates most cycles (it reveals untiered SD there)
LOSSY_LOSES = Regime(plain_accept=0.7, tier_accept=0.7, plain_cost=1.1, tier_cost=1.45, reveal=0.8)
#: lossless: the cascade adds a slim pass for at most one more token; it loses by about a quarter
LOSSLESS_LOSES = Regime(plain_accept=0.6, tier_accept=0.0, plain_cost=1.1, tier_cost=1.5, reveal=1.0, rescue=0.2)
#: lossless where the slim pass is cheap and rescues most cycles: it pays by about a fifth
LOSSLESS_PAYS = Regime(plain_accept=0.45, tier_accept=0.0, plain_cost=1.1, tier_cost=1.3, reveal=1.0, rescue=0.9)

__all__ = ["GAMMA", "LOSSLESS_LOSES", "LOSSLESS_PAYS", "LOSSY_LOSES", "LOSSY_PAYS", "Regime", "drive", "on_cheaper"]
