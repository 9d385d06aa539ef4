"""The adaptive tier inside the verify step (viasd_adapt.core.verify_step), the runners it leaves
behind on untiered cycles (viasd_adapt.routing.shared), and where its prices and priors come from
(viasd_adapt.engine.priors).

On synthetic verifiers: each arm decides with its own policy (the untiered arm never calls the
slim verifier), the arm of a cycle is chosen before the cycle and never from it, the controller is
shown the cycle's priced passes and committed tokens, and a step that does not adapt has no
controller at all: the tier pinned on every cycle gives the very tokens and metrics of
``adaptive=False``.
"""

from __future__ import annotations

import pytest
import torch

from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.config.tuned import TunedSettings
from viasd_adapt.core.adaptive import AdaptivePlan, Arm, ArmPrior, PassPrices, RelativePrior, TierController
from viasd_adapt.core.cycle import StopRule, Verifiers
from viasd_adapt.core.settings import ADAPTIVE_SUFFIX, FIXED_SUFFIX, Mode, TierSettings, label_settings, mode_label, renamed_row
from viasd_adapt.core.verify_step import VerifyStep
from viasd_adapt.errors import ConfigError


G, V = 3, 6
LOSSLESS = TierSettings(mode="lossless", gamma=G)


class Calls:
    """Synthetic verifiers that count their calls: u agrees with the first ``u_agrees`` drafts, q with
    the first ``q_agrees`` (greedy, so each cycle's outcome is fixed by them)."""

    def __init__(self, q_agrees: int = 1, u_agrees: int = 3):
        self.q_agrees, self.u_agrees = q_agrees, u_agrees
        self.slim = self.full = 0

    def block(self):
        drafts = torch.tensor([1, 2, 3])
        p = torch.full((G, V), 0.01)
        p[torch.arange(G), drafts] = 0.95

        def rows(tokens, agrees):
            out = torch.full((tokens.shape[0] + 1, V), 0.02)
            for i in range(tokens.shape[0] + 1):
                out[i, int(tokens[i]) if i < min(agrees, tokens.shape[0]) else 5] = 0.9
            return out / out.sum(-1, keepdim=True)

        def slim(tokens):
            self.slim += 1
            return rows(tokens, self.u_agrees)

        def full(tokens):
            self.full += 1
            return rows(tokens, self.q_agrees)

        return drafts, p, Verifiers(full=full, slim=slim)


class Scripted(TierController):
    """Chooses the arms it is given, in order (a past-only rule: it reads how many cycles it saw)."""

    script: tuple = ()

    def choose(self) -> Arm:
        return self.script[len(self.history) % len(self.script)]


def _plan(script=(Arm.TIER,), **changes) -> AdaptivePlan:
    class Plan(AdaptivePlan):
        def controller(self):
            controller = Scripted(self.settings, dict(self.priors), self.most_tokens, self.relative)
            controller.script = script
            return controller

    return Plan(**changes)


def test_each_arm_decides_with_its_own_policy_and_the_untiered_arm_never_calls_u():
    calls = Calls()
    step = VerifyStep(LOSSLESS, "test", adaptive=_plan((Arm.TIER, Arm.PLAIN)))
    for expected in (Arm.TIER, Arm.PLAIN, Arm.TIER):
        drafts, p, verifiers = calls.block()
        before = calls.slim
        assert step.next_arm() is expected and step.next_arm() is expected  # fixed until recorded
        assert step.policy_for(expected).settings.mode is (Mode.LOSSLESS if expected is Arm.TIER else Mode.NONE)
        outcome = step.decide(drafts, p, verifiers)
        step.record(outcome, drafted=G)
        assert calls.slim - before == (1 if expected is Arm.TIER else 0)
    m = step.metrics
    assert (m.cycles, m.tier_cycles, m.slim_passes, m.full_passes) == (3, 2, 2, 3)
    assert step.controller.history == [Arm.TIER, Arm.PLAIN, Arm.TIER]
    # the settings of either arm are the run's, but for the mode
    assert step.settings_for(Arm.PLAIN) == LOSSLESS.with_(mode="none") and step.settings_for(Arm.TIER) is LOSSLESS


