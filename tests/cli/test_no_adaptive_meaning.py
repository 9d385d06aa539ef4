"""``--no-adaptive`` means one thing in every command: the tier on every cycle.

``viasd generate --no-adaptive`` runs it, ``viasd tune --no-adaptive`` measures only it, and
``viasd bench --no-adaptive`` runs the lossless and lossy rows with it (their -fixed rows). The
bench's older meaning (leave out the fixed rows) is ``--no-fixed-twins``, and the bench says so
when the flag is given.
"""

from __future__ import annotations

import json

from click.testing import CliRunner

from viasd_adapt.cli.bench import NO_ADAPTIVE_NOTICE
from viasd_adapt.cli.main import cli


def _modes(char_pair, tmp_path, flag):
    out = tmp_path / f"bench{flag}.json"
    result = CliRunner().invoke(cli, ["bench", "--pair", str(char_pair), "--frameworks", "hf", "--modes", "none,lossless",
                                      "--num-prompts", "1", "--max-new-tokens", "4", "--repeats", "1", "--task-prompts", "0",
                                      flag, "--json", str(out)])
    assert result.exit_code == 0, result.output
    rows = json.loads(out.read_text())["rows"]
    return {r["mode"] for r in rows if r["framework"] == "hf"}, result.output


def test_bench_no_adaptive_runs_the_tier_on_every_cycle_and_no_fixed_twins_leaves_the_twins_out(char_pair, tmp_path):
    modes, output = _modes(char_pair, tmp_path, "--no-adaptive")
    assert "lossless-fixed" in modes and "lossless" not in modes
    assert NO_ADAPTIVE_NOTICE in output
    modes, output = _modes(char_pair, tmp_path, "--no-fixed-twins")  # the control: the older meaning, by its own name
    assert "lossless" in modes and "lossless-fixed" not in modes
    assert NO_ADAPTIVE_NOTICE not in output
