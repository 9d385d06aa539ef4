"""The adaptive tier's controller (viasd_adapt.core.adaptive), on synthetic arms with fixed seeds.

Each synthetic arm commits a random number of tokens per cycle at a fixed priced cost per cycle, so
its true cost per committed token is known; the tests check that the controller settles on the
cheaper arm within a stated number of cycles, probes the other one rarely and within its budget,
follows a change both ways, and decides every cycle from the cycles before it only.
"""

from __future__ import annotations

import copy
import random

import pytest

from viasd_adapt.core.adaptive import AdaptiveSettings, Arm, ArmPrior, PassPrices, TierController
from viasd_adapt.errors import ConfigError


class SyntheticArm:
    """A cycle costs ``cost`` and commits 1..``most`` tokens, uniformly: ``cost / mean`` per token."""

    def __init__(self, cost: float, most: int):
        self.cost, self.most = cost, most

    @property
    def per_token(self) -> float:
        return self.cost / ((1 + self.most) / 2)

    def cycle(self, rng: random.Random) -> tuple[float, int]:
        return self.cost, rng.randint(1, self.most)


#: the tier pays: a slim pass (0.3) on top of the full one, for twice the tokens per cycle
TIER_PAYS = {Arm.TIER: SyntheticArm(1.4, 7), Arm.PLAIN: SyntheticArm(1.1, 3)}  # 0.35 vs 0.55 per token
#: the tier loses: a slim pass (0.55) for no more tokens
TIER_LOSES = {Arm.TIER: SyntheticArm(1.65, 3), Arm.PLAIN: SyntheticArm(1.1, 3)}  # 0.825 vs 0.55 per token


def run(controller: TierController, arms, cycles: int, seed: int, switch_at: int | None = None, switched=None,
        exploited: list | None = None):
    rng = random.Random(seed)
    chosen = []
    for t in range(cycles):
        world = switched if switch_at is not None and t >= switch_at else arms
        arm = controller.choose()
        cost, tokens = world[arm].cycle(rng)
        controller.observe(arm, cost, tokens)
        chosen.append(arm)
        if exploited is not None:
            exploited.append(controller.exploited())
    return chosen


def controller() -> TierController:
    return TierController(most_tokens=7)


def settled_on(chosen: list[Arm], arm: Arm, after: int) -> float:
    """Share of the cycles from ``after`` on that ran ``arm``."""
    tail = chosen[after:]
    return sum(a is arm for a in tail) / len(tail)


# Convergence, stated: with no prior, for every seed below, the controller exploits the cheaper arm
# from cycle 50 on and runs it on at least 90% of the cycles from cycle 20 on.
SEEDS = range(30)
SETTLE, SHARE_FROM, SHARE = 50, 20, 0.90


@pytest.mark.parametrize("arms, right", [(TIER_PAYS, Arm.TIER), (TIER_LOSES, Arm.PLAIN)], ids=["tier-pays", "tier-loses"])
def test_it_converges_to_the_cheaper_arm(arms, right):
    for seed in SEEDS:
        exploited: list[Arm] = []
        chosen = run(controller(), arms, 300, seed, exploited=exploited)
        assert all(arm is right for arm in exploited[SETTLE:]), f"seed {seed}"
        assert settled_on(chosen, right, SHARE_FROM) >= SHARE, f"seed {seed}"


def test_the_control_a_controller_that_never_adapts_stays_on_the_losing_tier():
    """The measure above can fail: a controller pinned to one arm scores 0 on the other's test."""
    class Pinned(TierController):
        def choose(self) -> Arm:
            return Arm.TIER

    chosen = run(Pinned(most_tokens=7), TIER_LOSES, 300, seed=0)
    assert settled_on(chosen, Arm.PLAIN, SHARE_FROM) == 0.0


def test_it_tries_a_clearly_worse_arm_rarely_and_keeps_trying_it():
    """Once one arm is clearly better the other runs on a few percent of the cycles, never none:
    the evidence about it fades (discount), so it is tried again now and then."""
    for seed in range(10):
        chosen = run(controller(), TIER_LOSES, 1000, seed)
        tail = chosen[100:]
        assert 0 < sum(arm is Arm.TIER for arm in tail) <= 0.06 * len(tail), f"seed {seed}"