def test_the_controller_sees_the_priced_passes_and_the_tokens_after_the_stop_cut():
    prices = PassPrices(draft=0.1, slim=0.5, resumed=0.6)
    seen = []

    class Watching(TierController):
        def observe(self, arm, cost, tokens, revealed=None):
            seen.append((arm, cost, tokens))
            super().observe(arm, cost, tokens, revealed)

    class Plan(AdaptivePlan):
        def controller(self):
            return Watching(self.settings, dict(self.priors), self.most_tokens, self.relative)

    calls = Calls(q_agrees=3)
    step = VerifyStep(LOSSLESS, "test", adaptive=Plan(prices, relative=RelativePrior(0.5)))
    drafts, p, verifiers = calls.block()
    arm = step.next_arm()
    assert arm is Arm.PLAIN  # nothing measured: the untiered arm measures first
    outcome = step.decide(drafts, p, verifiers, stop=StopRule.of(budget=2))
    step.record(outcome, drafted=G, resumed_full_passes=1)
    # the drafter counts its passes at the end: the cycle's 3 drafts are priced; a resumed q pass
    assert seen == [(Arm.PLAIN, pytest.approx(0.1 * 3 + 0.6), 2)]
    step.record(step.decide(drafts, p, verifiers), drafted=G, draft_passes=1)  # counted per cycle (EAGLE's head)
    assert seen[-1][1] == pytest.approx(0.1 * 1 + 1.0)


@pytest.mark.parametrize("seed", range(3))
def test_each_arm_is_chosen_from_the_cycles_before_it(seed):
    """Non-anticipating at the step: changing how cycle t turns out (q agreeing with more or fewer
    drafts) never changes the arms of cycles 0..t, only of later ones."""
    rng = torch.Generator().manual_seed(seed)
    outcomes = torch.randint(0, 4, (30,), generator=rng).tolist()  # drafts q agrees with, per cycle

    def arms(agreeing):
        step = VerifyStep(LOSSLESS, "test", adaptive=AdaptivePlan(PassPrices(slim=0.3), most_tokens=G + 1))
        chosen = []
        for q_agrees in agreeing:
            calls = Calls(q_agrees=q_agrees, u_agrees=q_agrees)
            drafts, p, verifiers = calls.block()
            chosen.append(step.next_arm())
            step.record(step.decide(drafts, p, verifiers), drafted=G)
        return chosen

    base = arms(outcomes)
    assert set(base) == {Arm.TIER, Arm.PLAIN}  # the real controller switched on this stream
    for t in (0, 4, 13, 29):
        changed = list(outcomes)
        changed[t] = 3 - changed[t]
        assert arms(changed)[: t + 1] == base[: t + 1]
    # ...and it does read the past: changing every cycle changes some later arm
    assert any(arms(stream) != base for stream in ([3 - o for o in outcomes], [0] * 30, [3] * 30))


def test_the_tier_pinned_on_every_cycle_is_exactly_adaptive_false():
    """The adaptive machinery is inert on the tier's arm: the same tokens, tiers and metrics."""
    from tests.support.pairs import noisy_pair
    from viasd_adapt.engine.drafters import ModelDrafter
    from viasd_adapt.engine.loop import speculative_generate
    from tests.support.verifiers import tiered_verifier
    from viasd_adapt.routing.slim import SlimVerifier

    pair = noisy_pair("llama")
    for mode in ("lossless", "lossy"):
        runs = []
        for settings, plan in ((TierSettings(mode=mode, gamma=4, adaptive=False), None), (TierSettings(mode=mode, gamma=4), _plan())):
            verifier = tiered_verifier(pair.target, settings, pair_sampling(), slim=SlimVerifier(pair.target, pair.mask),
                                       adaptive=plan)
            out = speculative_generate(ModelDrafter(pair.drafter, pair_sampling()), verifier, [1, 2, 3, 4, 5], 20,
                                       generator=torch.Generator().manual_seed(0))
            runs.append((out.tokens, out.metrics.to_dict(), verifier.step.controller))
        (fixed, fixed_metrics, none), (pinned, pinned_metrics, controller) = runs
        assert none is None and controller is not None and controller.history  # no controller without adapting
        assert pinned == fixed and pinned_metrics == fixed_metrics, mode
        assert fixed_metrics["tier_cycles"] == fixed_metrics["cycles"] - 1  # all but the prefill


def pair_sampling():
    from viasd_adapt.core.sampling import SamplingConfig

    return SamplingConfig(do_sample=True, temperature=0.8)


