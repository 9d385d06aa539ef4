"""The adaptive tier's controller (viasd_adapt.core.adaptive), on synthetic sequences with fixed seeds.

The synthetic sequences (tests/support/synthetic_arms.py) draw both arms' verdicts from the same
cycle, so a tier cycle can reveal what untiered SD would have committed, as the real cascade does.
The tests check that the controller settles on the cheaper arm, follows a change both ways with the
plan built from a shipped ``tuned.json`` (the weights as deployed), switches the tier on with no
``tuned.json``, learns the untiered arm from tier cycles, and decides every cycle from the cycles
before it only. Each goal has a control that fails it.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.synthetic_arms import LOSSLESS_LOSES, LOSSLESS_PAYS, LOSSY_LOSES, LOSSY_PAYS, Regime, drive, on_cheaper
from viasd_adapt.core.adaptive import (AdaptivePlan, AdaptiveSettings, Arm, ArmPrior, PassPrices, RelativePrior, Revealed,
                                       TierController)
from viasd_adapt.errors import ConfigError

SEEDS = range(20)
#: the issue's goals: from this many cycles after a change, the cheaper arm on this share of cycles
AFTER_CHANGE, SHARE = 15, 0.80


def _boundaries(regimes: list[Regime]) -> list[int]:
    edges = [0]
    for regime in regimes:
        edges.append(edges[-1] + regime.cycles)
    return edges


def pooled_share_after_changes(make, regimes: list[Regime], seeds=SEEDS) -> list[float]:
    """Per change of regime: the share of cycles, pooled over ``seeds``, from ``AFTER_CHANGE`` cycles
    after the change to the next one, that ran the cheaper arm."""
    edges = _boundaries(regimes)
    hits = [[0, 0] for _ in regimes[1:]]
    for seed in seeds:
        chosen, cheaper, _ = drive(make(), regimes, seed)
        for k in range(1, len(regimes)):
            window = list(zip(chosen, cheaper))[edges[k] + AFTER_CHANGE: edges[k + 1]]
            hits[k - 1][0] += sum(a is b for a, b in window)
            hits[k - 1][1] += len(window)
    return [ok / total for ok, total in hits]


# ============================================================================== the shipped plan

ASSETS = Path(__file__).resolve().parents[2] / "viasd_adapt" / "assets" / "demo-ee"


@pytest.fixture(scope="module")
def shipped_lossy_plan() -> AdaptivePlan:
    """The plan a default lossy run on demo-ee builds: prices and the relative prior from the shipped
    tuned.json's measured points, with the weights as deployed (engine.priors.adaptive_plan)."""
    from viasd_adapt.config.tuned import TunedSettings
    from viasd_adapt.engine.priors import adaptive_plan
    from viasd_adapt.models.pair import load_pair

    tuned = TunedSettings.load(ASSETS / "tuned.json")
    point = tuned.best("lossy-fixed")
    pair = load_pair(ASSETS / "target", ASSETS / "draft", ASSETS / Path(point.mask).name, device="cpu")
    plan = adaptive_plan(point.settings.with_(adaptive=True), pair.target, pair.routing, tuned, pair.draft)
    assert any("measured points of tuned.json" in source for source in plan.sources), plan.sources
    return plan


@pytest.fixture(scope="module")
def fallback_plan() -> AdaptivePlan:
    """The plan of the same run with no tuned.json: prices by layer counts, the cautious prior."""
    from viasd_adapt.config.tuned import TunedSettings
    from viasd_adapt.engine.priors import adaptive_plan
    from viasd_adapt.models.pair import load_pair

    point = TunedSettings.load(ASSETS / "tuned.json").best("lossy-fixed")
    pair = load_pair(ASSETS / "target", ASSETS / "draft", ASSETS / Path(point.mask).name, device="cpu")
    plan = adaptive_plan(point.settings.with_(adaptive=True), pair.target, pair.routing, None, pair.draft)
    assert any("nothing measured" in source for source in plan.sources), plan.sources
    return plan


#: lossy: the tier pays, then loses, then pays again (the issue's synthetic sequence)
LOSSY_CHANGES = [replace(LOSSY_PAYS, cycles=100), replace(LOSSY_LOSES, cycles=120), replace(LOSSY_PAYS, cycles=120)]
#: lossless: the tier loses, pays, loses
LOSSLESS_CHANGES = [replace(LOSSLESS_LOSES, cycles=100), replace(LOSSLESS_PAYS, cycles=120),
                    replace(LOSSLESS_LOSES, cycles=120)]


def test_the_synthetic_regimes_differ_by_what_the_goals_say():
    """The regimes are not a tie: the cheaper arm saves at least 15% per token in each."""
    for regime in (LOSSY_PAYS, LOSSY_LOSES, LOSSLESS_PAYS, LOSSLESS_LOSES):
        costs = sorted(regime.per_token(arm) for arm in Arm)
        assert costs[0] <= 0.85 * costs[1]


