"""A verdict says when its price list was timed on a busy machine: the forward kind whose rounds
spread widest (IQR over the median) above 25% is named, with what it means for the verdict. Synthetic
price lists, injected; the control in each: a narrow list prints no such line."""

from __future__ import annotations

import pytest

from viasd_adapt.bench.prices import WIDE_SPREAD, PriceList, spread_line, widest_spread


def price_list(draft=(1.2, 1.2, 5.4, 5.4, 1.2, 1.3, 5.2, 1.2), block=(10.0, 10.2, 9.8, 10.1, 10.0, 9.9, 10.3, 10.0)):
    """A drafter price that jumps between two levels (a busy machine) beside a steady target."""
    n = len(block)
    return PriceList({"c_full_block": [b / 1000 for b in block], "c_full": [0.004] * n,
                      "c_draft": [d / 1000 for d in draft], "c_slim@/somewhere/mask.json": [0.006] * n}, ("/somewhere/mask.json",), 96, 6)


NARROW = dict(draft=(1.2, 1.21, 1.19, 1.2, 1.22, 1.2, 1.18, 1.2))


def test_a_wide_spread_names_its_forward_kind_and_what_it_means():
    kind, relative = widest_spread(price_list())
    assert kind == "c_draft" and relative > 1.0
    line = spread_line(price_list())
    assert line.startswith("BUSY MACHINE:") and "c_draft (a drafter pass)" in line and f"{relative:.0%}" in line
    assert "busy" in line and "simpler setting" in line
    assert spread_line(price_list(**NARROW)) is None  # control: a narrow list says nothing
    assert spread_line(None) is None


def test_the_line_names_a_mask_by_its_file_and_follows_the_threshold():
    slim = PriceList({"c_full_block": [0.01] * 4, "c_slim@/somewhere/mask.json": [0.004, 0.006, 0.008, 0.010]},
                     ("/somewhere/mask.json",), 96, 6)
    kind, relative = widest_spread(slim)
    assert kind == "c_slim@/somewhere/mask.json" and relative > WIDE_SPREAD
    line = spread_line(slim)
    assert "c_slim@mask.json (a slim pass)" in line and "/somewhere" not in line
    assert spread_line(slim, threshold=relative) is None  # control: at the threshold it is not wide
    assert spread_line(slim, threshold=relative - 0.01) is not None


def _rows():
    return [{"framework": "ar", "mode": "none", "full_equivalent_per_token": 0.70, "ll_drop": 0.0, "regret": 0.0},
            {"framework": "engine", "mode": "none", "full_equivalent_per_token": 0.50, "ll_drop": 0.0, "regret": 0.0}]


def test_the_bench_verdict_ends_with_the_line_when_its_prices_spread_wide():
    from viasd_adapt.bench.verdict import verdict

    busy = verdict(_rows(), prices=price_list())
    assert busy[0].startswith("engine:") and busy[-1].startswith("BUSY MACHINE:") and "c_draft" in busy[-1]
    quiet = verdict(_rows(), prices=price_list(**NARROW))  # control
    assert not any(line.startswith("BUSY MACHINE") for line in quiet) and len(quiet) == len(busy) - 1


@pytest.mark.parametrize("wide", [True, False])
def test_the_tune_verdict_says_so_too(char_pair, monkeypatch, wide):
    """The sweep's prices are injected (no timing); wide: the line is in tune's (and models add's)
    verdict, narrow (the control): it is not."""
    from viasd_adapt.bench.prompt_sets import BenchPrompt
    from viasd_adapt.models.pair import load_pair
    from viasd_adapt.tuning import measure as tuning
    from viasd_adapt.tuning.tune import TuneGrid, describe, tune

    def injected_prices(target, draft, slims=None, context=None, gamma=5, repeats=15, source=None):
        drafts = (1.2, 5.4, 1.2, 5.4) if wide else (1.2, 1.2, 1.2, 1.2)
        rounds = {"c_full_block": [0.010] * 4, "c_full": [0.004] * 4, "c_draft": [d / 1000 for d in drafts]}
        for name in slims or {}:
            rounds |= {f"c_slim@{name}": [0.006] * 4, f"c_resume@{name}": [0.009] * 4}
        return PriceList(rounds, tuple(slims or ()), len(context or ()), gamma + 1)

    monkeypatch.setattr(tuning, "measure_prices", injected_prices)
    pair = load_pair(char_pair / "target", char_pair / "draft", char_pair / "mask.json", device="cpu")
    ids = pair.tokenizer("for i in range(10):\n    print(i)\n")["input_ids"]
    result = tune(pair, [BenchPrompt(ids)], max_new_tokens=8, ratios=(), cost_repeats=2, adaptive=False,
                  grid=TuneGrid(gamma=3, lenience=(0.5,), alpha1=(0.5,), alpha2=(0.3,), greedy_gates=("proposer",)))
    busy = [line for line in describe(result) if line.startswith("BUSY MACHINE:")]
    assert len(busy) == (1 if wide else 0)
    if wide:
        assert "c_draft (a drafter pass)" in busy[0]