def test_which_settings_adapt_and_how_rows_are_named():
    for mode in ("none", "lenient", "audit"):
        step = VerifyStep(TierSettings(mode=mode), "test")
        assert step.adaptive is None and step.controller is None
        assert step.next_arm() is (Arm.TIER if mode == "audit" else Arm.PLAIN)
    for mode in ("lossless", "lossy"):
        assert VerifyStep(TierSettings(mode=mode), "test").controller is not None
        assert VerifyStep(TierSettings(mode=mode, adaptive=False), "test").controller is None
        # the bare mode names what a default run does (adaptive); -fixed the tier on every cycle
        assert mode_label(TierSettings(mode=mode)) == mode
        assert mode_label(TierSettings(mode=mode, adaptive=False)) == mode + FIXED_SUFFIX
        assert label_settings(mode) == {"mode": Mode(mode), "adaptive": True}
        assert label_settings(mode + FIXED_SUFFIX) == {"mode": Mode(mode), "adaptive": False}
        # the older names still read: -adaptive was the default, the bare name the fixed tier
        assert label_settings(mode + ADAPTIVE_SUFFIX) == {"mode": Mode(mode), "adaptive": True}
        assert renamed_row(mode + ADAPTIVE_SUFFIX) == mode and renamed_row(mode) == mode + FIXED_SUFFIX
    assert label_settings("audit") == {"mode": Mode.AUDIT, "adaptive": False} and renamed_row("audit") == "audit"
    for wrong in ("audit-adaptive", "audit-fixed", "none-fixed"):
        with pytest.raises(ConfigError, match="audit keeps the tier"):
            label_settings(wrong)
    with pytest.raises(ConfigError, match="adaptive .* must be True or False"):
        TierSettings(adaptive="yes")
    # the fallback plan: the slim pass by the skip ratio, lossless stated against the untiered arm
    plan = AdaptivePlan.fallback(TierSettings(mode="lossless", ratio=0.4, gamma=4))
    assert plan.prices.slim == pytest.approx(0.6) and plan.relative.extra_cost == pytest.approx(0.6) and plan.most_tokens == 5
    # lossy too: with nothing measured the tier must show that it buys its slim pass
    assert AdaptivePlan.fallback(TierSettings(mode="lossy", ratio=0.4)).relative.extra_cost == pytest.approx(0.6)


def test_each_generation_gets_a_fresh_controller_and_eagle_may_say_its_cycle_size():
    step = VerifyStep(LOSSLESS, "test")
    first = step.controller
    calls = Calls()
    drafts, p, verifiers = calls.block()
    step.record(step.decide(drafts, p, verifiers), drafted=G)
    assert first.cycles == 1
    step.new_generation(most_tokens=8)
    assert step.controller is not first and step.controller.cycles == 0 and step.controller.most_tokens == 8


# ============================================================================== runners that skip u


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_shared_prefix_runners_catch_up_after_cycles_that_skip_a_verifier(family):
    """Untiered cycles run q alone (u lags); lossy tier cycles may run u alone (q lags). Whatever the
    order, each verifier's logits are those of a fresh forward over the sequence it is asked about,
    also past Gemma2's 16-token sliding window (the catch-up crops the shared prefix)."""
    from viasd_adapt.models.tiny import tiny_model
    from viasd_adapt.routing.shared import SharedPrefixRunners
    from viasd_adapt.routing.slim import SlimVerifier

    model = tiny_model(family, seed=3, num_layers=6)
    slim = SlimVerifier(model, RoutingMask.from_skipped(6, [2, 4]))
    runners = SharedPrefixRunners(model, slim)
    gen = torch.Generator().manual_seed(1)
    sequence = torch.randint(0, 96, (4,), generator=gen).tolist()
    pattern = ["q", "q", "q", "uq", "u", "u", "q", "uq", "q", "q", "q", "q", "u", "uq", "q", "u"] * 2
    asked = {"u": 0, "q": 0}
    for step, who in enumerate(pattern):
        block = torch.randint(0, 96, (3,), generator=gen).tolist()
        sequence = sequence + block
        for role in who:
            with torch.no_grad():
                fresh = (slim.model if role == "u" else model)(torch.tensor([sequence])).logits[0, -3:]
            got = (runners.slim_logits if role == "u" else runners.full_logits)(sequence, 3)
            torch.testing.assert_close(got, fresh, rtol=0, atol=1e-4, msg=f"{role} at step {step}")
            asked[role] += 1
        sequence = sequence[: len(sequence) - step % 3]  # rejected drafts are dropped
    assert len(sequence) > 40 and min(asked.values()) > 10
    assert runners.resumed_full_passes > 0  # q still resumed from u's hidden states where u had seen the tokens