def test_with_the_shipped_plan_it_follows_a_change_both_ways(shipped_lossy_plan):
    """From 15 cycles after each change, the cheaper arm on at least 80% of cycles (pooled over 20
    seeds), with the plan built from demo-ee's shipped tuned.json."""
    shares = pooled_share_after_changes(shipped_lossy_plan.controller, LOSSY_CHANGES)
    assert min(shares) >= SHARE, shares
    shares = pooled_share_after_changes(shipped_lossy_plan.controller, LOSSLESS_CHANGES)
    assert min(shares) >= SHARE, shares


def test_the_shipped_plan_starts_with_the_arm_its_calibration_found_cheaper(shipped_lossy_plan, fallback_plan):
    """demo-ee's measured lossy point is cheaper per token than its untiered point, so a default
    lossy run's first cycle runs the tier; with no tuned.json (control) it measures untiered SD
    first."""
    assert shipped_lossy_plan.relative.reference is not None
    assert shipped_lossy_plan.controller().choose() is Arm.TIER
    assert fallback_plan.relative.reference is None and fallback_plan.controller().choose() is Arm.PLAIN


def test_the_control_a_stale_calibration_prior_does_not_follow(shipped_lossy_plan):
    """The control: the same plan with its prior weighted and remembered as it was deployed before
    (the calibration's untiered cost as an absolute prior worth 100 cycles, discount 0.99) misses
    the goal on the change where the calibration is wrong."""
    relative = shipped_lossy_plan.relative
    stale = replace(shipped_lossy_plan, settings=AdaptiveSettings(discount=0.99),
                    priors={Arm.PLAIN: ArmPrior(0.61, weight=100.0, tokens_per_cycle=2.63)},
                    relative=replace(relative, weight=100.0))
    assert min(pooled_share_after_changes(stale.controller, LOSSY_CHANGES)) < SHARE


def test_with_no_tuned_file_it_switches_the_tier_on_where_it_pays(fallback_plan):
    """With no tuned.json, where the tier pays by at least 15%, it runs the tier on at least 80% of
    the cycles after the first 40 (pooled over 20 seeds), lossy and lossless."""
    for regime in (LOSSY_PAYS, LOSSLESS_PAYS):
        assert regime.per_token(Arm.TIER) <= 0.85 * regime.per_token(Arm.PLAIN)
        ran = []
        for seed in SEEDS:
            chosen, _, _ = drive(fallback_plan.controller(), [replace(regime, cycles=200)], seed)
            ran += chosen[40:]
        assert sum(arm is Arm.TIER for arm in ran) / len(ran) >= SHARE


def test_the_control_a_prior_that_never_fades_keeps_the_tier_off(fallback_plan):
    stuck = replace(fallback_plan, settings=AdaptiveSettings(discount=1.0),
                    relative=replace(fallback_plan.relative, weight=1000.0))
    ran = []
    for seed in SEEDS:
        chosen, _, _ = drive(stuck.controller(), [replace(LOSSY_PAYS, cycles=200)], seed)
        ran += chosen[40:]
    assert sum(arm is Arm.TIER for arm in ran) / len(ran) < SHARE


# ============================================================================== stationary sequences


@pytest.mark.parametrize("regime", [LOSSY_PAYS, LOSSY_LOSES, LOSSLESS_PAYS, LOSSLESS_LOSES],
                         ids=["lossy-pays", "lossy-loses", "lossless-pays", "lossless-loses"])
def test_it_settles_on_the_cheaper_arm_and_pays_little_for_probing(regime):
    """On a sequence that does not change, the cheaper arm on at least 85% of the cycles from cycle
    40 on (pooled over 20 seeds), and the expected cost per token within 5% of the cheaper arm's."""
    ran, cost = [], 0.0
    for seed in SEEDS:
        chosen, cheaper, _ = drive(TierController(relative=RelativePrior(0.45)), [replace(regime, cycles=300)], seed)
        ran += [a is b for a, b in zip(chosen[40:], cheaper[40:])]
        cost += sum(regime.per_token(arm) for arm in chosen[40:])
    assert sum(ran) / len(ran) >= 0.85
    assert cost / len(ran) <= 1.05 * min(regime.per_token(arm) for arm in Arm)


def test_the_control_a_controller_that_never_adapts_fails_the_share():
    class Pinned(TierController):
        def choose(self) -> Arm:
            return Arm.TIER

    chosen, cheaper, _ = drive(Pinned(), [replace(LOSSY_LOSES, cycles=300)], seed=0)
    assert on_cheaper(chosen, cheaper, 40, 300) == 0.0


