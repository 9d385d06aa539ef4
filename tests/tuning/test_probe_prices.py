"""The probe's units and what they price (viasd_adapt.tuning.budget_plan, probe): a setting is priced
once per prompt and per generated token from two runs of different lengths, a mask search per
measured evaluation, the tuner's sweep per token at any output length. Pure arithmetic on made-up
seconds: no model, no wall clock; each with the control that the old pricing fails."""

from __future__ import annotations

import math

import pytest

from viasd_adapt.errors import ConfigError
from viasd_adapt.tuning.budget_plan import (CALIBRATION_TOKENS, GridSize, RunPrice, UnitCosts, ratio_fixed_seconds,
                                            search_seconds, search_step_seconds, tune_seconds, units_words)
from viasd_adapt.tuning.probe import probe_windows
from viasd_adapt.tuning.tune_budget import ratio_search_seconds, scaled

PREFILL, PER_TOKEN, SCORING = 2.5, 0.25, 1.5


def run(tokens: int) -> float:
    """A drafting loop's time on one prompt: its prefill once, then a price per generated token."""
    return PREFILL + tokens * PER_TOKEN


def units(**changes) -> UnitCosts:
    values = dict(step=0.2, window=1.0, evaluation=0.4, untiered=RunPrice(4.0, 0.25), tiered=RunPrice(5.0, 0.5))
    return UnitCosts(**(values | changes))


def test_two_runs_price_a_setting_once_per_prompt_and_per_token():
    price = RunPrice.fitted((2, run(2)), (16, run(16)), SCORING)
    assert math.isclose(price.token, PER_TOKEN) and math.isclose(price.prompt, PREFILL + SCORING)
    assert math.isclose(price.at(32), run(32) + SCORING)  # what a 32-token sweep prompt takes
    # control: the old price, a 16-token run and its scoring doubled, counts the prefill and the scoring twice
    doubled = (run(16) + SCORING) * 32 / 16
    assert math.isclose(doubled - price.at(32), PREFILL + SCORING)


def test_a_longer_output_adds_tokens_not_prompts():
    price = RunPrice.fitted((16, run(16)), (2, run(2)), SCORING)  # the order of the runs does not matter
    assert math.isclose(price.at(64) - price.at(32), 32 * PER_TOKEN)
    assert not math.isclose(price.at(64), 2 * price.at(32))  # control: not a copy of the shorter prompt


def test_a_noisy_pair_of_runs_never_prices_below_zero():
    price = RunPrice.fitted((2, 3.0), (16, 2.0), 0.5)  # the long run came out faster (a busy machine)
    assert price.token == 0.0 and price.prompt == 3.5
    with pytest.raises(ConfigError, match="two lengths"):
        RunPrice.fitted((16, 3.0), (16, 4.0), 0.5)


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan])
def test_a_unit_cost_must_be_finite_seconds(bad):
    with pytest.raises(ConfigError, match="finite number of seconds"):
        units(evaluation=bad)
    with pytest.raises(ConfigError, match="finite number of seconds"):
        RunPrice(bad, 0.1)
    units(evaluation=0.0)  # control: free is a price


def test_a_search_step_is_priced_by_the_measured_evaluation_not_by_forwards():
    n_cal = 4
    step = search_step_seconds(units(proposal=0.1), n_cal, 0.45)
    assert math.isclose(step, n_cal * 0.4 + 0.1)
    # control: a dearer target forward over a window does not change what an evaluation costs ...
    assert math.isclose(search_step_seconds(units(window=9.0, proposal=0.1), n_cal, 0.45), step)
    # ... and the old price (a slim forward over every window, 1 - ratio of the window) is not it
    assert not math.isclose(step, n_cal * 1.0 * (1 - 0.45))


def test_the_search_price_adds_one_step_per_mask_evaluated():
    base = units()
    more = search_seconds(base, 4, 4, (0.45,), 11, 0) - search_seconds(base, 4, 4, (0.45,), 10, 0)
    assert math.isclose(more, search_step_seconds(base, 4, 0.45))
    fixed = search_seconds(base, 4, 4, (0.45,), 0, 0)
    assert math.isclose(fixed, 8 * CALIBRATION_TOKENS * base.step + ratio_fixed_seconds(base, 4, 4))


def test_an_evaluation_at_another_ratio_scales_with_the_layers_that_run():
    base = units(evaluated_ratio=0.45)
    assert math.isclose(base.evaluation_at(0.45), base.evaluation)
    assert base.evaluation_at(0.2) > base.evaluation > base.evaluation_at(0.6)
    assert math.isclose(base.evaluation_at(0.2) / base.evaluation, 0.8 / 0.55)


