"""The paired bootstrap over prompts (viasd_adapt.bench.uncertainty): pure, seeded, on synthetic prompts."""

import numpy as np
import pytest

from viasd_adapt.config.budget import TIE_MARGIN, Budget
from viasd_adapt.bench.uncertainty import MIN_PROMPTS, Candidate, PromptSums, bootstrap_verdict, sums_from_json

TOKENS = 32


def _sums(cost_per_token, regret_per_token=None):
    cost = np.asarray(cost_per_token, dtype=float)
    regret = None if regret_per_token is None else list(np.asarray(regret_per_token) * TOKENS)
    return PromptSums(tokens=[TOKENS] * len(cost), cost=list(cost * TOKENS), regret=regret,
                      log_likelihood=[-1.5 * TOKENS] * len(cost))


def _pair(n, gap, spread, seed=0):
    """A simple (lenient) and a tier (lossy) setting on n prompts: the tier is ``gap`` cheaper on
    average; per-prompt costs vary by ``spread``, prompt by prompt (the same prompts for both)."""
    rng = np.random.default_rng(seed)
    base = 1.0 + spread * rng.standard_normal(n)
    tier = base * (1 - gap) + spread * rng.standard_normal(n)
    reference = PromptSums(tokens=[TOKENS] * n, cost=[TOKENS] * n, log_likelihood=[-1.5 * TOKENS] * n)
    return [Candidate("lenient", _sums(base, [0.0] * n), exact=False, simple=True),
            Candidate("lossy", _sums(tier, [0.0] * n), exact=False, simple=False)], reference


def test_a_clearly_separated_tier_win_is_determined():
    candidates, reference = _pair(40, gap=0.30, spread=0.02)
    result = bootstrap_verdict(candidates, Budget(), reference)
    assert result.determined and result.stated == result.recommended == "lossy"
    assert result.holds == 1.0 and result.gain_interval[0] > TIE_MARGIN
    assert "determined at 40 prompts" in result.sentence() and "undetermined" not in result.sentence()


def test_an_overlapping_case_is_undetermined_and_recommends_the_simpler_row():
    candidates, reference = _pair(12, gap=0.04, spread=0.15, seed=3)
    result = bootstrap_verdict(candidates, Budget(), reference)
    lo, hi = result.gain_interval
    assert lo < TIE_MARGIN < hi
    assert not result.determined and result.recommended == "lenient"
    assert result.sentence().startswith("undetermined at 12 prompts")


def test_a_row_whose_budget_status_hangs_on_one_prompt_makes_the_verdict_undetermined():
    """The demo's case: one prompt's regret moves lenient out of the budget."""
    n = 8
    regret = [0.0] * n
    regret[0] = 0.3  # pooled: 0.0375 > 0.02; without prompt 0: 0.0
    reference = PromptSums(tokens=[TOKENS] * n, cost=[TOKENS] * n, log_likelihood=[-1.5 * TOKENS] * n)
    candidates = [Candidate("none", _sums([1.0] * n, None), exact=True, simple=True),
                  Candidate("lenient", _sums([0.6] * n, regret), exact=False, simple=True),
                  Candidate("lossy", _sums([0.8] * n, [0.0] * n), exact=False, simple=False)]
    result = bootstrap_verdict(candidates, Budget(), reference)
    assert result.stated == "lossy" and not result.determined
    assert result.recommended == "none"  # lenient is not reliably within budget; none is exact
    assert 0.05 < result.admitted["lenient"] < 0.95 and "lenient" in result.sentence()


def test_a_fixed_seed_gives_identical_output_and_another_seed_may_not():
    candidates, reference = _pair(20, gap=0.05, spread=0.1)
    first = bootstrap_verdict(candidates, Budget(), reference, seed=7)
    assert bootstrap_verdict(candidates, Budget(), reference, seed=7) == first
    assert bootstrap_verdict(candidates, Budget(), reference, seed=8).gain_interval != first.gain_interval


def test_the_interval_shrinks_with_more_prompts():
    widths = []
    for n in (10, 40, 160):
        candidates, reference = _pair(n, gap=0.1, spread=0.1, seed=1)
        lo, hi = bootstrap_verdict(candidates, Budget(), reference).gain_interval
        widths.append(hi - lo)
    assert widths[0] > widths[1] > widths[2]
    assert widths[2] < widths[0] / 1.5  # about 1 / sqrt(n): a factor of 4 over 16x the prompts, less sampling luck


def test_too_few_prompts_are_undetermined_however_clear_they_look():
    candidates, reference = _pair(MIN_PROMPTS - 1, gap=0.5, spread=0.0)
    result = bootstrap_verdict(candidates, Budget(), reference)
    assert not result.determined and result.recommended == "lenient"
    assert f"undetermined at {MIN_PROMPTS - 1} prompts" in result.sentence()


def test_the_cost_is_a_ratio_of_sums_not_a_mean_of_ratios():
    # prompt 0: 10 tokens at cost 10 (1.0/token); prompt 1: 90 tokens at cost 45 (0.5/token)
    # pooled: 55 / 100 = 0.55 per token (a mean of the two ratios would say 0.75)
    sums = PromptSums(tokens=[10, 90], cost=[10, 45])
    tier = PromptSums(tokens=[10, 90], cost=[7.0, 63.0])  # 0.70 per token on both prompts
    result = bootstrap_verdict([Candidate("none", sums, True, True), Candidate("lossless", tier, True, False)], Budget(),
                               replicates=50)
    assert result.stated == "none"  # 0.55 < 0.70; by a mean of ratios lossless (0.70 < 0.75) would win
    lo, hi = result.gain_interval
    assert lo <= 1 - 0.70 / 0.55 <= hi