def test_it_probes_a_clearly_worse_arm_rarely_and_keeps_probing_it():
    """Where the tier loses by a third, it is tried on a few percent of cycles, never on none."""
    for seed in range(10):
        chosen, _, _ = drive(TierController(relative=RelativePrior(0.45)), [replace(LOSSLESS_LOSES, cycles=600)], seed)
        tail = chosen[100:]
        assert 0 < sum(arm is Arm.TIER for arm in tail) <= 0.08 * len(tail), f"seed {seed}"


# ============================================================================== learning both arms


def test_a_revealed_cycle_says_what_untiered_sd_would_have_committed():
    # greedy: accepted, accepted, rejected -> 2 drafts and q's correction; the tail does not matter
    assert Revealed((1.0, 1.0, 0.0), 5, cost=1.0).expected_tokens(unseen_accept=0.9) == 3.0
    assert Revealed((1.0, 1.0, 0.0), 5, cost=1.0).complete
    # the whole block accepted: 5 drafts and the bonus token (none where the framework has no bonus)
    assert Revealed((1.0,) * 5, 5, cost=1.0).expected_tokens(0.0) == 6.0
    assert Revealed((1.0,) * 5, 5, cost=1.0, bonus=False).expected_tokens(0.0) == 5.0
    # sampling: the expectation over the acceptance draws, 1 + a0 + a0 a1 (two drafts)
    assert Revealed((0.5, 0.5), 2, cost=1.0).expected_tokens(0.0) == pytest.approx(1 + 0.5 + 0.25)
    # drafts the full pass did not see are accepted at the rate the revealed cycles show
    partial = Revealed((1.0, 1.0), 4, cost=1.0)
    assert not partial.complete
    assert partial.expected_tokens(0.5) == pytest.approx(2 + 0.5 + 0.25 + (1 - 0.25) + 0.25)
    with pytest.raises(ValueError, match="probabilities"):
        Revealed((1.2,), 2, cost=1.0)
    with pytest.raises(ValueError, match="at least one"):
        Revealed((), 0, cost=1.0)


def test_a_reveal_selected_by_escalation_tells_the_untiered_level_but_not_the_difference():
    """A lossy cycle reveals untiered SD only when it escalated, its dearest cycles: such a reveal
    (``paired=False``) updates the untiered arm's level but leaves the tier's learnt difference
    alone. The control: the same cycles as fair samples (``paired=True``) move the tier's estimate
    by the difference they show."""
    def after(paired: bool) -> dict:
        controller = TierController()
        for _ in range(6):  # untiered cycles on easy text: 4 tokens each
            controller.observe(Arm.PLAIN, 1.0, 4)
        for _ in range(6):  # each tier cycle costs 2.0 for 2 tokens; untiered would have cost 1.0 for 3
            controller.observe(Arm.TIER, 2.0, 2, Revealed((1.0, 1.0, 0.0), 4, cost=1.0, paired=paired))
        return controller.estimates()

    selected, fair = after(paired=False), after(paired=True)
    assert selected[Arm.TIER] == pytest.approx(1.0)  # the tier's own cycles: 2.0 for 2 tokens
    assert fair[Arm.TIER] < 0.95  # control: the paired difference (1.0 more for 1 token fewer) moves it
    assert selected[Arm.PLAIN] == pytest.approx(fair[Arm.PLAIN])  # the level is learnt either way
    assert 1.0 / 4.0 < selected[Arm.PLAIN] < 1.0 / 3.0


