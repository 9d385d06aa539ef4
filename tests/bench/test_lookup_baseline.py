"""Stock HF prompt lookup as a bench baseline beside a drafter's rows: AR and stock prompt lookup
as baselines, in one run."""

from __future__ import annotations

import json

from click.testing import CliRunner

from viasd_adapt.frameworks import baselines
from viasd_adapt.frameworks import registry as frameworks
from viasd_adapt.bench.verdict import verdict
from viasd_adapt.bench.run import RunPlan, plan_rows
from viasd_adapt.frameworks.requests import RunRequest
from viasd_adapt.models.pair import load_pair
from viasd_adapt.core.settings import TierSettings


def test_lookup_is_one_stock_row_and_greedy_output_equals_the_target_alone(char_pair):
    pair = load_pair(char_pair / "target", char_pair / "draft", char_pair / "mask.json", device="cpu")
    rows, skipped, _ = plan_rows(pair, RunPlan(frameworks=("hf", "lookup"), modes=("none", "lenient")))
    assert not skipped
    assert [r.label for r in rows if r.framework == "lookup"] == ["lookup/plain"]  # no tier modes for a baseline
    prompt = pair.tokenizer("def f(x):\n    return x")["input_ids"]
    request = RunRequest.stock_run(prompt, 12, TierSettings(gamma=3), stop_at_eos=False)
    lookup = frameworks.run("lookup", pair, request)
    ar = baselines.run_ar(pair, request)
    assert len(lookup.tokens) == 12 and lookup.tokens == ar.tokens  # prompt lookup is lossless


def test_bench_runs_the_lookup_row_with_the_drafter_rows_and_weighs_the_verdict_against_it(char_pair, tmp_path):
    from viasd_adapt.cli.main import cli

    out = tmp_path / "bench.json"
    result = CliRunner().invoke(cli, ["bench", "--pair", str(char_pair), "--frameworks", "hf,lookup", "--modes", "none",
                                      "--num-prompts", "2", "--max-new-tokens", "6", "--repeats", "1",
                                      "--task-prompts", "0", "--json", str(out)])
    assert result.exit_code == 0, result.output
    rows = {(r["framework"], r["mode"]): r for r in json.loads(out.read_text())["rows"]}
    lookup = rows[("lookup", "plain")]
    assert lookup["draft_passes_per_token"] == 0.0 and lookup["full_passes_per_token"] > 0  # counted by the meter
    assert lookup["identical_outputs"] == 1.0 and lookup["tau"] >= 1.0
    assert ("hf", "plain") in rows and ("hf", "none") in rows  # the drafter's rows are there too
    lines = [line.strip() for line in result.output.splitlines()]
    hf_line = next(line for line in lines if line.startswith("hf: cheapest within"))
    assert f"lookup {lookup['full_equivalent_per_token']:.3f}" in hf_line  # a candidate of the hf verdict
    assert not any(line.startswith("lookup: cheapest") for line in lines)  # no verdict of its own


def test_verdict_recommends_stock_prompt_lookup_when_it_is_cheapest():
    def row(framework, mode, feq, drop=0.0):
        return {"framework": framework, "mode": mode, "full_equivalent_per_token": feq, "ll_drop": drop, "regret": 0.0}

    rows = [row("ar", "-", 0.60), row("lookup", "plain", 0.50), row("hf", "none", 0.71), row("hf", "lossy-fixed", 0.55, 0.01)]
    (line,) = verdict(rows)
    assert "is lookup (0.500" in line and "use lookup" in line
    (line,) = verdict([row("lookup", "plain", 0.70)] + rows[2:])  # a cheaper tier row beats it by more than the margin
    assert "is lossy-fixed" in line and "The slim tier pays here: use lossy-fixed." in line


def test_every_prompt_lookup_row_prices_its_one_token_forwards_as_one_token_passes(char_pair):
    """Prompt lookup that finds no n-gram has the target check one token; the bench prices such a
    forward as a one-token pass (``c_full``), not a block pass. Counted here with a hook of the
    test's own, on the stock lookup run, and compared with the rows of a bench run."""
    import pytest

    from viasd_adapt.bench.prompt_sets import BenchPrompt
    from viasd_adapt.bench.run import run_bench
    from viasd_adapt.core.sampling import SamplingConfig

    pair = load_pair(char_pair / "target", "prompt-lookup", char_pair / "mask.json", device="cpu")
    ids = pair.tokenizer("for i in range(10):\n    print(i)\n")["input_ids"]
    n, settings = 24, TierSettings(gamma=3, lenience=0.5)
    fed: list[int] = []
    handle = pair.target.register_forward_hook(lambda module, args, kwargs, out: fed.append(kwargs["input_ids"].shape[1]),
                                               with_kwargs=True)
    try:
        tokens = frameworks.run("lookup", pair, RunRequest.stock_run(ids, n, settings, stop_at_eos=False)).tokens
    finally:
        handle.remove()
    single, block = sum(1 for k in fed if k == 1), sum(1 for k in fed if k > 1)
    assert len(tokens) == n and single > 0 and block > 0  # the run has both kinds of pass

    plan = RunPlan(frameworks=("lookup", "hf"), modes=("none", "lenient"), max_new_tokens=n, repeats=1, cost_repeats=2)
    result = run_bench(pair, settings, SamplingConfig(), [BenchPrompt(ids)], plan)
    rows = {(r["framework"], r["mode"]): r for r in result.rows}
    c = result.costs
    lookup = rows[("lookup", "plain")]
    assert lookup["single_passes_per_token"] == pytest.approx(single / n)
    assert lookup["full_passes_per_token"] == pytest.approx((single + block) / n)
    assert lookup["full_equivalent_per_token"] == pytest.approx((single * c.c_full + block * c.c_full_block) / (n * c.c_full_block))
    for key in (("hf", "plain"), ("hf", "none")):  # the same lookups, stock and through the tier's observed loop
        assert rows[key]["single_passes_per_token"] == pytest.approx(single / n), key
        assert rows[key]["full_equivalent_per_token"] == pytest.approx(lookup["full_equivalent_per_token"]), key
    assert rows[("hf", "lenient")]["single_passes_per_token"] > 0  # the tier's own loop, lookups with no match
    ar = rows[("ar", "-")]
    assert ar["single_passes_per_token"] == pytest.approx((n - 1) / n)  # every step after the prefill