# ============================================================================== prices and priors


def _tuned(target, mask: RoutingMask, *, c_draft=0.001, lossless_ok=True, viasd_alpha=0.5) -> TunedSettings:
    from viasd_adapt.routing.mask import model_fingerprint

    sd = {"family": "none", "settings": TierSettings(mode="none", gamma=5).to_dict(), "full_equivalent": 0.6,
          "metrics": {"mean_accepted_length": 2.5, "cycles": 300}}
    lossless = {"family": "lossless-fixed", "settings": TierSettings(mode="lossless", gamma=5, adaptive=False).to_dict(),
                "mask": "mask.json", "full_equivalent": 0.7 if lossless_ok else None,
                "metrics": {"mean_accepted_length": 2.9, "cycles": 40}}
    viasd = {"family": "lossy-fixed", "settings": TierSettings(mode="lossy", gamma=5, alpha1=viasd_alpha, adaptive=False).to_dict(),
             "mask": "mask.json", "full_equivalent": 0.5, "metrics": {"mean_accepted_length": 4.2}}
    costs = {"c_draft": c_draft, "c_slim": 0.006, "c_resume": 0.009, "c_full_block": 0.01, "c_full": 0.008}
    return TunedSettings(TierSettings(mode="lenient"), "lenient", None, model_fingerprint(target),
                         report={"best_within_budget": {"none": sd, "lossless-fixed": lossless, "lossy-fixed": viasd, "lenient": None},
                                 "costs": {"None": costs, "mask.json": costs}, "masks": {"mask.json": {"bits": mask.bits()}}})


def test_prices_and_priors_come_from_the_tuned_files_measurements_for_this_mask():
    from viasd_adapt.engine.priors import PRIOR_WEIGHT, adaptive_plan
    from viasd_adapt.models.tiny import tiny_model

    target, drafter = tiny_model("llama", 0, num_layers=4), tiny_model("llama", 1, num_layers=1)
    mask = RoutingMask.from_skipped(4, [2, 3])
    tuned = _tuned(target, mask)
    plan = adaptive_plan(TierSettings(mode="lossless", gamma=5), target, mask, tuned, drafter)
    assert (plan.prices.draft, plan.prices.slim, plan.prices.resumed) == pytest.approx((0.1, 0.6, 0.9))
    # no absolute prior: the untiered arm is what the sequence measures...
    assert plan.priors == {} and plan.most_tokens == 6
    # ...and the tier stated against it: 0.7 * 2.9 - 0.6 * 2.5 more per cycle, for 0.4 more tokens,
    # worth a few cycles (PRIOR_WEIGHT), however many the calibration ran
    relative = plan.relative
    assert (relative.extra_cost, relative.extra_tokens, relative.weight) == (pytest.approx(0.53), pytest.approx(0.4), PRIOR_WEIGHT)
    lossy = adaptive_plan(TierSettings(mode="lossy", gamma=5), target, mask, tuned, drafter)
    # a lossy cycle that skips q may cost less (0.5 * 4.2 - 1.5 < 0.6...); its extra tokens bounded to one
    relative = lossy.relative  # a point stating no cycles is worth the same
    assert (relative.extra_cost, relative.extra_tokens, relative.weight) == (pytest.approx(0.6), 1.0, PRIOR_WEIGHT)
    # another mask, another block length, other tolerances: the points do not describe the run
    other = RoutingMask.from_skipped(4, [1, 3])
    by_layers = adaptive_plan(TierSettings(mode="lossless", gamma=5), target, other, tuned, drafter)
    assert (by_layers.prices.slim, by_layers.prices.resumed) == (0.5, 0.75) and 0 < by_layers.prices.draft < 1
    cautious = RelativePrior(extra_cost=0.5, weight=PRIOR_WEIGHT)
    assert by_layers.priors == {} and by_layers.relative == cautious
    assert adaptive_plan(TierSettings(mode="lossless", gamma=4), target, mask, tuned, drafter).relative.extra_cost == pytest.approx(0.6)
    assert adaptive_plan(TierSettings(mode="lossy", gamma=5, alpha1=0.3), target, mask, tuned, drafter).relative.extra_cost \
        == pytest.approx(0.6)
    assert adaptive_plan(TierSettings(mode="lossy", gamma=5), target, other, tuned, drafter).relative == cautious
    # prompt lookup (no drafter model) against points measured with one: measured slim prices, no priors
    lookup = adaptive_plan(TierSettings(mode="lossless", gamma=5), target, mask, tuned, None)
    assert lookup.prices.draft == 0.0 and lookup.prices.slim == pytest.approx(0.6)
    assert (lookup.relative.extra_cost, lookup.relative.weight) == (pytest.approx(0.6), PRIOR_WEIGHT)  # the cautious prior
    # EAGLE: its tree is not what the points measured (prices by layer counts, the cautious prior)
    eagle = adaptive_plan(TierSettings(mode="lossless", gamma=5), target, mask, tuned, drafter, use_measured=False)
    assert eagle.relative == RelativePrior(extra_cost=0.5, weight=PRIOR_WEIGHT)
    # a tuned file of another model is not evidence; settings that do not adapt need no plan
    foreign = _tuned(tiny_model("llama", 7, num_layers=4, vocab_size=112), mask)
    assert adaptive_plan(TierSettings(mode="lossless", gamma=5), target, mask, foreign, drafter).relative == \
        RelativePrior(extra_cost=0.5, weight=PRIOR_WEIGHT)
    assert adaptive_plan(TierSettings(mode="lossless", adaptive=False), target, mask, tuned, drafter) is None
    assert adaptive_plan(TierSettings(mode="audit"), target, mask, tuned, drafter) is None