def test_without_optimism_it_never_tries_a_known_worse_arm():
    greedy = TierController(AdaptiveSettings(confidence=0.0), priors={Arm.TIER: ArmPrior(0.9), Arm.PLAIN: ArmPrior(0.5)})
    assert run(greedy, TIER_PAYS, 100, seed=1) == [Arm.PLAIN] * 100


#: A change is followed within this many cycles: the old evidence must fade (discount 0.99) and the
#: arm that became better is tried rarely, so a change is seen slowly; that is the price of rarity.
FOLLOW = 250


@pytest.mark.parametrize("seed", range(10))
def test_it_follows_a_change_both_ways(seed):
    chosen = run(controller(), TIER_PAYS, 800, seed, switch_at=200, switched=TIER_LOSES)
    assert settled_on(chosen[:200], Arm.TIER, SETTLE) >= SHARE
    assert settled_on(chosen, Arm.PLAIN, 200 + FOLLOW) >= SHARE

    chosen = run(controller(), TIER_LOSES, 800, seed, switch_at=200, switched=TIER_PAYS)
    assert settled_on(chosen[:200], Arm.PLAIN, SETTLE) >= SHARE
    assert settled_on(chosen, Arm.TIER, 200 + FOLLOW) >= SHARE


def test_a_prior_decides_the_first_cycles():
    favours_tier = TierController(priors={Arm.TIER: ArmPrior(0.35), Arm.PLAIN: ArmPrior(0.55)}, most_tokens=7)
    favours_plain = TierController(priors={Arm.TIER: ArmPrior(0.85), Arm.PLAIN: ArmPrior(0.55)}, most_tokens=7)
    assert run(favours_tier, TIER_PAYS, 5, seed=0) == [Arm.TIER] * 5
    assert run(favours_plain, TIER_LOSES, 5, seed=0) == [Arm.PLAIN] * 5
    # with nothing known, the untiered arm measures first and the tier is tried early
    assert run(controller(), TIER_LOSES, 4, seed=0)[:3] == [Arm.PLAIN, Arm.PLAIN, Arm.TIER]


def test_a_wrong_prior_fades_and_the_sequence_decides():
    for seed in range(10):
        wrong = TierController(priors={Arm.TIER: ArmPrior(0.3), Arm.PLAIN: ArmPrior(0.55)}, most_tokens=7)
        chosen = run(wrong, TIER_LOSES, 300, seed)
        assert settled_on(chosen, Arm.PLAIN, 100) >= SHARE, f"seed {seed}"


@pytest.mark.parametrize("seed", range(5))
def test_each_decision_depends_only_on_the_cycles_before_it(seed):
    """Non-anticipating: changing what cycle t commits never changes the arms of cycles 0..t."""
    rng = random.Random(seed)
    stream = [(TIER_PAYS[Arm.TIER].cycle(rng), TIER_PAYS[Arm.PLAIN].cycle(rng)) for _ in range(80)]

    def decisions(outcomes):
        deciding, arms = controller(), []
        for tier_cycle, plain_cycle in outcomes:
            arm = deciding.choose()
            arms.append(arm)
            deciding.observe(arm, *(tier_cycle if arm is Arm.TIER else plain_cycle))
        return arms

    base = decisions(stream)
    for t in (0, 5, 17, 40):
        changed = list(stream)
        changed[t] = ((99.0, 1), (99.0, 1))  # an absurd cycle t
        assert decisions(changed)[: t + 1] == base[: t + 1]


def test_choose_reads_nothing_of_the_cycle_it_decides():
    deciding = controller()
    run(deciding, TIER_PAYS, 30, seed=3)
    before = deciding.choose()
    assert deciding.choose() is before  # asking again changes nothing
    frozen = copy.deepcopy(deciding)
    deciding.observe(before, 50.0, 1)  # the cycle it decided, however it turns out...
    assert frozen.choose() is before  # ...was decided before it happened


