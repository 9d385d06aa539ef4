"""benchmarks/tune_budgets.py: VIA-SD against lenient over several budgets, from a tune JSON."""

from __future__ import annotations

import importlib.util

import pytest

from tests.support import REPO_ROOT


def _module():
    spec = importlib.util.spec_from_file_location("tune_budgets", REPO_ROOT / "benchmarks" / "tune_budgets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def point(family, feq, regret, ll_drop=0.0, **settings):
    base = {"mode": "lossy" if family == "lossy-fixed" else family, "alpha1": 0.5, "alpha2": 0.3, "greedy_gates": "top", "lenience": 0.5}
    return {"family": family, "full_equivalent": feq, "regret": regret, "ll_drop": ll_drop, "mask": "/x/mask.json",
            "settings": {**base, **settings}}


def test_frontier_interpolation_and_gains():
    tb = _module()
    lenient = [point("lenient", 0.5, 0.0, lenience=0.2), point("lenient", 0.4, 0.04, lenience=0.6),
               point("lenient", 0.45, 0.05, lenience=0.7)]  # dominated: not a frontier corner
    assert tb.lower_frontier(lenient) == [(0.0, 0.5), (0.04, 0.4)]
    assert tb.interpolated_cost(tb.lower_frontier(lenient), 0.02) == pytest.approx(0.45)
    assert tb.interpolated_cost(tb.lower_frontier(lenient), 0.1) == 0.4  # beyond: the last corner
    points = lenient + [point("lossy-fixed", 0.36, 0.02), point("lossy-fixed", 0.3, 0.09)]
    rows = {r["regret_bound"]: r for r in tb.table(points, [0.01, 0.02, 0.1])}
    assert rows[0.01]["viasd"] is None and rows[0.01]["lenient"]["feq"] == 0.5
    # at 0.02: VIA-SD 0.36 against the grid's 0.5 (a=0.2) and the frontier's 0.45 at regret 0.02
    assert rows[0.02]["gain_vs_grid"] == pytest.approx(1 - 0.36 / 0.5)
    assert rows[0.02]["gain_vs_frontier"] == pytest.approx(1 - 0.36 / 0.45)
    assert rows[0.1]["viasd"]["feq"] == 0.3 and rows[0.1]["gain_vs_frontier"] == pytest.approx(1 - 0.3 / 0.4)
    # the LL-drop bound is max(0.02, R): a point over it does not qualify
    assert tb.table([point("lossy-fixed", 0.1, 0.0, ll_drop=0.03)], [0.02])[0]["viasd"] is None
