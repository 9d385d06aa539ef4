"""One run where the adaptive tier is on and pays: the shipped ``demo-ee`` pair in lossy mode.

On most pairs the default run keeps the slim tier off: its slim pass costs more than the tokens it
saves (the controller measures that in the first cycles and verifies untiered after). ``demo-ee``
is the shipped pair built so that it pays: its slim verifier is the target's own first 10 of 16
layers (an early exit), and lossy mode lets it commit what it is sure of without the full pass.
``viasd demo`` ends with this case so that a newcomer sees the tier do something: the default
(adaptive) lossy run and untiered SD, side by side on the same prompts, priced in full-equivalent
passes per token, with the share of cycles the tier ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

#: The pair and mode of the case (the shipped early-exit pair, where lossy pays).
CASE_PAIR = "demo-ee"
CASE_FRAMEWORK = "hf"


@dataclass(frozen=True)
class TierCase:
    """The case's figures: full-equivalent passes per token of the default lossy run and of untiered
    SD, the share of cycles the tier ran, and the run's size."""

    lossy: float
    untiered: float
    tier_share: float
    prompts: int
    tokens: int

    @property
    def saving(self) -> float:
        """The share of untiered SD's cost the default lossy run saves."""
        return 1.0 - self.lossy / self.untiered

    def lines(self) -> list[str]:
        return [f"the tier at work ({CASE_PAIR} pair, {CASE_FRAMEWORK}, default lossy run, {self.prompts} prompt(s) x "
                f"{self.tokens} tokens): the slim tier ran {self.tier_share:.0%} of cycles; "
                f"{self.lossy:.3f} full-equivalent passes per token against untiered SD's {self.untiered:.3f} "
                f"({self.saving:+.0%} saved)",
                "  (on the pair above the controller keeps the tier off where its slim pass costs more than it saves: "
                "it measures both arms in the first cycles and verifies untiered after)"]


def run_tier_case(prompts: int = 2, tokens: int = 48, cost_repeats: int = 3,
                  on_run: Callable[[str], None] | None = None) -> TierCase:
    """Runs the case: rows ``none`` and ``lossy`` (the default, adaptive) of ``hf`` on the pair's
    held-out snippets, one repeat, its forward costs timed in this run."""
    from viasd_adapt.bench.prompt_sets import text_prompts
    from viasd_adapt.bench.run import RunPlan, run_bench
    from viasd_adapt.bench.session import BenchConfig, plan_bench
    from viasd_adapt.models.registry import resolve_pair
    from viasd_adapt.prompts.splits import bench_snippets

    paths = resolve_pair(CASE_PAIR)
    config = BenchConfig(paths.target, paths.draft, pair_mask=paths.mask, frameworks=CASE_FRAMEWORK, modes="none,lossy",
                         max_new_tokens=tokens, repeats=1, cost_repeats=cost_repeats, task_prompts=0)
    planned = plan_bench(config)  # the planner: settings, pair, the one drafter check
    pair, spec = planned.pair, planned.spec
    plan = RunPlan(frameworks=(CASE_FRAMEWORK,), modes=("none", "lossy"), max_new_tokens=tokens, repeats=1,
                   cost_repeats=cost_repeats, plain_rows=False, fixed_twins=False)
    result = run_bench(pair, spec.settings, config.sampling, text_prompts(pair.tokenizer, bench_snippets(prompts)), plan,
                       on_run=on_run, contexts=planned.context)
    rows = {row["mode"]: row for row in result.rows if row["framework"] == CASE_FRAMEWORK}
    return TierCase(rows["lossy"]["full_equivalent_per_token"], rows["none"]["full_equivalent_per_token"],
                    rows["lossy"].get("tier_share") or 0.0, prompts, tokens)


__all__ = ["CASE_FRAMEWORK", "CASE_PAIR", "TierCase", "run_tier_case"]
