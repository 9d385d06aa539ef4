"""One price list per run: settings with the same pass counts cost exactly the same (A/A tests).

A bench or a tune times every forward kind once, in interleaved rounds
(:mod:`viasd_adapt.bench.prices`), and prices every row and point from those medians. The A/A tests
run the same setting twice in one run and require exactly equal costs; their controls price each of
the two from its own timing, as runs did before the one list, and show the two costs differ: the
equality is the mechanism's doing, not the pass counts'. No wall-clock time is compared: only
whether two prices are equal.
"""

from __future__ import annotations

import numpy as np
import pytest

from viasd_adapt.bench.costs import PassCounts, full_equivalent, measure_forward_costs
from viasd_adapt.bench.prices import PriceList, format_price_list, pass_vector, price_replicates, unit_prices
from viasd_adapt.bench.run import RunPlan, run_bench
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.models.pair import load_pair

PROMPTS = ["def add(a, b):\n    return", "for i in range(10):\n    print("]


def _own_timing_costs(pair, passes: PassCounts) -> float:
    """The control's pricing: the pass counts priced by forwards timed for this row alone."""
    return full_equivalent(measure_forward_costs(pair.target, pair.draft, None, list(range(1, 40)), 3, 2), passes)


def test_the_same_row_twice_in_one_bench_costs_exactly_the_same(char_pair):
    """Every row of a greedy bench runs the same setting once per repeat: the same passes each time,
    so exactly the same full-equivalent cost in every repeat, and rows with the same passes per
    token cost the same. Control: each repeat priced from forwards timed for it alone, the same
    passes cost apart."""
    pair = load_pair(char_pair / "target", char_pair / "draft", char_pair / "mask.json", device="cpu")
    plan = RunPlan(frameworks=("engine", "hf"), modes=("none", "lossless"), max_new_tokens=8, repeats=3, cost_repeats=3,
                   plain_rows=False)
    result = run_bench(pair, TierSettings(gamma=3), SamplingConfig(), PROMPTS, plan)
    assert result.prices is not None and result.costs == result.prices.costs("mask")
    by_passes: dict[tuple, set] = {}
    for row in result.rows:
        repeats = row["repeats"]
        assert len({tuple(p) for p in repeats["passes_per_token"]}) == 1, row["mode"]  # the A/A premise
        assert len(set(repeats["full_equivalent_per_token"])) == 1  # the same row, again: the same cost
        by_passes.setdefault(tuple(repeats["passes_per_token"][0]), set()).add(row["full_equivalent_per_token"])
    assert all(len(costs) == 1 for costs in by_passes.values())
    # control: priced from a timing of its own per repeat, the same passes cost apart
    engine = next(r for r in result.rows if r["framework"] == "engine" and r["mode"] == "none")
    passes = PassCounts(*engine["repeats"]["passes_per_token"][0])
    assert _own_timing_costs(pair, passes) != _own_timing_costs(pair, passes)


def test_two_identical_settings_in_one_tune_cost_exactly_the_same(char_pair):
    """Untiered SD measured twice in one sweep, once beside no mask and once beside a mask (where
    the tier points are priced): the same passes, exactly the same cost, on every prompt. Control:
    each priced from the forwards timed for its own mask, as sweeps did before the one list."""
    from viasd_adapt.tuning.grid import TuneConfig, TuneGrid
    from viasd_adapt.tuning.measure import Sweep, mask_costs

    pair = load_pair(char_pair / "target", char_pair / "draft", char_pair / "mask.json", device="cpu")
    ids = [list(pair.tokenizer(p)["input_ids"]) for p in PROMPTS]
    config = TuneConfig(max_new_tokens=8, grid=TuneGrid(gamma=3), cost_repeats=3, adaptive=False)
    sweep = Sweep.prepare(pair, ids, {"mask.json": pair.routing}, config, lambda message: None)
    settings = config.base.with_(mode="none")
    alone, beside = sweep.measure("none", settings, None), sweep.measure("none", settings, "mask.json")
    assert alone.passes == beside.passes  # the A/A premise
    assert alone.full_equivalent == beside.full_equivalent
    assert alone.per_prompt["cost"] == beside.per_prompt["cost"]
    shared = {(c.c_full_block, c.c_full, c.c_draft) for c in sweep.costs.values()}
    assert len(shared) == 1  # one list: the target's and drafter's prices are the same under every mask
    # control: each mask's forwards timed on their own (the old per-mask pricing) price them apart
    own = [mask_costs(pair, {"mask.json": pair.routing}, ids[0], 3, 2) for _ in range(2)]
    passes = PassCounts(**alone.passes)
    assert full_equivalent(own[0][None], passes) != full_equivalent(own[1]["mask.json"], passes)


# ---------------------------------------------------------------------------- the price list, pure


def _list(block=(1.0, 1.1, 0.9, 1.0, 1.2), single=(0.5, 0.6, 0.4, 0.5, 0.5)) -> PriceList:
    n = len(block)
    return PriceList({"c_full_block": list(block), "c_full": list(single), "c_draft": [0.1] * n,
                      "c_slim@m": [0.6] * n, "c_resume@m": [0.7] * n}, ("m",), 32, 4)


