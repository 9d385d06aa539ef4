"""``viasd tune``'s choice with its uncertainty over calibration prompts (synthetic points, no model)."""

from __future__ import annotations

import numpy as np

from viasd_adapt.config.budget import Budget
from viasd_adapt.bench.costs import ForwardCosts
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.tuning.tune import Point, choice_uncertainty, describe, judged

TOKENS = 20


def _point(family, mode, costs, regrets, **settings):
    n = len(costs)
    per_prompt = {"tokens": [TOKENS] * n, "cost": [c * TOKENS for c in costs],
                  "passes": {"draft": [0.0] * n, "slim": [0.0] * n, "full": [c * TOKENS for c in costs], "resumed": [0.0] * n},
                  "log_likelihood": [-TOKENS] * n, "regret": [r * TOKENS for r in regrets],
                  "overruled": [0.0] * n, "audited": [TOKENS] * n,
                  "reference_ll": [-TOKENS] * n, "reference_tokens": [TOKENS] * n}
    return Point(family, TierSettings(mode=mode, **settings), "mask.json" if family == "lossy-fixed" else None,
                 float(np.mean(costs)), 0.0, 0.0, n * TOKENS, regret=float(np.mean(regrets)),
                 passes={"draft": 0.0, "slim": 0.0, "full": float(np.mean(costs)), "resumed": 0.0}, per_prompt=per_prompt)


def _result(points, budget=Budget()):
    return judged(points, budget, {}, {}, 1.0)


def test_a_clear_win_over_many_prompts_is_determined():
    rng = np.random.default_rng(0)
    n = 30
    base = 1.0 + 0.02 * rng.standard_normal(n)
    points = [_point("none", "none", base, [0.0] * n), _point("lossy-fixed", "lossy", 0.7 * base, [0.0] * n, alpha1=0.3)]
    result = _result(points)
    assert result.chosen.family == "lossy-fixed"
    assert result.pooled is None and result.chosen is result.point_estimate  # written as it is
    assert result.drafting.determined
    lines = describe(result)
    assert any(line.startswith("UNCERTAINTY: the choice is determined at 30 prompts") for line in lines)
    verdict_line = next(line for line in lines if line.startswith("VERDICT"))
    assert verdict_line.startswith("VERDICT: the slim tier pays")
    assert "30.0% less, more than the 3% margin, in 100% of 1000 resamples" in verdict_line


def _three_conditions(n=8, lossy_costs=None, lossy_regret=0.0):
    """sd (exact) and lenient (lossy), 20% cheaper on every prompt unless told otherwise."""
    return [_point("none", "none", [1.0] * n, [0.0] * n),
            _point("lenient", "lenient", lossy_costs or [0.8] * n, [lossy_regret] * n, lenience=0.4)]


def test_a_lossy_setting_is_written_over_the_exact_one_only_when_all_three_conditions_hold():
    """The exact-first rule: each of the three conditions failing alone keeps the exact setting,
    and the VERDICT line says which one, with the figures of that comparison. Control: all three
    holding write the lossy setting."""
    n = 8
    written = _result(_three_conditions(n))
    assert written.chosen.family == "lenient"  # the control: saves 20%, in every resample, within budget
    # 1. the saving is not more than the margin (2%, on every prompt)
    margin = _result(_three_conditions(n, [0.98] * n))
    assert margin.chosen.family == "none" and margin.pooled.family == "lenient"
    line = next(line for line in describe(margin) if line.startswith("VERDICT"))
    assert "not more than the 3% margin" in line and "so none (exact, simpler) is written" in line
    assert "the cheapest setting is lenient" not in line  # the words name what is written
    # 2. the saving is more than the margin pooled, but rests on two prompts: it does not hold in 95%
    noise = _result(_three_conditions(n, [0.3, 0.3] + [1.02] * (n - 2)))
    assert noise.pooled.family == "lenient" and 1 - noise.pooled.full_equivalent > 0.03
    assert noise.chosen.family == "none"
    line = next(line for line in describe(noise) if line.startswith("VERDICT"))
    assert "but it holds in only" in line and "within noise" in line and "100%" not in line
    # 3. the saving holds, but the setting is outside the fidelity budget
    budget = _result(_three_conditions(n, lossy_regret=0.05))
    assert budget.chosen.family == "none" and budget.pooled is None  # out of budget: never the cheapest within it