def test_a_one_token_pass_of_q_through_the_shared_prefix_view_is_priced_as_one_token(char_pair):
    """The tiered modes run q through a view of the target that shares the slim verifier's prefix
    (every layer runs). Its one-token passes (a lookup with no match, on a cycle the adaptive tier
    ran untiered) must be priced as one-token passes, like the same forward of mode none, so that an
    adaptive row that never ran its tier costs what the untiered row costs. The slim view's are not
    full passes at all; the control: the meter sees the slim pass but counts it nowhere."""
    from viasd_adapt.bench.measure import RunMeter
    from viasd_adapt.routing.shared import SharedPrefixRunners
    from viasd_adapt.routing.slim import SlimVerifier

    pair = load_pair(char_pair / "target", "prompt-lookup", char_pair / "mask.json", device="cpu")
    slim = SlimVerifier(pair.target, pair.routing)
    sequence = pair.tokenizer("for i in range(10):\n")["input_ids"]
    with RunMeter(pair.target, None) as meter:
        runners = SharedPrefixRunners(pair.target, slim)  # views built during a run copy the meter's hooks
        measure = meter.start()
        runners.full_logits(sequence, 1)  # the prompt: a block
        runners.full_logits(sequence + [sequence[-1]], 1)  # one new token
        runners.slim_logits(sequence + [sequence[-1], sequence[0]], 1)  # the slim view: not a full pass
        meter.stop()
    assert runners.full_passes == 2 and runners.slim_passes == 1
    assert measure.single_passes == 1 and measure.full_passes == 0  # q's passes are counted by the run's metrics
    assert "target" in measure.models_used


def test_tune_prices_a_prompt_lookup_with_no_match_as_a_one_token_pass(char_pair, monkeypatch):
    """viasd tune prices its points as the bench prices its rows: the untiered prompt-lookup point's
    one-token passes (no n-gram matched) cost a one-token forward, so its cost is the bench's
    formula applied to the passes a hook of the test's own counts. The forward costs are injected
    (a one-token pass at 0.4 of a block pass), not timed: no test compares timings, and two timed
    forwards of a tiny model can come in either order on a loaded machine."""
    import pytest

    from viasd_adapt.bench.costs import ForwardCosts, PassCounts, full_equivalent
    from viasd_adapt.tuning import measure as tuning  # where the sweep measures its forward costs
    from viasd_adapt.tuning.tune import TuneGrid, tune

    from viasd_adapt.bench.prices import PriceList

    def injected_prices(target, draft, slims=None, context=None, gamma=5, repeats=15, source=None):
        rounds = {"c_full_block": [0.010] * 3, "c_full": [0.004] * 3}
        for name in slims or {}:
            rounds |= {f"c_slim@{name}": [0.006] * 3, f"c_resume@{name}": [0.009] * 3}
        return PriceList(rounds, tuple(slims or ()), len(context or ()), gamma + 1)

    monkeypatch.setattr(tuning, "measure_prices", injected_prices)

    pair = load_pair(char_pair / "target", "prompt-lookup", char_pair / "mask.json", device="cpu")
    ids = pair.tokenizer("for i in range(10):\n    print(i)\n")["input_ids"]
    n = 24
    fed: list[int] = []
    handle = pair.target.register_forward_hook(lambda module, args, kwargs, out: fed.append(kwargs["input_ids"].shape[1]),
                                               with_kwargs=True)
    try:
        out = frameworks.run("engine", pair, RunRequest.tiered(ids, n, TierSettings(mode="none", gamma=3), stop_at_eos=False))
    finally:
        handle.remove()
    single = sum(1 for k in fed if k == 1)
    assert single > 0  # the run has one-token passes to price
    from viasd_adapt.bench.prompt_sets import BenchPrompt

    result = tune(pair, [BenchPrompt(ids)], max_new_tokens=n, grid=TuneGrid(gamma=3, lenience=(0.5,), alpha1=(0.5,),
                                                                          alpha2=(0.3,), greedy_gates=("proposer",)),
                  ratios=(), cost_repeats=2, adaptive=False)
    sd = next(p for p in result.points if p.family == "none")
    assert sd.passes["single"] == pytest.approx(single / n) and sd.per_prompt["passes"]["single"] == [single]
    passes = PassCounts(**sd.passes)
    assert passes.full == pytest.approx((out.metrics.full_passes - single) / n)
    costs = ForwardCosts(**result.costs["None"])
    assert (costs.c_full, costs.c_full_block) == (0.004, 0.010)  # the injected costs priced the sweep
    assert sd.full_equivalent == pytest.approx(full_equivalent(costs, passes))
    priced_as_blocks = full_equivalent(costs, PassCounts(draft=passes.draft, full=passes.full + passes.single))
    assert sd.full_equivalent < priced_as_blocks  # the control: the old pricing was dearer