def test_the_price_list_gives_one_set_of_medians_for_every_mask():
    prices = _list()
    by_mask = prices.costs_by_mask()
    assert by_mask[None].c_full_block == by_mask["m"].c_full_block == 1.0
    assert by_mask[None].c_slim is None and by_mask["m"].c_slim == 0.6 and by_mask["m"].c_resume == 0.7
    again = PriceList.from_dict(prices.to_dict())
    assert again == prices and PriceList.from_dict({"rounds": 3}) is None
    assert prices.renamed({"m": "mask.json"}).costs("mask.json") == prices.costs("m")
    assert "price list (5 interleaved rounds" in format_price_list(prices)
    assert prices.spread()["c_full_block"]["relative_iqr"] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="same, non-zero number of rounds"):
        PriceList({"c_full_block": [1.0], "c_full": [1.0, 2.0]}, (), 1, 4)


def test_row_zero_of_the_price_replicates_prices_passes_as_the_medians_do():
    prices = _list()
    passes = PassCounts(draft=4.0, slim=1.0, full=2.0, resumed=0.5, single=0.25)
    replicates = price_replicates(prices.vectors("m"), 200, seed=0)
    assert replicates.shape == (201, 5)
    assert float(pass_vector(passes) @ replicates[0]) == pytest.approx(full_equivalent(prices.costs("m"), passes))
    assert len({tuple(row) for row in replicates[1:]}) > 1  # the rounds are resampled
    assert unit_prices(np.array([[1.0, 2.0, 4.0, 6.0, 2.0]])).tolist() == [[0.25, 0.5, 1.0, 0.5, 0.5]]


def test_the_verdicts_bootstrap_carries_the_price_lists_spread():
    """Two settings a few percent apart in the passes they run: with steady prices the saving holds
    in every resample; with the same medians but a wide spread of the 1-token price, it does not.
    Control: without the price list, only the prompts are resampled, and the saving always holds."""
    from viasd_adapt.bench.uncertainty import Candidate, PromptSums, resample
    from viasd_adapt.config.budget import Budget

    n = 8
    tokens = [10.0] * n

    def setting(name, full, single):
        passes = {"full": [full] * n, "single": [single] * n}
        cost = [full + single * 0.42] * n  # priced at the medians (0.42 of a block pass for a 1-token pass)
        return Candidate(name, PromptSums(tokens, cost, passes=passes), exact=True, simple=True)

    a, b = setting("blocks", 4.0, 0.0), setting("singles", 0.0, 9.0)  # 0.400 against 0.378 per token
    steady = _list(block=(1.0,) * 5, single=(0.42,) * 5).vectors(None)
    noisy = _list(block=(1.0,) * 5, single=(0.3, 0.35, 0.42, 0.6, 0.7)).vectors(None)

    def holds(vectors) -> float:
        out = resample([a, b], Budget(), price_vectors=None if vectors is None else [vectors, vectors])
        assert out.priced is (vectors is not None)
        assert out.cost[0, 1] == pytest.approx(0.378) and out.cost[0, 0] == pytest.approx(0.4)
        return float(np.mean(out.cost[1:, 1] < out.cost[1:, 0]))

    assert holds(steady) == 1.0
    assert 0.05 < holds(noisy) < 0.95
    assert holds(None) == 1.0  # the control: the prompts alone cannot see the price noise


def test_a_projection_that_uses_another_row_names_the_pass_price_that_makes_the_difference():
    """Measured, a 1-token pass costs 0.8 of a block pass: ar (one 1-token pass per token, 0.8) loses
    to untiered SD (0.5 block passes + 0.1 of a drafter's, 0.6). Projected on a machine where it
    costs 0.3, ar wins: the sentence names the 1-token pass and both prices. Control: with the same
    prices on both sides no price makes a difference, and nothing is said."""
    from viasd_adapt.bench.costs import ForwardCosts
    from viasd_adapt.bench.projection import projection_difference

    def costs(single):
        return ForwardCosts(c_draft=0.1, c_slim=None, c_resume=None, c_full_block=1.0, c_full=single, context_length=8,
                            block_length=4)

    ar = {"framework": "ar", "mode": "-", "full_passes_per_token": 1.0, "single_passes_per_token": 1.0,
          "draft_passes_per_token": 0.0}
    sd = {"framework": "hf", "mode": "none", "full_passes_per_token": 0.5, "single_passes_per_token": 0.0,
          "draft_passes_per_token": 1.0}
    sentence = projection_difference(sd, ar, costs(0.8), costs(0.3))
    assert sentence.startswith("The projection uses ar where the measurement uses none because of the 1-token pass's price")
    assert "0.30 of a full block pass projected against 0.80 measured" in sentence
    assert projection_difference(sd, ar, costs(0.8), costs(0.8)) is None


def test_a_round_keeps_the_fastest_of_its_tries_so_one_preemption_does_not_price_a_pass():
    """A drafter pass of 1 ms preempted once in three tries (12 ms) and a full pass of 8 ms: each
    round keeps the fastest try, so every round prices the drafter at 1 ms and the price list's
    spread stays zero. Control: one try per round keeps the preempted times, and the drafter's
    median rises to the preempted cost."""
    import statistics

    from viasd_adapt.bench.costs import time_rounds

    def probe(times):
        it = iter(times)
        return lambda: next(it)

    rounds = 5
    draft_tries = [12e-3, 1e-3, 1e-3] * rounds
    fastest = time_rounds({"c_draft": probe(draft_tries), "c_full": probe([8e-3] * 3 * rounds)}, rounds, tries=3)
    assert fastest["c_draft"] == [1e-3] * rounds and fastest["c_full"] == [8e-3] * rounds
    once = time_rounds({"c_draft": probe([12e-3, 12e-3, 1e-3] * rounds)}, 3 * rounds, tries=1)
    assert statistics.median(once["c_draft"]) == 12e-3
    with pytest.raises(ValueError, match="tries must be at least 1"):
        time_rounds({"c_full": probe([1.0])}, 1, tries=0)
