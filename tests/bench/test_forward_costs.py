"""benchmarks/forward_costs.py on the CPU with a tiny shape: the table's structure and what sharing
saves, counted in decoder-layer calls (never in time: timings are for the GPU run)."""

from __future__ import annotations

import importlib.util
import json


from tests.support import REPO_ROOT


def load_script():
    path = REPO_ROOT / "benchmarks" / "forward_costs.py"
    spec = importlib.util.spec_from_file_location("forward_costs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cost_table_structure_and_resumed_passes_run_only_layers_from_s1(tmp_path, capsys):
    out = tmp_path / "costs.json"
    result = load_script().main(["--shapes", "tiny", "--drafter", "tiny=tiny", "--context", "16", "--repeats", "1",
                                 "--attn", "eager", "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    assert "resumed_full_block" in capsys.readouterr().out
    (shape,) = result["shapes"]
    layers, skipped = shape["layers"], shape["skipped"]
    assert (layers, skipped, result["block"]) == (8, 4, 6)
    rows = {(r["row"], r["s1"]): r for r in shape["rows"]}
    assert rows[("full_block", None)]["fraction_of_full_block"] == 1.0
    assert rows[("full_token", None)]["layers_run"] == rows[("full_block", None)]["layers_run"] == layers
    assert all(r["ms"] > 0 and r["fraction_of_full_block"] > 0 for r in shape["rows"])
    assert rows[("draft_token", None)]["ms"] == rows[("full_token", None)]["ms"]  # tiny drafting for tiny
    slim_rows = [r for r in shape["rows"] if r["row"] in ("slim_block", "shared_slim_block")]
    assert all(r["layers_run"] == layers - skipped for r in slim_rows)
    # s1 in {1, L/4, L/2, 3L/4} = {1, 2, 4, 6}; 6 cannot hold 4 contiguous skipped layers -> 4 (early exit)
    resumed = sorted((r["s1"], r["layers_run"]) for r in shape["rows"] if r["row"] == "resumed_full_block")
    assert resumed == [(1, 7), (2, 6), (4, 4)]
    assert all(len(r["skipped"]) == skipped and r["skipped"][0] == r["s1"] for r in shape["rows"] if r["row"] == "resumed_full_block")