def test_the_sweep_is_priced_per_token_and_once_per_prompt():
    grid = GridSize(lenience=1, lossy=1)
    short, long = units(tokens=32), units(tokens=64)
    per_prompt_short = tune_seconds(short, grid, 1, 1) - tune_seconds(short, grid, 1, 0)
    per_prompt_long = tune_seconds(long, grid, 1, 1) - tune_seconds(long, grid, 1, 0)
    untiered, tiered = 1 + grid.lenience, grid.points(1) - 1 - grid.lenience
    # 32 more tokens add 32 tokens of every setting and of the reference (the target alone, priced as untiered)
    extra = 32 * ((1 + untiered) * short.untiered.token + tiered * short.tiered.token)
    assert math.isclose(per_prompt_long - per_prompt_short, extra)
    assert per_prompt_long < 2 * per_prompt_short  # control: not the shorter sweep doubled
    assert scaled(short, 64) == long


def test_the_tuners_ratio_search_is_priced_per_measured_step():
    base = units()
    assert math.isclose(ratio_search_seconds(base, 0.3, 7) - ratio_search_seconds(base, 0.3, 6),
                        search_step_seconds(base, 8, 0.3))


def test_the_units_in_words_name_each_measured_unit():
    words = units_words(units())
    assert "a mask evaluation 0.40s per window" in words and "4.00s + 250 ms/token untiered" in words
    assert "5.00s + 500 ms/token tiered" in words


def test_the_probe_windows_have_the_searchs_shape():
    windows = probe_windows(list(range(1, 100)), prompt_tokens=64, new_tokens=48, count=2)
    assert tuple(windows.input_ids.shape) == (2, 112) and windows.num_scored == 2 * 48
    assert bool(windows.scored[0, 63]) and not bool(windows.scored[0, 62]) and not bool(windows.scored[0, 111])
    short = probe_windows([5, 6, 7], prompt_tokens=64, new_tokens=8, count=1)  # a short prompt is kept whole
    assert tuple(short.input_ids.shape) == (1, 11) and short.num_scored == 8


def test_the_price_lists_price_follows_what_the_sweep_times():
    """The sweep's price list is priced by the rounds, tries and passes the sweep times: one more
    mask adds its slim and resumed passes in every try of every round."""
    from viasd_adapt.bench.costs import FASTEST_OF
    from viasd_adapt.tuning.budget_plan import COST_REPEATS, COST_TRIES, MASK_PASSES
    from viasd_adapt.tuning.grid import TuneConfig

    assert (COST_REPEATS, COST_TRIES) == (TuneConfig().cost_repeats, FASTEST_OF)
    grid, base = GridSize(lenience=1, lossy=1), units()
    more = tune_seconds(base, grid, 2, 0) - tune_seconds(base, grid, 1, 0)
    assert math.isclose(more, COST_REPEATS * COST_TRIES * MASK_PASSES * base.step)


def test_a_calibration_prompt_is_priced_by_its_measured_greedy_continuation():
    """The search's greedy calibration runs the target with its cache: a prompt's prefill once, then
    each token. Priced from the probe's greedy runs, not as one bare decode step per token."""
    greedy = RunPrice.fitted((2, 1.5 + 2 * 0.6), (10, 1.5 + 10 * 0.6), 0.0)
    measured, bare = units(greedy=greedy), units()
    assert math.isclose(measured.calibration_prompt(), 1.5 + CALIBRATION_TOKENS * 0.6)
    assert math.isclose(bare.calibration_prompt(), CALIBRATION_TOKENS * bare.step)  # control: no greedy unit
    per_prompt = search_seconds(measured, 5, 4, (0.45,), 0, 0) - search_seconds(measured, 4, 4, (0.45,), 0, 0)
    assert math.isclose(per_prompt, measured.calibration_prompt() + ratio_fixed_seconds(measured, 1, 0))
    assert "a greedy calibration token 600 ms" in units_words(measured) and "greedy" not in units_words(bare)


def test_a_setting_is_priced_at_the_length_of_the_prompts_the_sweep_runs():
    """The probe runs one prompt; the sweep's prompts may be ten times longer (a summary). A
    setting's per-prompt part (a prefill over the prompt, a scoring over it and the output) is priced
    in proportion to the positions it covers; a generated token's price stays."""
    base = units(tokens=32)
    long = base.at_prompt_lengths([1000, 40, 60, 100], probed=88)  # mean 300 against the probe's 88
    assert math.isclose(long.untiered.prompt, base.untiered.prompt * (300 + 32) / (88 + 32))
    assert math.isclose(long.tiered.prompt, base.tiered.prompt * (300 + 32) / (88 + 32))
    assert (long.untiered.token, long.tiered.token) == (base.untiered.token, base.tiered.token)
    assert long.sd_point > base.sd_point
    same = base.at_prompt_lengths([88, 88], probed=88)  # control: prompts as long as the probe's
    assert math.isclose(same.sd_point, base.sd_point) and math.isclose(same.tier_point, base.tier_point)
    assert base.at_prompt_lengths([], probed=88) == base
