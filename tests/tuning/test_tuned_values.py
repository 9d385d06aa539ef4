"""Values a hand-edited tuned.json can get wrong (viasd_adapt/config/tuned.py's docstring says what
each gets): a missing or empty ``choice`` and forward costs of 0 or less are refused by the file and
the field; priors that are negative or NaN are refused; more cycles than tokens (a prior weight of
1e9) is clamped to the tokens, with a warning. Each case starts from the shipped demo pair's
tuned.json, which loads as it is (the control)."""

from __future__ import annotations

import json
import math
import shutil
import warnings

import pytest
from click.testing import CliRunner

from tests.support import REPO_ROOT
from viasd_adapt.config.tuned import TunedSettings, TunedValueClampedWarning
from viasd_adapt.errors import ConfigError

SHIPPED = REPO_ROOT / "viasd_adapt" / "assets" / "demo" / "tuned.json"


def _shipped() -> dict:
    return json.loads(SHIPPED.read_text())


def _load(tmp_path, data: dict) -> TunedSettings:
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(data))  # NaN is written as the NaN token, which Python's json reads back
    return TunedSettings.load(path)


def test_the_shipped_file_loads_without_a_word(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tuned = _load(tmp_path, _shipped())
    assert tuned.choice and tuned.report.costs["mask.json"]["c_full_block"] > 0
    assert tuned.best("none").metrics["cycles"] == _shipped()["report"]["best_within_budget"]["none"]["metrics"]["cycles"]


@pytest.mark.parametrize("choice", [None, "", "  "], ids=["missing", "empty", "blank"])
def test_a_tuned_file_without_its_choice_is_refused_by_name(tmp_path, choice):
    data = _shipped()
    if choice is None:
        del data["choice"]
    else:
        data["choice"] = choice
    with pytest.raises(ConfigError, match=rf"{tmp_path / 'tuned.json'}: .*'choice'"):
        _load(tmp_path, data)


@pytest.mark.parametrize("field", ["c_full_block", "c_full", "c_slim", "c_resume", "c_draft"])
@pytest.mark.parametrize("value", [0.0, -0.01, math.nan, math.inf])
def test_a_forward_cost_of_zero_or_less_is_refused_by_its_entry_and_field(tmp_path, field, value):
    data = _shipped()
    data["report"]["costs"]["mask.json"][field] = value
    if field == "c_draft" and value == 0.0:  # prompt lookup runs no model: its drafter costs nothing (the control)
        assert _load(tmp_path, data).report.costs["mask.json"]["c_draft"] == 0.0
        return
    with pytest.raises(ConfigError, match=rf"'report\.costs\.mask\.json\.{field}' \(a forward time\) must be a finite"):
        _load(tmp_path, data)


def test_costs_a_file_leaves_out_or_states_as_none_still_load(tmp_path):
    data = _shipped()
    assert data["report"]["costs"]["None"]["c_slim"] is None  # the untiered entry: no slim pass
    del data["report"]["costs"]["mask.json"]["c_full"]
    assert "c_full" not in _load(tmp_path, data).report.costs["mask.json"]


@pytest.mark.parametrize("field, value", [("full_equivalent", -0.5), ("full_equivalent", math.nan),
                                          ("full_equivalent", 0.0), ("mean_accepted_length", -2.0),
                                          ("mean_accepted_length", math.nan), ("cycles", -3), ("cycles", math.nan)])
def test_a_negative_or_nan_prior_is_refused_by_name(tmp_path, field, value):
    data = _shipped()
    point = data["report"]["best_within_budget"]["none"]
    (point if field == "full_equivalent" else point["metrics"])[field] = value
    with pytest.raises(ConfigError, match=rf"field 'report\.best_within_budget\.none(\.metrics)?'?.*{field}"):
        _load(tmp_path, data)


def test_a_prior_weight_of_a_billion_cycles_is_clamped_to_the_points_tokens_with_a_warning(tmp_path):
    data = _shipped()
    point = data["report"]["best_within_budget"]["lossless-fixed"]
    point["metrics"]["cycles"] = 1e9
    with pytest.warns(TunedValueClampedWarning, match=r"tuned\.json: 'report\.best_within_budget\.lossless-fixed\.metrics\."
                                                      r"cycles' 1000000000\.0 is more cycles than the point's 1536 tokens"):
        tuned = _load(tmp_path, data)
    assert tuned.best("lossless-fixed").metrics["cycles"] == point["tokens"] == 1536
    assert tuned.best("none").metrics["cycles"] == data["report"]["best_within_budget"]["none"]["metrics"]["cycles"]


def test_generate_refuses_a_pair_whose_tuned_file_has_no_choice(tmp_path):
    """As a user meets it: ``viasd generate --explain`` on a pair folder whose tuned.json lost its
    ``choice`` (it printed ``(choice )`` and applied the file)."""
    from viasd_adapt.cli.main import cli
    from viasd_adapt.models.registry import demo_pair_paths

    demo = demo_pair_paths()
    pair = shutil.copytree(demo.target.parent, tmp_path / "demo")
    data = json.loads((pair / "tuned.json").read_text())
    del data["choice"]
    (pair / "tuned.json").write_text(json.dumps(data))
    result = CliRunner().invoke(cli, ["generate", "--pair", str(pair), "--explain", "--prompt", "x",
                                      "--max-new-tokens", "1"])
    assert result.exit_code == 2 and "'choice'" in result.output and "Traceback" not in result.output, result.output
