"""``viasd demo`` end to end on a tiny random pair, with the smoke-test budget."""

from __future__ import annotations

import json
import re

import pytest
import torch
from click.testing import CliRunner

from viasd_adapt.bench.demo import BUDGET_ENV_VAR, BUDGETS, budget_from_env, tier_string
from viasd_adapt.cli.main import cli
from viasd_adapt.errors import ConfigError
from viasd_adapt.core.tiers import Tier

torch.set_num_threads(1)


def _tier_lines(output: str) -> list[str]:
    return re.findall(r"^tiers: ([DSF]*)$", output, flags=re.M)


def test_demo_runs_end_to_end_with_the_mask(char_pair, tmp_path, monkeypatch):
    monkeypatch.setenv(BUDGET_ENV_VAR, "tiny")
    out_json = tmp_path / "demo.json"
    res = CliRunner().invoke(cli, ["demo", "--pair", str(char_pair), "--json", str(out_json)])
    assert res.exit_code == 0, res.output
    for mode in ("none", "lenient", "lossless", "lossy", "audit"):
        assert f"--- {mode} ---" in res.output
    lines = _tier_lines(res.output)
    assert len(lines) == 5 and all(len(line) == BUDGETS["tiny"].completion_tokens for line in lines)
    assert "S" not in lines[0] and "S" not in lines[1]  # modes none and lenient never use the slim verifier
    assert "FALLBACK" not in res.output and "mask.json" in res.output
    data = json.loads(out_json.read_text())
    modes = {(r["framework"], r["mode"]) for r in data["rows"]}
    assert {("ar", "-"), ("hf", "none"), ("hf", "lossy"), ("pearl", "audit")} <= modes
    assert "hf/lossy" in res.output  # the table is printed
    # one prompt settles nothing: the verdict says so and the demo calls itself a preview
    assert "preview on 1 prompt: undetermined for hf, pearl" in res.output and "Undetermined at 1 prompt " in res.output


def test_demo_without_mask_says_so_and_uses_the_labelled_fallback(char_pair):
    pair = char_pair
    (pair / "mask.json").unlink()
    res = CliRunner().invoke(cli, ["demo", "--pair", str(pair), "--quick", "--frameworks", "hf"])
    assert res.exit_code == 0, res.output
    assert "no mask.json shipped with this pair" in res.output
    assert "FALLBACK fixed mask" in res.output
    assert len(_tier_lines(res.output)) == 5


def test_tier_string_has_one_letter_per_token():
    assert tier_string([int(Tier.DRAFT), int(Tier.SLIM), int(Tier.FULL), int(Tier.DRAFT)]) == "DSFD"


def test_bad_budget_name_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(BUDGET_ENV_VAR, "huge")
    with pytest.raises(ConfigError, match=BUDGET_ENV_VAR):
        budget_from_env()
    assert budget_from_env(quick=True) == BUDGETS["tiny"]


def test_demo_with_an_unknown_pair_fails_cleanly():
    res = CliRunner().invoke(cli, ["demo", "--pair", "no-such-pair-xyz", "--quick"])
    assert res.exit_code == 2 and "no model pair named" in res.output
