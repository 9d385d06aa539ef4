"""The recipe "Adding a framework" of docs/architecture.md, kept true: a toy framework added from
this module alone (a runner with one seam, and one ``register`` call with its capabilities) runs
end to end through ``viasd generate`` and ``viasd bench``, and the bench's verdict weighs it by
what it declares, never by its name. Each place the recipe names, left out, fails with an error
that names it (the controls)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from click.testing import CliRunner

from viasd_adapt.cli.main import cli
from viasd_adapt.frameworks import registry as frameworks
from viasd_adapt.frameworks.baselines import run_engine
from viasd_adapt.frameworks.requests import RunOutput, RunRequest

#: What the toy's runner adds to its output's notes, so that a test can tell that the toy ran.
TOY_NOTE = "the toy framework ran"
#: The requests the toy's runner was handed, in order.
CALLS: list[RunRequest] = []


def run_toy(pair, request: RunRequest) -> RunOutput:
    """The toy's one seam: ``run(pair, request) -> RunOutput``. It drafts and verifies through the
    engine's loop with the request's own context, and says that it ran."""
    CALLS.append(request)
    out = run_engine(pair, request)
    return replace(out, notes=[*out.notes, TOY_NOTE])


#: The toy, as the recipe registers it: a drafter model or prompt lookup, every tier mode, no EAGLE head.
TOY = frameworks.Framework("toy", "a toy framework (the recipe's test)", f"{__name__}:run_toy", takes_lookup=True,
                           ignores={frameworks.EAGLE_HEAD: "drafts with a drafter model"})


@pytest.fixture(autouse=True)
def _fresh_calls():
    CALLS.clear()
    yield
    assert "toy" not in frameworks.FRAMEWORKS  # every registration of this module is scoped


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def generate(pair, *args):
    return invoke("generate", "--framework", "toy", "--pair", pair, "--prompt", "def f(x):", "--max-new-tokens", 6,
                  "--no-color", *args)


def test_a_registered_framework_runs_through_viasd_generate(char_pair, tmp_path):
    out = tmp_path / "out.json"
    with frameworks.registered(TOY):
        result = generate(char_pair, "--mode", "lossless", "--json", out)
    assert result.exit_code == 0, result.output
    assert [request.mode for request in CALLS] == ["lossless"]  # the toy's runner ran, once, in the mode asked
    assert CALLS[0].context is not None  # with the run's context, as every framework with a tier gets it
    record = json.loads(out.read_text())
    assert record["framework"] == "toy" and len(record["tokens"]) == 6
    assert "[toy / lossless] 6 tokens" in result.output and f"note: {TOY_NOTE}" in result.output


def test_a_registered_framework_gets_rows_and_a_verdict_in_viasd_bench(char_pair, tmp_path):
    out = tmp_path / "bench.json"
    with frameworks.registered(TOY):
        result = invoke("bench", "--pair", char_pair, "--frameworks", "toy", "--modes", "none,lossless", "--no-fixed-twins",
                        "--num-prompts", 2, "--max-new-tokens", 6, "--repeats", 1, "--task-prompts", 0, "--json", out)
    assert result.exit_code == 0, result.output
    rows = {(row["framework"], row["mode"]) for row in json.loads(out.read_text())["rows"]}
    assert {("toy", "none"), ("toy", "lossless")} <= rows and ("ar", "-") in rows
    assert {request.mode for request in CALLS} == {"none", "lossless"}
    assert any(line.strip().startswith("toy: cheapest within") for line in result.output.splitlines())


def test_control_a_framework_left_unregistered_is_refused_by_name(char_pair):
    result = generate(char_pair)
    assert result.exit_code == 2 and "Invalid value for '--framework': 'toy' is not one of" in result.output
    assert "'hf'" in result.output  # the choices are the registry's names
    result = invoke("bench", "--pair", char_pair, "--frameworks", "toy", "--modes", "none", "--num-prompts", 1)
    assert result.exit_code != 0 and "unknown framework 'toy'" in result.output
    assert not CALLS


def test_control_a_capability_left_out_is_refused_with_its_reason(char_pair):
    """Registered without ``takes_lookup``: a run with prompt lookup is refused, saying which frameworks take it."""
    with frameworks.registered(replace(TOY, takes_lookup=False)):
        result = generate(char_pair, "--draft", "prompt-lookup")
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "framework 'toy' cannot run: needs a drafter model; prompt lookup runs in the engine and hf frameworks" \
        in result.output
    assert not CALLS
    with frameworks.registered(TOY):  # with the capability, the same command runs
        assert generate(char_pair, "--draft", "prompt-lookup").exit_code == 0 and len(CALLS) == 1


def test_control_a_runner_left_out_is_refused_by_its_name(char_pair):
    with frameworks.registered(replace(TOY, runner=f"{__name__}:no_such_runner")):
        result = generate(char_pair)
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert f"framework 'toy': its runner '{__name__}:no_such_runner' cannot be loaded" in result.output


def test_the_verdict_weighs_a_framework_by_its_capabilities_not_its_name():
    """A baseline registered under a new name is a candidate of every framework's verdict, with the
    sentence it declares; unregistered, the same rows make it a framework of its own."""
    from viasd_adapt.bench.verdict import verdict

    def row(framework, mode, feq):
        return {"framework": framework, "mode": mode, "full_equivalent_per_token": feq, "ll_drop": 0.0, "regret": 0.0}

    rows = [row("ar", "-", 0.60), row("stocktoy", "plain", 0.40), row("hf", "none", 0.70)]
    baseline = frameworks.Framework("stocktoy", "a toy baseline", f"{__name__}:run_toy", has_plain=True, has_tier=False,
                                    recommendation="Use the toy baseline.")
    with frameworks.registered(baseline):
        (line,) = verdict(rows)
    assert line.startswith("hf: cheapest within") and "is stocktoy (0.400" in line and "Use the toy baseline." in line
    lines = verdict([row("ar", "-", 0.60), row("stocktoy", "none", 0.40), row("hf", "none", 0.70)])  # not registered
    assert [line.split(":")[0] for line in lines] == ["stocktoy", "hf"] and "Use the toy baseline." not in " ".join(lines)


def test_registered_puts_back_what_it_replaced_and_unregister_refuses_an_unknown_name():
    hf = frameworks.get("hf")
    with frameworks.registered(replace(hf, description="another hf")):
        assert frameworks.get("hf").description == "another hf"
    assert frameworks.get("hf") is hf
    with pytest.raises(frameworks.ConfigError, match="unknown framework 'toy'"):
        frameworks.unregister("toy")
    frameworks.register(TOY)
    assert frameworks.unregister("toy") is TOY and "toy" not in frameworks.names()
