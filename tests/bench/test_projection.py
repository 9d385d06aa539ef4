"""``--costs``: measured pass counts priced with another machine's forward costs (viasd_adapt.bench.projection)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from viasd_adapt.bench.projection import CostModel, load_cost_model, project_rows
from viasd_adapt.errors import ConfigError
from viasd_adapt.config.mask import RoutingMask


def test_a_shipped_cost_model_prices_passes_by_the_layers_they_run():
    model = load_cost_model("h200-llama2-7b")
    assert model.block_over_single == 1.09 and model.slim_ratio == 0.45
    assert model.overhead == pytest.approx((0.59 - 0.55) / 0.45)
    same_ratio = model.forward_costs(RoutingMask.from_skipped(20, list(range(11, 20))), 6)  # 9 of 20 skipped, s1 = 11
    assert same_ratio.c_slim == pytest.approx(0.59)  # the file's own measurement is reproduced
    assert same_ratio.c_resume == pytest.approx(model.overhead + (1 - model.overhead) * 9 / 20)
    assert same_ratio.c_full == pytest.approx(1 / 1.09) and same_ratio.c_draft == pytest.approx(0.11 / 1.09)
    assert model.forward_costs(RoutingMask.from_skipped(20, [0, 5]), 6).c_resume is None  # s1 = 0: q cannot resume


def test_projected_rows_by_hand():
    model = CostModel("gpu", block_over_single=1.0, slim_over_block=0.5, slim_ratio=0.5)
    rows = [
        {"framework": "ar", "mode": "-", "full_passes_per_token": 1.0, "full_equivalent_per_token": 0.6},
        {"framework": "hf", "mode": "none", "full_passes_per_token": 0.4, "draft_passes_per_token": 0.0,
         "slim_passes_per_token": 0.0, "resumed_passes_per_token": 0.0, "full_equivalent_per_token": 0.7},
        {"framework": "hf", "mode": "lossy", "full_passes_per_token": 0.2, "resumed_passes_per_token": 0.2,
         "slim_passes_per_token": 0.3, "draft_passes_per_token": 0.0, "full_equivalent_per_token": 0.8},
    ]
    mask = RoutingMask.from_skipped(10, [5, 6, 7, 8, 9])  # s1 = 5: resumed passes run half the layers
    ar, none, lossy = project_rows(rows, model, mask, 6)
    assert ar["full_equivalent_per_token"] == pytest.approx(1.0) and ar["projected_speedup_vs_ar"] == pytest.approx(1.0)
    assert none["full_equivalent_per_token"] == pytest.approx(0.4) and none["projected_speedup_vs_ar"] == pytest.approx(2.5)
    assert lossy["full_equivalent_per_token"] == pytest.approx(0.3 * 0.5 + 0.2 * 0.5)
    assert lossy["measured_full_equivalent_per_token"] == 0.8


def test_bad_cost_files_are_refused_by_name(tmp_path):
    with pytest.raises(ConfigError, match="shipped: h200-llama2-13b, h200-llama2-7b"):
        load_cost_model("a100")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "viasd-adapt/forward-costs", "block_over_single": "fast"}))
    with pytest.raises(ConfigError, match="'block_over_single' must be a positive number"):
        load_cost_model(bad)
    bad.write_text(json.dumps({"format": "viasd-adapt/forward-costs", "block_over_single": 1.1, "slim_over_block": 0.5}))
    with pytest.raises(ConfigError, match="needs 'slim_ratio'"):
        load_cost_model(bad)
    bad.write_text(json.dumps({"block_over_single": 1.1}))
    with pytest.raises(ConfigError, match="not a viasd-adapt/forward-costs file"):
        load_cost_model(bad)


def test_bench_prints_the_projected_verdict_beside_the_measured_one(char_pair, tmp_path):
    from viasd_adapt.cli.main import cli

    out = tmp_path / "bench.json"
    result = CliRunner().invoke(cli, ["bench", "--pair", str(char_pair), "--frameworks", "hf", "--modes", "none,lenient,lossy",
                                      "--num-prompts", "1", "--max-new-tokens", "6", "--repeats", "1", "--task-prompts", "0",
                                      "--costs", "h200-llama2-7b", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "PROJECTION, not a measurement" in result.output and "projected: hf:" in result.output
    projection = json.loads(out.read_text())["run"]["projection"]
    assert projection["cost_model"]["block_over_single"] == 1.09 and projection["verdict"]
    assert {r["mode"] for r in projection["rows"]} >= {"-", "none", "lenient", "lossy"}
    refused = CliRunner().invoke(cli, ["bench", "--pair", str(char_pair), "--costs", "a100"])
    assert refused.exit_code == 2 and "no such file, nor a shipped cost model" in refused.output


def test_a_cost_file_whose_derived_ratios_are_not_finite_is_refused_by_name(tmp_path, char_pair):
    from viasd_adapt.cli.main import cli

    bad = tmp_path / "tiny-block.json"
    bad.write_text(json.dumps({"format": "viasd-adapt/forward-costs", "block_over_single": 1e-310}))
    with pytest.raises(ConfigError, match=rf"cost file {bad}: 'block_over_single' 1e-310 makes a 1-token pass"):
        load_cost_model(bad)  # was accepted, and every projected cost came out nan
    with pytest.raises(ConfigError, match="'block_over_single' 1e-310"):
        CostModel("by hand", block_over_single=1e-310, draft_over_single=0.1)
    model = CostModel("by hand", block_over_single=1e-300, draft_over_single=0.1)  # tiny, yet every price is finite
    costs = model.forward_costs(None, 6)
    assert costs.c_full == pytest.approx(1e300) and costs.c_draft == pytest.approx(1e299)
    for command in ("bench", "tune"):  # refused before any model loads, naming the file and the field
        result = CliRunner().invoke(cli, [command, "--pair", str(char_pair), "--costs", str(bad)])
        assert result.exit_code == 2 and str(bad) in result.output and "'block_over_single'" in result.output, result.output
