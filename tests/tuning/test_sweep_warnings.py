"""A tuning sweep leaves the process's warning filters as it found them.

The sweep's candidates try tolerances far from the defaults on purpose, and the drafter-quality
monitor would read their loose gate 1 as a junk drafter. Their run contexts are built unwatched
(``resolve_context(..., watch_drafter=False)``) instead of hiding the monitor's warning behind
``warnings.catch_warnings``, which changes the filters of the whole process (every thread) while
the sweep runs. The tests look at the filters from inside the sweep (its ``progress`` callback, the
probe's clock) and run a junk drafter, whose lossy candidates the monitor does flag: the control
builds the same sweep's contexts watched, and it warns.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.support.pairs import load_shipped_demo_pair
from viasd_adapt.config.budget import Budget
from viasd_adapt.core.monitor import ViasdQualityWarning
from viasd_adapt.core.settings import Mode, TierSettings
from viasd_adapt.engine import context as context_module
from viasd_adapt.models.pair import load_pair
from viasd_adapt.tuning import measure
from viasd_adapt.tuning.grid import TuneGrid
from viasd_adapt.tuning.probe import setting_price

PROMPT = "import os\n\n\ndef read_config(path):\n    with open(path) as handle:\n        "
#: the defaults' lossy point only (and plain SD, which every sweep measures first)
GRID = TuneGrid(alpha1=(0.5,), alpha2=(0.3,), lenience=(0.4,), greedy_gates=("proposer",), gamma=5)


@pytest.fixture(scope="module")
def junk_pair(tmp_path_factory):
    """The demo pair's target and mask with a drafter of random weights (same vocabulary)."""
    paths, tokenizer, _, drafter = load_shipped_demo_pair()
    torch.manual_seed(0)
    junk = tmp_path_factory.mktemp("junk")
    AutoModelForCausalLM.from_config(drafter.config).eval().save_pretrained(junk)
    tokenizer.save_pretrained(junk)
    return load_pair(paths.target, junk, paths.mask, device="cpu")


def _sweep(pair, seen: list) -> None:
    measure.tune(pair, [PROMPT], max_new_tokens=40, grid=GRID, budget=Budget(), cost_repeats=1, adaptive=False,
                 progress=lambda message: seen.append(list(warnings.filters)))


def _watched(monkeypatch, module) -> None:
    """The control: the module's run contexts built watched, as any other run's (scoped)."""
    resolve = context_module.resolve_context
    monkeypatch.setattr(module, "resolve_context", lambda *args, **options: resolve(*args, **{**options, "watch_drafter": True}))


def test_a_sweep_changes_no_warning_filter_and_gives_no_quality_warning(junk_pair):
    before, seen = list(warnings.filters), []
    _sweep(junk_pair, seen)  # a ViasdQualityWarning is an error here (pyproject's filterwarnings)
    assert seen and all(filters == before for filters in seen)  # not even while the sweep runs
    assert warnings.filters == before


def test_the_control_the_same_sweep_watched_warns(junk_pair, monkeypatch):
    _watched(monkeypatch, measure)
    with pytest.warns(ViasdQualityWarning, match="looks unrelated to the target"):
        _sweep(junk_pair, [])


def test_a_budget_probe_changes_no_warning_filter_and_gives_no_quality_warning(junk_pair, monkeypatch):
    ids = junk_pair.tokenizer(PROMPT)["input_ids"]
    settings = TierSettings(mode=Mode.LOSSY, adaptive=False)
    before, seen = list(warnings.filters), []

    def clock() -> float:  # asked while the probe runs: a second per question
        seen.append(list(warnings.filters))
        return float(len(seen))

    setting_price(junk_pair, ids, settings, junk_pair.routing, clock)
    assert seen and all(filters == before for filters in seen)
    _watched(monkeypatch, context_module)  # the probe imports resolve_context when it runs
    with pytest.warns(ViasdQualityWarning):
        setting_price(junk_pair, ids, settings, junk_pair.routing, clock)


@pytest.mark.parametrize("watch", [True, False])
def test_an_unwatched_context_gives_its_verify_steps_no_monitor(watch):
    """The switch travels with the context (another drafter's context keeps it) into each step."""
    from viasd_adapt.config.mask import RoutingMask
    from viasd_adapt.models.tiny import tiny_model

    target = tiny_model("llama")
    mask = RoutingMask.from_skipped(target.config.num_hidden_layers, [1])
    context = context_module.resolve_context(target, TierSettings(mode=Mode.LOSSY, adaptive=False), mask=mask,
                                             watch_drafter=watch)
    other = context.for_drafter(tiny_model("llama", seed=1))
    assert context.watch_drafter is other.watch_drafter is watch
    assert other.verify_step("engine").monitor.active is watch
    lossless = context_module.resolve_context(target, TierSettings(mode=Mode.LOSSLESS), mask=mask)
    assert not lossless.verify_step("engine").monitor.active  # watched, but only a lossy run can be judged
