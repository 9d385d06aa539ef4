"""Copies of one prompt are one prompt of evidence, in the bench's verdict and the tuner's choice:
the bench rows and the tune points record each prompt's key (``per_prompt.keys``), and the
bootstrap pools the copies (:mod:`viasd_adapt.bench.uncertainty`)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from viasd_adapt.bench.uncertainty import prompt_key
from viasd_adapt.cli.main import cli


def test_a_bench_over_six_copies_of_one_prompt_is_undetermined_at_one_distinct_prompt(tmp_path, char_pair):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("def add(a, b):\n" * 6)
    out = tmp_path / "bench.json"
    res = CliRunner().invoke(cli, ["bench", "--pair", str(char_pair), "--prompts", str(prompts), "--max-new-tokens", "4",
                                   "--repeats", "1", "--frameworks", "hf", "--modes", "lenient", "--task-prompts", "0",
                                   "--json", str(out)])
    assert res.exit_code == 0, res.output
    (line,) = [line for line in res.output.splitlines() if line.strip().startswith("hf: cheapest")]
    assert "etermined at 6 prompts" not in line  # what it said when every copy counted as evidence
    assert "ndetermined at 1 prompt (distinct)" in line, line
    assert "5 copies of other prompts counted once" in line and "fewer than 5 distinct prompts" in line
    rows = json.loads(out.read_text())["rows"]
    key = rows[0]["per_prompt"]["keys"][0]
    assert all(row["per_prompt"]["keys"] == [key] * 6 for row in rows if row.get("per_prompt"))
    assert len(key) == 16


def test_the_tuners_choice_counts_copies_of_a_calibration_prompt_once(char_pair):
    from viasd_adapt.config.budget import Budget
    from viasd_adapt.models.pair import load_pair
    from viasd_adapt.tuning.tune import TuneGrid, choice_uncertainty, describe, tune

    pair = load_pair(char_pair / "target", char_pair / "draft", char_pair / "mask.json", device="cpu")
    grid = TuneGrid(alpha1=(0.5,), alpha2=(0.3,), lenience=(0.4,), greedy_gates=("proposer",), gamma=3)
    result = tune(pair, ["def add(a, b):"] * 6, max_new_tokens=4, grid=grid, budget=Budget(), cost_repeats=2)
    ids = pair.tokenizer("def add(a, b):")["input_ids"]
    assert all(p.per_prompt["keys"] == [prompt_key(ids)] * 6 for p in result.points)
    uncertainty = choice_uncertainty(result)
    assert uncertainty.copies == 5 and uncertainty.prompts == 1 and not uncertainty.determined
    (line,) = [line for line in describe(result) if line.startswith("UNCERTAINTY")]
    assert "undetermined at 1 prompt (distinct)" in line and "5 copies" in line