def test_the_target_alone_against_untiered_sd_follows_the_same_rule():
    """ar (the simplest exact setting) stays unless drafting saves more than the margin in 95% of
    resamples: untiered SD 2% under ar keeps ar; 20% under it writes sd."""
    from viasd_adapt.tuning.choose import target_alone_cheapest

    n = 8
    points = [_point("none", "none", [0.98] * n, [0.0] * n)]
    costs = {"None": {"c_full": 1.0, "c_full_block": 1.0, "c_slim": None, "c_resume": None, "c_draft": 0.0}}
    close = judged(points, Budget(), costs, {}, 1.0)
    assert target_alone_cheapest(close)
    note = next(line for line in describe(close) if line.startswith("NOTE"))
    assert "none costs 0.980 against ar's 1.000 (2.0% less), not more than the 3% margin" in note
    points = [_point("none", "none", [0.8] * n, [0.0] * n)]
    assert not target_alone_cheapest(judged(points, Budget(), costs, {}, 1.0))


def test_the_note_on_a_kept_target_alone_quotes_the_step_that_kept_it():
    """ar stays because untiered SD's saving over it is within noise; a lossy setting that is a
    little cheaper still was refused against SD, not against ar. The NOTE quotes SD against ar (the
    comparison that kept ar); control: the lossy step is there, and the NOTE does not quote it."""
    n = 8
    costs = {"None": {"c_full": 1.0, "c_full_block": 1.0, "c_slim": None, "c_resume": None, "c_draft": 0.0}}
    points = [_point("none", "none", [0.2, 0.2] + [1.02] * (n - 2), [0.0] * n),
              _point("lossy-fixed", "lossy", [0.05, 0.05] + [1.05] * (n - 2), [0.0] * n, alpha1=0.3)]
    result = judged(points, Budget(), costs, {}, 1.0)
    decision = result.decision
    assert decision.chosen == "ar"
    lossy_step = next(s for s in decision.steps if s.candidate.startswith("lossy-fixed"))
    assert not lossy_step.taken and lossy_step.against.startswith("none") and lossy_step.candidate_cost < 0.815
    note = next(line for line in describe(result) if line.startswith("NOTE"))
    assert "none costs 0.815 against ar's 1.000 (18.5% less), more than the 3% margin, but it holds in only" in note
    head, _, cheapest = note.partition("; the cheapest lossy setting, ")
    assert "lossy-fixed: lossy" not in head and "1.8% less" not in head
    assert cheapest.startswith("lossy-fixed: lossy")  # named after the deciding comparison, as the cheapest refused