def test_mismatched_prompts_are_refused_and_old_json_gives_no_sums():
    with pytest.raises(ValueError, match="same"):
        bootstrap_verdict([Candidate("a", PromptSums([1, 2], [1, 2]), True, True),
                           Candidate("b", PromptSums([1], [1]), True, False)], Budget())
    assert sums_from_json(None) is None and sums_from_json({"tokens": []}) is None
    assert sums_from_json({"tokens": [3], "cost": [2.0]}).cost == [2.0]


def test_the_array_forms_of_the_budget_and_recommendation_rules_agree_with_the_rules():
    """The bootstrap applies Budget.admits_values and recommend() over (replicates, settings) arrays,
    for speed (300 tune points x 1000 replicates: 0.14 s, against 2.4 s calling the rules one by
    one); on random inputs with unmeasured values and ties they must decide exactly as the rules."""
    from viasd_adapt.config.budget import recommend
    from viasd_adapt.bench.uncertainty import _recommend, _within

    rng = np.random.default_rng(3)
    replicates, settings = 400, 7
    budget = Budget(max_ll_drop=0.02, max_overrule=0.1, max_regret=0.02)
    ll_drop, regret, overrule = (rng.uniform(-0.01, 0.04, (replicates, settings)) for _ in range(3))
    for values in (ll_drop, regret, overrule):
        values[rng.random(values.shape) < 0.15] = np.nan  # not measured
    exact = rng.random(settings) < 0.3
    simple = rng.random(settings) < 0.5
    cost = np.round(rng.uniform(0.4, 1.0, (replicates, settings)), 2)  # rounded: ties occur
    for unmeasured_ok in ((), ("regret",)):
        within = _within(budget, np.broadcast_to(exact, cost.shape), ll_drop, regret, overrule, unmeasured_ok)
        picks = _recommend(cost, within, simple, TIE_MARGIN)

        def measured(value):
            return None if np.isnan(value) else float(value)

        for r in range(replicates):
            for k in range(settings):
                assert within[r, k] == budget.admits_values(
                    exact=bool(exact[k]), ll_drop=measured(ll_drop[r, k]), overrule=measured(overrule[r, k]),
                    regret=measured(regret[r, k]), unmeasured_ok=unmeasured_ok)
            qualifying = [k for k in range(settings) if within[r, k]]
            expected = recommend(qualifying, cost=lambda k: cost[r, k], is_simple=lambda k: bool(simple[k]))[1] if qualifying else -1
            assert picks[r] == expected
        assert (picks == -1).any() and len(set(picks.tolist())) > 2  # the cases are varied


# ------------------------------------------------------------------------- copies are not evidence


def _copies(candidates, reference, copies, keys=True):
    """Every prompt of ``candidates`` repeated ``copies`` times (with their keys, or without)."""
    def repeat(sums):
        fields = {name: None if getattr(sums, name) is None else list(getattr(sums, name)) * copies
                  for name in ("tokens", "cost", "log_likelihood", "regret", "overruled", "audited")}
        fields["keys"] = [f"prompt-{i}" for i in range(len(sums))] * copies if keys else None
        return PromptSums(**fields)

    return [Candidate(c.name, repeat(c.sums), c.exact, c.simple) for c in candidates], repeat(reference)


def test_six_copies_of_one_prompt_are_one_prompt_of_evidence():
    candidates, reference = _pair(1, gap=0.30, spread=0.0)
    alone = bootstrap_verdict(candidates, Budget(), reference)
    copied, copied_reference = _copies(candidates, reference, 6)
    result = bootstrap_verdict(copied, Budget(), copied_reference)
    assert not alone.determined and not result.determined  # 1 distinct prompt: below the minimum
    assert result.prompts == 1 and result.copies == 5
    assert "undetermined at 1 prompt (distinct)" in result.sentence() and "5 copies" in result.sentence()
    # the control: the same sums without keys count as six prompts, and the copies decide the verdict
    unkeyed, unkeyed_reference = _copies(candidates, reference, 6, keys=False)
    control = bootstrap_verdict(unkeyed, Budget(), unkeyed_reference)
    assert control.prompts == 6 and control.copies == 0 and control.determined


def test_copies_do_not_change_the_pooled_estimate_or_widen_the_evidence():
    candidates, reference = _pair(6, gap=0.30, spread=0.02)
    once = bootstrap_verdict(candidates, Budget(), reference)
    twice, twice_reference = _copies(candidates, reference, 2)
    result = bootstrap_verdict(twice, Budget(), twice_reference)
    assert result.prompts == 6 and result.copies == 6
    assert result.stated == once.stated and result.determined == once.determined
    assert result.gain_interval == pytest.approx(once.gain_interval)


def test_settings_measured_on_different_prompts_are_refused():
    candidates, reference = _pair(3, gap=0.30, spread=0.0)
    a = Candidate("lenient", PromptSums(**{**candidates[0].sums.__dict__, "keys": ["a", "b", "c"]}), False, True)
    b = Candidate("lossy", PromptSums(**{**candidates[1].sums.__dict__, "keys": ["a", "b", "d"]}), False, False)
    with pytest.raises(ValueError, match="different prompts"):
        bootstrap_verdict([a, b], Budget(), reference)


def test_prompt_keys_tell_copies_apart_from_different_prompts():
    from viasd_adapt.bench.uncertainty import distinct_units, prompt_key

    assert prompt_key([1, 2, 3]) == prompt_key([1, 2, 3]) != prompt_key([1, 2, 4]) != prompt_key([12, 3])
    assert distinct_units([prompt_key([1]), prompt_key([2]), prompt_key([1])], 3).tolist() == [0, 1, 0]
    assert distinct_units(None, 3).tolist() == [0, 1, 2]
