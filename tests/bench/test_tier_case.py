"""viasd demo's closing case: the shipped demo-ee pair, lossy, where the adaptive tier runs.

The tier's share of cycles comes from the controller, whose prices and priors are the shipped
tuned.json's numbers (not timed in the test), so it is the same on every machine; the priced cost
is timed and only printed. The control: the demo pair's lossless run, where the tier does not pay,
runs it on few cycles.
"""

from __future__ import annotations

from viasd_adapt.bench.tier_case import TierCase, run_tier_case


def test_the_tier_runs_on_most_cycles_of_the_demo_ee_lossy_case():
    case = run_tier_case(prompts=1, tokens=24, cost_repeats=1)
    assert case.tier_share >= 0.5, case
    assert case.lossy > 0 and case.untiered > 0
    first, why = case.lines()
    assert "demo-ee" in first and f"{case.tier_share:.0%} of cycles" in first and "untiered SD" in first
    assert "keeps the tier off" in why


def test_the_control_where_the_tier_does_not_pay_it_runs_on_few_cycles():
    from viasd_adapt.bench.prompt_sets import text_prompts
    from viasd_adapt.bench.run import RunPlan, run_bench
    from viasd_adapt.bench.session import BenchConfig, plan_bench
    from viasd_adapt.models.registry import resolve_pair
    from viasd_adapt.prompts.splits import bench_snippets

    paths = resolve_pair("demo")
    config = BenchConfig(paths.target, paths.draft, pair_mask=paths.mask, frameworks="hf", modes="none,lossless",
                         max_new_tokens=24, repeats=1, cost_repeats=1, task_prompts=0)
    planned = plan_bench(config)  # the planner: settings, pair, the one drafter check
    pair, spec = planned.pair, planned.spec
    plan = RunPlan(frameworks=("hf",), modes=("none", "lossless"), max_new_tokens=24, repeats=1, cost_repeats=1,
                   plain_rows=False, fixed_twins=False)
    rows = run_bench(pair, spec.settings, config.sampling, text_prompts(pair.tokenizer, bench_snippets(1)), plan,
                     contexts=planned.context).rows
    lossless = next(r for r in rows if r["framework"] == "hf" and r["mode"] == "lossless")
    assert lossless["tier_share"] < 0.5


def test_the_case_says_what_it_saves():
    case = TierCase(lossy=0.3, untiered=0.5, tier_share=0.7, prompts=1, tokens=48)
    assert abs(case.saving - 0.4) < 1e-9 and "+40% saved" in case.lines()[0]