def test_tier_cycles_that_reveal_untiered_sd_switch_the_tier_off_quickly():
    """The tier runs, then starts losing: the untiered cycles its full passes reveal show it, and
    half the sequences have switched it off within 15 cycles (all within 30). The control: the
    same tier cycles revealing nothing leave the untiered arm's stale estimate, and the tier
    stays on more than twice as long."""
    regimes = [replace(LOSSLESS_PAYS, cycles=60), replace(LOSSLESS_LOSES, cycles=60)]
    blind = [replace(regime, reveal=0.0) for regime in regimes]

    def off_after(worlds):  # cycles after the change until the untiered arm runs 5 cycles in a row
        runs = [drive(TierController(relative=RelativePrior(-0.2, 1.0)), worlds, seed)[0] for seed in SEEDS]
        return sorted(next((t - 60 for t in range(60, 116) if all(a is Arm.PLAIN for a in ch[t:t + 5])), 60)
                      for ch in runs)

    seen, unseen = off_after(regimes), off_after(blind)
    assert seen[len(seen) // 2] <= AFTER_CHANGE and max(seen) <= 30, seen
    assert unseen[len(unseen) // 2] > 2 * AFTER_CHANGE, unseen


def test_a_prior_starts_the_controller_and_the_sequence_overrules_it_within_a_few_cycles():
    """A calibration point sets where the controller starts: the tier from the second cycle when it
    states the tier cheaper per cycle. It is worth 2 cycles (engine.priors.PRIOR_WEIGHT) and fades,
    so where it is wrong the tier is off within a few cycles."""
    says_pays = RelativePrior(extra_cost=-0.15, extra_tokens=1.0, weight=2.0)
    chosen, _, _ = drive(TierController(relative=says_pays), [replace(LOSSY_PAYS, cycles=10)], seed=0)
    assert chosen[:3] == [Arm.PLAIN, Arm.TIER, Arm.TIER]
    off_by = []
    for seed in SEEDS:
        chosen, _, _ = drive(TierController(relative=says_pays), [replace(LOSSLESS_LOSES, cycles=40)], seed)
        off_by.append(next(t for t in range(2, 40) if chosen[t] is Arm.PLAIN))
    assert max(off_by) <= 8, off_by
    # with nothing known, the untiered arm measures first and the tier is tried early
    chosen, _, _ = drive(TierController(), [replace(LOSSY_LOSES, cycles=4)], seed=0)
    assert chosen[:3] == [Arm.PLAIN, Arm.PLAIN, Arm.TIER]


def test_the_calibration_picks_the_first_cycle_arm_and_nothing_after():
    """A short answer has a handful of cycles; an untiered first cycle where the calibration found
    the tier cheaper is a tenth of them spent on the wrong arm. The measured points' untiered level
    (``reference``) decides the first cycle only: from the second on, the arms are the sequence's.
    Control: the same difference without a reference starts untiered, and a reference where the
    tier costs more per token starts untiered too."""
    pays = RelativePrior(extra_cost=0.12, extra_tokens=0.86, weight=2.0, reference=(1.6, 2.6))
    assert pays.favours_tier()
    chosen, _, _ = drive(TierController(relative=pays), [replace(LOSSY_PAYS, cycles=10)], seed=0)
    assert chosen[0] is Arm.TIER
    assert TierController(relative=replace(pays, reference=None)).choose() is Arm.PLAIN  # control
    loses = replace(pays, extra_cost=0.9)  # (1.6 + 0.9) / 3.46 > 1.6 / 2.6
    assert not loses.favours_tier() and TierController(relative=loses).choose() is Arm.PLAIN
    # the reference is not an estimate of the untiered arm: where the tier loses, the tier is off
    # within a few cycles and stays off but for probes
    for seed in SEEDS:
        chosen, _, _ = drive(TierController(relative=pays), [replace(LOSSLESS_LOSES, cycles=40)], seed)
        assert next(t for t in range(1, 40) if chosen[t] is Arm.PLAIN) <= 8, seed
        assert chosen[15:].count(Arm.TIER) <= 0.2 * len(chosen[15:]), seed
    with pytest.raises(ConfigError, match="reference"):
        RelativePrior(extra_cost=0.1, reference=(0.0, 2.0))


# ============================================================================== decisions from the past only


def test_each_decision_depends_only_on_the_cycles_before_it():
    """Non-anticipating: changing what cycle t commits never changes the arms of cycles 0..t."""
    import random

    rng = random.Random(0)
    stream = [((1.4, rng.randint(1, 6)), (1.1, rng.randint(1, 3))) for _ in range(80)]

    def decisions(outcomes):
        deciding, arms = TierController(relative=RelativePrior(0.3)), []
        for tier_cycle, plain_cycle in outcomes:
            arm = deciding.choose()
            arms.append(arm)
            deciding.observe(arm, *(tier_cycle if arm is Arm.TIER else plain_cycle))
        return arms

    base = decisions(stream)
    assert Arm.TIER in base and Arm.PLAIN in base
    for t in (0, 5, 17, 40):
        changed = list(stream)
        changed[t] = ((99.0, 1), (99.0, 1))  # an absurd cycle t
        assert decisions(changed)[: t + 1] == base[: t + 1]


def test_choose_reads_nothing_of_the_cycle_it_decides():
    deciding = TierController(relative=RelativePrior(0.3))
    drive(deciding, [replace(LOSSY_PAYS, cycles=30)], seed=3)
    before = deciding.choose()
    assert deciding.choose() is before  # asking again changes nothing
    frozen = copy.deepcopy(deciding)
    deciding.observe(before, 50.0, 1)  # the cycle it decided, however it turns out...
    assert frozen.choose() is before  # ...was decided before it happened


# ============================================================================== values


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
    (dict(discount=0.0), "discount"), (dict(discount=1.5), "discount"), (dict(first_probe=0), "first_probe"),
    (dict(probe_budget=0.0), "probe_budget"), (dict(min_interval=0), "min_interval"),
    (dict(min_interval=10, max_interval=5), "max_interval"),
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
    with pytest.raises(ConfigError, match="extra_tokens"):
        RelativePrior(extra_cost=0.5, extra_tokens=2.0)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="extra_cost"):
            RelativePrior(extra_cost=bad)
