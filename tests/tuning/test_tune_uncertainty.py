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
    return Point(family, TierSettings(mode=mode, **settings), "mask.json" if family == "viasd" else None,
                 float(np.mean(costs)), 0.0, 0.0, n * TOKENS, regret=float(np.mean(regrets)),
                 passes={"draft": 0.0, "slim": 0.0, "full": float(np.mean(costs)), "resumed": 0.0}, per_prompt=per_prompt)


def _result(points, budget=Budget()):
    return judged(points, budget, {}, {}, 1.0)


def test_a_clear_win_over_many_prompts_is_determined():
    rng = np.random.default_rng(0)
    n = 30
    base = 1.0 + 0.02 * rng.standard_normal(n)
    points = [_point("sd", "none", base, [0.0] * n), _point("viasd", "lossy", 0.7 * base, [0.0] * n, alpha1=0.3)]
    result = _result(points)
    assert result.chosen.family == "viasd"
    assert result.pooled is None and result.chosen is result.point_estimate  # determined: written as it is
    uncertainty = choice_uncertainty(result)
    assert uncertainty.determined and uncertainty.recommended == uncertainty.stated
    assert any(line.startswith("UNCERTAINTY: the choice is determined at 30 prompts") for line in describe(result))
    assert any(line.startswith("VERDICT: the slim tier pays") for line in describe(result))


def test_a_lenient_point_out_of_budget_by_one_prompt_leaves_the_choice_undetermined():
    n = 8
    points = [_point("sd", "none", [1.0] * n, [0.0] * n),
              _point("lenient", "lenient", [0.6] * n, [0.3] + [0.0] * (n - 1), lenience=0.4),
              _point("viasd", "lossy", [0.8] * n, [0.0] * n, alpha1=0.3)]
    result = _result(points)
    assert result.pooled.family == "viasd"  # the point estimate on all 8 prompts pooled
    assert result.chosen.family == "sd"  # what tuned.json records: the simpler setting the bootstrap recommends
    lines = describe(result)
    verdict_line = next(line for line in lines if line.startswith("VERDICT"))
    assert verdict_line.startswith("VERDICT (a preview, undetermined at 8 prompts): the slim tier pays")
    uncertainty_line = next(line for line in lines if line.startswith("UNCERTAINTY"))
    assert "use the simpler sd: none" in uncertainty_line
    assert "tuned.json records the simpler sd: none, not the pooled choice viasd" in uncertainty_line
    # judged again (another budget, the same one here) keeps the same written choice; a determined
    # result writes its point estimate and keeps no separate pooled point
    assert result.rechosen(result.budget).chosen is result.chosen



def test_repricing_prices_every_prompt_again_and_older_points_state_no_uncertainty():
    n = 6
    points = [_point("sd", "none", [1.0] * n, [0.0] * n), _point("viasd", "lossy", [0.5] * n, [0.0] * n)]
    points[1].per_prompt["passes"]["draft"] = [float(TOKENS)] * n  # one drafter pass per token
    points[1].passes["draft"] = 1.0
    costs = ForwardCosts(c_draft=1.0, c_slim=0.5, c_resume=None, c_full_block=2.0, c_full=1.0, context_length=8,
                         block_length=4)
    repriced = _result(points).repriced({None: costs, "mask.json": costs})
    # per token: 0.5 full block passes + one drafter pass at half a block pass
    assert repriced.points[1].per_prompt["cost"] == [1.0 * TOKENS] * n
    assert repriced.points[1].full_equivalent == 1.0 and repriced.chosen.family == "sd"
    old = _result([Point(p.family, p.settings, p.mask, p.full_equivalent, p.ll_drop, p.overrule, p.tokens,
                         regret=p.regret, passes=p.passes) for p in points])
    assert choice_uncertainty(old) is None
    assert "UNCERTAINTY: none can be stated" in "\n".join(describe(old))


def test_when_the_target_alone_is_cheapest_tuned_json_records_ar_with_the_drafting_settings():
    """Plain decoding cheaper than every drafting point: the choice written is ``ar`` (the chosen
    drafting point's settings stay, for a run that drafts anyway) and the report says so. Control:
    the same points with plain decoding dearer write the drafting choice."""
    from types import SimpleNamespace

    from viasd_adapt.tuning.choose import artifact_of, target_alone_cheapest

    n = 8
    points = [_point("sd", "none", [0.9] * n, [0.0] * n), _point("lenient", "lenient", [0.85] * n, [0.0] * n, lenience=0.4)]
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
            assert "0.500 full-equivalent passes/token" in tuned.target_alone_reason()