def test_pass_prices():
    prices = PassPrices(draft=0.1, slim=0.5, resumed=0.6)
    assert prices.cycle_cost(draft_passes=5, slim_passes=1, full_passes=2, resumed_passes=1) == pytest.approx(
        0.5 + 0.5 + 1.0 + 0.6)
    measured = PassPrices.from_seconds(c_draft=0.001, c_slim=0.006, c_resume=None, c_full_block=0.01)
    assert (measured.draft, measured.slim, measured.resumed) == pytest.approx((0.1, 0.6, 1.0))
    by_layers = PassPrices.from_layers(num_layers=16, retained=9, first_skipped=4)
    assert (by_layers.slim, by_layers.resumed) == (9 / 16, 12 / 16)
    with pytest.raises(ConfigError, match="slim"):
        PassPrices(slim=float("nan"))
    with pytest.raises(ConfigError, match="full pass"):
        PassPrices(full=0.0)
    with pytest.raises(ConfigError, match="full block"):
        PassPrices.from_seconds(0.1, 0.1, 0.1, 0.0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(confidence=-1.0), "confidence"), (dict(confidence=float("inf")), "confidence"), (dict(prior_cycles=-1), "prior_cycles"),
    (dict(discount=0.0), "discount"), (dict(discount=1.5), "discount"), (dict(first_probe=0), "first_probe"),
])
def test_bad_settings_are_refused_by_name(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        AdaptiveSettings(**kwargs)


def test_bad_priors_and_observations_are_refused():
    with pytest.raises(ConfigError, match="cost_per_token"):
        ArmPrior(cost_per_token=0.0)
    with pytest.raises(ValueError, match="cannot cost"):
        TierController().observe(Arm.TIER, -1.0, 2)
    with pytest.raises(ValueError, match="cannot cost"):
        TierController().observe(Arm.TIER, float("nan"), 2)
    with pytest.raises(ConfigError, match="most_tokens"):
        TierController(most_tokens=0)


def test_a_relative_prior_makes_the_tier_show_it_buys_its_slim_pass():
    """With nothing measured, the lossless tier is stated against the untiered arm: a slim pass more
    per cycle for no more tokens. Where the tier loses, it is tried on fewer cycles than with no
    prior at all; where it clearly pays, it still takes over."""
    from viasd_adapt.core.adaptive import RelativePrior

    prior = RelativePrior(extra_cost=0.55)
    with_prior = [run(TierController(most_tokens=7, relative=prior), TIER_LOSES, 60, s) for s in range(20)]
    without = [run(controller(), TIER_LOSES, 60, s) for s in range(20)]
    tried = lambda runs: sum(arm is Arm.TIER for chosen in runs for arm in chosen)  # noqa: E731
    assert tried(with_prior) < tried(without)
    for seed in range(10):
        chosen = run(TierController(most_tokens=7, relative=prior), TIER_PAYS, 300, seed)
        assert settled_on(chosen, Arm.TIER, 150) >= SHARE, f"seed {seed}"
    with pytest.raises(ConfigError, match="extra_tokens"):
        RelativePrior(extra_cost=0.5, extra_tokens=2.0)


def test_a_relative_prior_may_state_a_tier_cheaper_per_cycle():
    """A lossy cycle that skips q can cost less than an untiered one: a negative extra cost is a
    statement, not an error; the tier is then the exploited arm from the first cycle it is stated,
    and the sequence's own cycles still decide."""
    from viasd_adapt.core.adaptive import RelativePrior

    cheaper = RelativePrior(extra_cost=-0.3, extra_tokens=0.5, weight=8.0)
    for seed in range(5):
        chosen = run(TierController(priors={Arm.PLAIN: ArmPrior(0.55, tokens_per_cycle=2.0)}, most_tokens=7,
                                    relative=cheaper), TIER_PAYS, 60, seed)
        assert chosen[0] is Arm.TIER and settled_on(chosen, Arm.TIER, 10) >= SHARE, f"seed {seed}"
        wrong = run(TierController(priors={Arm.PLAIN: ArmPrior(0.55, tokens_per_cycle=2.0)}, most_tokens=7,
                                   relative=cheaper), TIER_LOSES, 300, seed)
        assert settled_on(wrong, Arm.PLAIN, 150) >= SHARE, f"seed {seed}"
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="extra_cost"):
            RelativePrior(extra_cost=bad)