def test_the_verdict_names_the_cheapest_lossy_setting_refused_beside_the_step_that_kept_the_exact_one():
    """sd stays because the exact tier saves only 2% over it; lenient saves 40% but its regret sits on
    the budget's edge (half the prompts at twice the budget), so it is within the budget in about half
    the resamples. The VERDICT quotes the exact step first, then why the far cheaper lenient is not
    written. Control: lenient within the budget on every prompt is written, and no such clause shows."""
    n = 10
    exact = [_point("none", "none", [1.0] * n, [0.0] * n), _point("lossless", "lossless", [0.98] * n, [0.0] * n)]
    edge = _result(exact + [_point("lenient", "lenient", [0.6] * n, [0.0, 0.039] * (n // 2), lenience=0.4)])
    assert edge.chosen.family == "none"
    line = next(line for line in describe(edge) if line.startswith("VERDICT"))
    head, _, cheapest = line.partition("; the cheapest lossy setting, ")
    assert "not more than the 3% margin" in head and "so none (exact, simpler) is written" in head
    assert cheapest.startswith("lenient: lenient a=0.4 (0.600, ")
    assert "is cheaper and within the fidelity budget in only" in cheapest and "(95% needed)" in cheapest
    clear = _result(exact + [_point("lenient", "lenient", [0.6] * n, [0.0] * n, lenience=0.4)])
    assert clear.chosen.family == "lenient"
    line = next(line for line in describe(clear) if line.startswith("VERDICT"))
    assert "the cheapest lossy setting" not in line


def test_repricing_prices_every_prompt_again_and_older_points_state_no_uncertainty():
    n = 6
    points = [_point("none", "none", [1.0] * n, [0.0] * n), _point("lossy-fixed", "lossy", [0.5] * n, [0.0] * n)]
    points[1].per_prompt["passes"]["draft"] = [float(TOKENS)] * n  # one drafter pass per token
    points[1].passes["draft"] = 1.0
    costs = ForwardCosts(c_draft=1.0, c_slim=0.5, c_resume=None, c_full_block=2.0, c_full=1.0, context_length=8,
                         block_length=4)
    repriced = _result(points).repriced({None: costs, "mask.json": costs})
    # per token: 0.5 full block passes + one drafter pass at half a block pass
    assert repriced.points[1].per_prompt["cost"] == [1.0 * TOKENS] * n
    assert repriced.points[1].full_equivalent == 1.0 and repriced.chosen.family == "none"
    old = _result([Point(p.family, p.settings, p.mask, p.full_equivalent, p.ll_drop, p.overrule, p.tokens,
                         regret=p.regret, passes=p.passes) for p in points])
    assert choice_uncertainty(old) is None
    assert "UNCERTAINTY: none can be stated" in "\n".join(describe(old))
    assert old.drafting is not None and not old.drafting.replicates  # judged on the pooled costs alone


def test_when_the_target_alone_is_cheapest_tuned_json_records_ar_with_the_drafting_settings():
    """Plain decoding cheaper than every drafting point: the choice written is ``ar`` (the chosen
    drafting point's settings stay, for a run that drafts anyway) and the report says so. Control:
    the same points with plain decoding dearer write the drafting choice."""
    from types import SimpleNamespace

    from viasd_adapt.tuning.choose import artifact_of, target_alone_cheapest

    n = 8
    points = [_point("none", "none", [0.9] * n, [0.0] * n), _point("lenient", "lenient", [0.85] * n, [0.0] * n, lenience=0.4)]
    pair = SimpleNamespace(target=None, draft=None, lookup=None)
    for c_full, written in ((0.5, "ar"), (0.95, None)):
        costs = {"None": {"c_full": c_full, "c_full_block": 1.0, "c_slim": None, "c_resume": None, "c_draft": 0.1}}
        result = judged(points, Budget(), costs, {}, 1.0)
        assert target_alone_cheapest(result) is (written == "ar")
        from unittest import mock

        with mock.patch("viasd_adapt.tuning.choose.model_fingerprint", return_value=None):
            tuned = artifact_of(result, pair)
        assert tuned.choice == (written or result.chosen.family)
        assert tuned.settings == result.chosen.settings  # what a run that drafts anyway uses
        assert tuned.runs_target_alone is (written == "ar")
        note = [line for line in describe(result) if line.startswith("NOTE: plain decoding")]
        assert bool(note) is (written == "ar")
        if note:
            assert "records the choice ar" in note[0] and "runs the target alone" in note[0]
            assert "ar (exact) is the cheapest setting within the budget (0.500)" in tuned.target_alone_reason()


def test_a_tuned_ar_choice_never_says_the_target_alone_cost_less_beside_figures_that_say_otherwise():
    """A tuned.json with the choice ar explains it from the tuner's own line (``report.why``); an older
    file without one is worded from its figures: "cost less" only where plain decoding did cost less.
    Control: the same file with plain decoding cheaper keeps the words."""
    from viasd_adapt.config.tuned import TunedSettings

    def tuned(c_full, why=None):
        report = {"costs": {"None": {"c_full": c_full, "c_full_block": 1.0, "c_slim": None, "c_resume": None,
                                     "c_draft": 0.0}}} | ({"why": why} if why else {})
        return TunedSettings(settings=TierSettings(mode="none"), choice="ar", measured={"full_equivalent": 0.498},
                             report=report)

    dearer = tuned(0.895).target_alone_reason()
    assert "cost less than drafting" not in dearer and "0.895" in dearer and "0.498" in dearer
    assert "cost less than drafting (0.400" in tuned(0.4).target_alone_reason()  # the control
    line = "none costs 0.980 against ar's 1.000 (2.0% less), not more than the 3% margin; so ar (exact, simpler) is written"
    assert tuned(0.895, why=line).target_alone_reason().endswith(line)
