"""Stock rows are priced in full: every forward they make counts, the assistant drafter's included.

Stock assisted generation drafts with a shallow copy of the drafter (``drafting_blocks_of``, its
own generation config), so a meter that counted only the drafter object itself saw no drafter pass
in ``hf/plain`` and priced the row below the target alone while it ran slower. Where a stock row's
drafter forwards cannot be seen, the row states no cost, and says why.
"""

from __future__ import annotations

import torch

from viasd_adapt.adapters.hf.runner import drafting_blocks_of
from viasd_adapt.bench.measure import RunMeter
from viasd_adapt.bench.run import PlannedRow, RepeatStats, RunPlan, run_bench, uncounted_reason
from viasd_adapt.core.sampling import SamplingConfig
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.models.pair import load_pair


def test_the_meter_counts_forwards_of_the_stock_assistants_copy_of_the_drafter(char_pair):
    pair = load_pair(char_pair / "target", char_pair / "draft", char_pair / "mask.json", device="cpu")
    assistant = drafting_blocks_of(pair.draft, 3)
    assert assistant is not pair.draft  # the control: an identity check on the drafter misses this copy
    ids = torch.tensor([[1, 2, 3]])
    with RunMeter(pair.target, pair.draft) as meter, torch.no_grad():
        measure = meter.start()
        assistant(input_ids=ids)
        pair.draft(input_ids=ids)
        meter.stop()
    assert measure.draft_passes == 2
    assert not pair.draft._forward_hooks and not assistant._forward_hooks  # the hook is scoped: removed after


def test_the_stock_hf_row_counts_its_drafter_and_costs_no_less_than_its_target_passes(char_pair):
    pair = load_pair(char_pair / "target", char_pair / "draft", char_pair / "mask.json", device="cpu")
    plan = RunPlan(frameworks=("hf",), modes=("none",), max_new_tokens=8, repeats=1, cost_repeats=2)
    result = run_bench(pair, TierSettings(gamma=3), SamplingConfig(), ["def add(a, b):\n    return"], plan)
    plain = next(r for r in result.rows if r["framework"] == "hf" and r["mode"] == "plain")
    assert plain["draft_passes_per_token"] > 0 and plain["cost_note"] is None
    c = result.costs
    target_only = (plain["full_passes_per_token"] - plain["single_passes_per_token"]
                   + plain["single_passes_per_token"] * c.c_full / c.c_full_block)
    assert plain["full_equivalent_per_token"] > target_only  # the drafter's passes are in the price


def test_a_stock_row_whose_drafter_forwards_were_not_seen_states_no_cost():
    row = PlannedRow("hf", "plain")
    unseen = RepeatStats(tokens=8, meter_full=5)
    assert "drafter's forwards were not seen" in uncounted_reason(row, [unseen], drafter_model=True)
    assert uncounted_reason(row, [RepeatStats(tokens=8, meter_full=5, meter_draft=12)], drafter_model=True) is None
    assert uncounted_reason(row, [unseen], drafter_model=False) is None  # prompt lookup: no drafter model to count
    assert uncounted_reason(PlannedRow("hf", "none"), [unseen], drafter_model=True) is None  # not a stock row
    assert uncounted_reason(PlannedRow("lookup", "plain"), [unseen], drafter_model=True) is None  # drafts no model
