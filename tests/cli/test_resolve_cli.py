"""The resolver through the CLI: ``viasd generate --explain`` prints where each setting came from
(and still generates), and ``viasd generate`` / ``viasd bench`` read the pair's tuned.json once."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests.support.loads import count_loads
from tests.support.tuned import LENIENT
from viasd_adapt.cli.main import cli
from viasd_adapt.config.tuned import TunedSettings
from viasd_adapt.core.settings import CONSERVATIVE


@pytest.fixture()
def pair(tuned_pair):
    """A char pair with a mask and a tuned.json beside it (tests/conftest.py builds it once)."""
    return tuned_pair


@pytest.fixture()
def reads(monkeypatch):
    return count_loads(monkeypatch, TunedSettings)


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_explain_prints_each_setting_with_its_source_and_still_generates(pair, tmp_path):
    out = tmp_path / "out.json"
    result = invoke("generate", "--pair", pair, "--framework", "hf", "--lenience", 0.2, "--prompt", "def f(x):",
                    "--max-new-tokens", 3, "--no-color", "--explain", "--json", out)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    table = {line.split()[0]: line for line in lines if line.startswith("  ")}
    assert "flag --lenience" in table["lenience"] and "0.2" in table["lenience"]
    assert str(pair / "tuned.json") in table["mode"] and "lenient" in table["mode"]
    assert str(pair / "tuned.json") in table["alpha1"] and str(LENIENT.alpha1) in table["alpha1"]
    assert "tuned.json" in table["beta"]  # the tuned file records every field, so every field not flagged comes from it
    assert any(line.startswith(f"mask: {pair / 'mask.json'}") for line in lines)
    assert "measured on the engine framework" in result.output
    assert "--framework hf runs settings measured on the engine framework's loop" in result.output
    assert "[hf / lenient]" in result.output and json.loads(out.read_text())["settings"]["lenience"] == 0.2


def test_explain_names_where_the_adaptive_flag_came_from(pair):
    """A tuned file states ``adaptive`` only when its choice ran the tier on every cycle (on is the
    default, what files written before the setting mean): here it is the default, and the flag wins."""
    for flags, value, source in (((), "True", "default"), (("--no-adaptive",), "False", "flag --adaptive"),
                                 (("--adaptive",), "True", "flag --adaptive")):
        result = invoke("generate", "--pair", pair, "--framework", "engine", "--mode", "lossless", *flags, "--prompt", "x",
                        "--max-new-tokens", 2, "--no-color", "--explain")
        assert result.exit_code == 0, result.output
        table = {line.split()[0]: line for line in result.output.splitlines() if line.startswith("  ")}
        assert table["adaptive"].split()[1:3] == [value, source.split()[0]] and source in table["adaptive"], flags


def test_generate_takes_the_preset_layer_its_explain_names(pair):
    result = invoke("generate", "--pair", pair, "--framework", "engine", "--mode", "lossy", "--preset", "conservative",
                    "--alpha1", 0.3, "--prompt", "x", "--max-new-tokens", 2, "--no-color", "--explain")
    assert result.exit_code == 0, result.output
    table = {line.split()[0]: line for line in result.output.splitlines() if line.startswith("  ")}
    assert "preset conservative" in table["alpha2"] and f" {CONSERVATIVE['alpha2']} " in table["alpha2"]
    assert "flag --alpha1" in table["alpha1"] and " 0.3 " in table["alpha1"]  # a flag still beats the preset
    assert "< preset <" in result.output
    refused = invoke("generate", "--pair", pair, "--preset", "fast", "--prompt", "x")
    assert refused.exit_code == 2 and "'fast' is not one of 'default', 'conservative'" in refused.output


def test_without_explain_nothing_about_sources_is_printed(pair):
    result = invoke("generate", "--pair", pair, "--framework", "engine", "--prompt", "x", "--max-new-tokens", 2, "--no-color")
    assert result.exit_code == 0, result.output
    assert "flag --" not in result.output and "measured on" not in result.output


def test_generate_reads_tuned_json_once(pair, reads):
    result = invoke("generate", "--pair", pair, "--framework", "hf", "--prompt", "x", "--max-new-tokens", 2, "--no-color")
    assert result.exit_code == 0, result.output
    assert reads == [str(pair / "tuned.json")]


def test_bench_reads_tuned_json_once(pair, reads, tmp_path):
    out = tmp_path / "bench.json"
    result = invoke("bench", "--pair", pair, "--frameworks", "hf", "--modes", "lenient,lossy", "--repeats", 1,
                    "--num-prompts", 1, "--max-new-tokens", 2, "--task-prompts", 0, "--json", out)
    assert result.exit_code == 0, result.output
    assert reads == [str(pair / "tuned.json")]
    assert "tiered rows: the tuner's best VIA-SD point" in result.output  # the bench layer was applied
    data = json.loads(out.read_text())
    assert data["run"]["tuned"]["choice"] == "lenient" and data["run"]["settings"]["alpha1"] == 0.1


def test_bench_max_overrule_enters_the_verdict(pair, tmp_path):
    out = tmp_path / "bench.json"
    result = invoke("bench", "--pair", pair, "--frameworks", "hf", "--modes", "lenient", "--repeats", 1,
                    "--num-prompts", 1, "--max-new-tokens", 2, "--task-prompts", 0, "--max-overrule", 0.5, "--json", out)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["run"]["max_overrule"] == 0.5
    # a busy machine adds one line about the price list's spread (tests/bench/test_price_spread_line.py): not a verdict
    verdicts = [line for line in data["run"]["verdict"] if not line.startswith("BUSY MACHINE")]
    assert verdicts and all("an overrule rate of 0.5" in line for line in verdicts)


def test_one_pair_option_for_every_command(pair):
    from viasd_adapt.cli.options import PAIR_HELP, choose_pair
    from viasd_adapt.errors import ConfigError

    choice = choose_pair(str(pair), None, "prompt-lookup")
    assert choice.target == pair / "target" and choice.draft == "prompt-lookup" and choice.mask == pair / "mask.json"
    with pytest.raises(ConfigError, match="either --pair or --target"):
        choose_pair(str(pair), pair / "target", None)
    assert choose_pair(None, pair / "target", pair / "draft").paths is None
    for command in ("generate", "bench", "tune", "search"):  # the one option, one help text
        assert PAIR_HELP in " ".join(CliRunner().invoke(cli, [command, "--help"]).output.split())


@pytest.fixture()
def mask_reads(monkeypatch):
    from viasd_adapt.config.mask import MaskArtifact

    return count_loads(monkeypatch, MaskArtifact)


@pytest.mark.parametrize("mode, reads", [("lossy", 1), ("lenient", 0)])  # lenient needs no slim verifier
def test_generate_reads_the_mask_at_most_once(pair, mask_reads, mode, reads):
    result = invoke("generate", "--pair", pair, "--framework", "hf", "--mode", mode, "--prompt", "x",
                    "--max-new-tokens", 2, "--no-color")
    assert result.exit_code == 0, result.output
    assert mask_reads == [str(pair / "mask.json")] * reads


def test_bench_reads_the_mask_once(pair, mask_reads, tmp_path):
    result = invoke("bench", "--pair", pair, "--frameworks", "hf", "--modes", "lenient,lossy", "--repeats", 1,
                    "--num-prompts", 1, "--max-new-tokens", 2, "--task-prompts", 0, "--json", tmp_path / "b.json")
    assert result.exit_code == 0, result.output
    assert mask_reads.count(str(pair / "mask.json")) == 1, mask_reads


def _rewrite_tuned(pair, **changes) -> None:
    data = json.loads((pair / "tuned.json").read_text())
    data.update(changes)
    (pair / "tuned.json").write_text(json.dumps(data))


def test_a_lenient_choice_without_a_lenience_runs_the_default_said_as_the_default(pair, tmp_path):
    from viasd_adapt.core.settings import TierSettings
    from viasd_adapt.serving.config import parse_request

    _rewrite_tuned(pair, settings={"mode": "lenient"})
    out = tmp_path / "out.json"
    result = invoke("generate", "--pair", pair, "--framework", "engine", "--prompt", "def f(x):", "--max-new-tokens", 2,
                    "--no-color", "--explain", "--json", out)
    assert result.exit_code == 0, result.output
    table = {line.split()[0]: line for line in result.output.splitlines() if line.startswith("  ")}
    assert str(pair / "tuned.json") in table["mode"] and "lenient" in table["mode"]  # what the file states
    assert table["lenience"].split()[1:] == [str(TierSettings().lenience), "default"]  # what it leaves out
    assert "tuned.json" not in table["beta"]
    ran = json.loads(out.read_text())["settings"]["lenience"]
    # the vLLM plugin reads the same file the same way: one tolerance, wherever it runs
    assert ran == parse_request({"viasd": {"tuned": str(pair / "tuned.json")}}).lenience == 0.5


def test_a_bogus_measured_on_is_refused_by_name_before_any_model_loads(pair):
    _rewrite_tuned(pair, measured_on="a GPU somewhere")
    result = invoke("generate", "--pair", pair, "--framework", "hf", "--prompt", "x", "--max-new-tokens", 2, "--explain")
    assert result.exit_code == 2, result.output
    assert str(pair / "tuned.json") in result.output and "'measured_on' must name the framework" in result.output
    assert "measured on the a GPU somewhere framework" not in result.output


def test_a_tuned_choice_of_ar_runs_the_target_alone_and_says_why_in_one_line(pair, reads):
    """tuned.json's choice ``ar`` (the target alone was cheapest when tuned): ``viasd generate --pair``
    runs it, with one note and the tune's figures. Asking to draft (a framework, a mode, a tier
    setting) drafts anyway, with the file's drafting settings. Control: the file's own choice
    (lenient) drafts by default."""
    from viasd_adapt.config.tuned import TunedSettings as Tuned

    args = ("generate", "--pair", pair, "--prompt", "def f(x):", "--max-new-tokens", 3, "--no-color")
    control = invoke(*args)
    assert control.exit_code == 0, control.output
    assert "[hf / lenient]" in control.output and "running the target alone" not in control.output
    data = json.loads((pair / "tuned.json").read_text())
    data["choice"] = "ar"
    data["measured"] = {"full_equivalent": 0.8}
    data["report"]["costs"] = {"None": {"c_full": 0.3, "c_full_block": 1.0, "c_slim": None, "c_resume": None, "c_draft": 0.1}}
    Tuned.from_json(data).save(pair / "tuned.json")
    reads.clear()
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert "[ar / none] 3 tokens" in result.output
    assert reads == [str(pair / "tuned.json")]  # read once, though the run is resolved again for ar
    notes = [line for line in result.output.splitlines() if line.startswith("note: running the target alone")]
    assert len(notes) == 1 and "0.300 full-equivalent passes/token against 0.800" in notes[0], result.output
    for flags in (("--framework", "hf"), ("--mode", "lossless"), ("--gamma", 2)):
        drafted = invoke(*args, *flags)
        assert drafted.exit_code == 0, drafted.output
        assert "[hf /" in drafted.output and "running the target alone" not in drafted.output, flags