def test_an_old_tuned_file_without_the_adaptive_flag_means_the_default(tmp_path):
    import json

    path = tmp_path / "tuned.json"
    TunedSettings(TierSettings(mode="lossy", adaptive=False), "lossy-fixed").save(path)
    data = json.loads(path.read_text())
    assert data["settings"]["adaptive"] is False  # a file written now records the flag of its choice
    assert TunedSettings.load(path).settings.adaptive is False
    del data["settings"]["adaptive"]  # a file written before the flag existed
    path.write_text(json.dumps(data))
    old = TunedSettings.load(path)
    assert old.settings.adaptive is True and "adaptive" not in old.stated_settings  # the default, credited to it


@pytest.mark.parametrize("q_agrees, u_agrees, expected", [
    (1, 3, (1.0, 0.0, 0.0)),        # u kept the block, q saw it and rejects draft 2: untiered SD commits 2 tokens
    (3, 3, (1.0, 1.0, 1.0)),        # q accepts the whole block: untiered SD takes all three and the bonus
    (0, 1, (0.0, 0.0)),             # u kept draft 1 only: q's pass saw drafts 1-2, not draft 3
])
def test_a_tier_cycle_reveals_what_untiered_sd_would_have_committed(q_agrees, u_agrees, expected):
    """The cascade's q pass over the kept drafts says, for each draft it saw, whether untiered SD
    accepts it; the controller is shown that cycle for the untiered arm too (the control: the
    untiered arm's own cycle, which runs no slim pass, reveals nothing of the tier)."""
    calls = Calls(q_agrees=q_agrees, u_agrees=u_agrees)
    step = VerifyStep(LOSSLESS, "test", adaptive=_plan((Arm.TIER, Arm.PLAIN)))
    drafts, p, verifiers = calls.block()
    outcome = step.decide(drafts, p, verifiers)
    assert outcome.untiered_accept == expected
    plain_view = step.controller._arms[Arm.PLAIN].cycles
    step.record(outcome, drafted=G)
    assert step.controller.revealed == [True] and step.controller._arms[Arm.PLAIN].cycles > plain_view
    untiered = step.decide(drafts, p, verifiers)  # the scripted untiered cycle
    assert untiered.untiered_accept is None
    step.record(untiered, drafted=G)
    assert step.controller.revealed == [True, False]
    # fixed-tier runs ask nothing of the kind (no controller, no extra work)
    fixed = VerifyStep(LOSSLESS.with_(adaptive=False), "test")
    assert fixed.decide(*calls.block()).untiered_accept is None
