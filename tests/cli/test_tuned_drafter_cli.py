"""Tuned settings belong to a pair, not a target: tuned.json records the drafter it was measured
with, and a run with another drafter does not apply it (a TunedForAnotherDrafterWarning, and
``--explain`` says "not applied: measured with another drafter"). Through the CLI."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from tests.support.pairs import CHAR_VOCAB, char_tokenizer
from viasd_adapt.cli.main import cli
from viasd_adapt.config.tuned import PROMPT_LOOKUP_DRAFTER, TunedForAnotherDrafterWarning, TunedSettings
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.routing.mask import model_fingerprint


ANOTHER_DRAFTER = r"measured with another drafter"


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _record_drafter(pair, drafter) -> None:
    """The tuned file of ``pair`` (tests/support/tuned.py: a lenient choice), with a drafter record."""
    data = json.loads((pair / "tuned.json").read_text())
    data["drafter"] = drafter
    (pair / "tuned.json").write_text(json.dumps(data))


def _own_drafter_fingerprint(pair):
    from transformers import AutoModelForCausalLM

    return model_fingerprint(AutoModelForCausalLM.from_pretrained(pair / "draft", dtype=torch.float32))


@pytest.fixture()
def pair(tuned_pair):
    _record_drafter(tuned_pair, _own_drafter_fingerprint(tuned_pair))
    return tuned_pair


def _table(output):
    return {line.split()[0]: line for line in output.splitlines() if line.startswith("  ")}


def generate(pair, *extra, framework="engine"):
    return invoke("generate", "--pair", pair, "--framework", framework, "--prompt", "def f(x):", "--max-new-tokens", 3,
                  "--no-color", "--explain", *extra)


def test_the_pairs_own_drafter_runs_the_tuned_choice(pair):
    result = generate(pair)
    assert result.exit_code == 0, result.output
    assert "choice lenient, applied" in result.output and "[engine / lenient]" in result.output
    assert "tuned settings' drafter: the run's drafter" in result.output


@pytest.mark.parametrize("framework", ["engine", "hf"])
def test_prompt_lookup_in_place_of_the_measured_drafter_runs_the_defaults_and_says_so(pair, framework):
    with pytest.warns(TunedForAnotherDrafterWarning, match=rf"tuned.json was {ANOTHER_DRAFTER}: a drafter model .* "
                                                           r"this run drafts with prompt lookup; its settings are not applied"):
        result = generate(pair, "--draft", PROMPT_LOOKUP_DRAFTER, framework=framework)
    assert result.exit_code == 0, result.output
    assert f"not applied: {ANOTHER_DRAFTER}" in result.output
    table = _table(result.output)
    assert table["mode"].split()[1:] == ["lossy", "default"] and table["lenience"].split()[1:] == ["0.5", "default"]
    assert f"[{framework} / lossy]" in result.output


def test_another_drafter_model_of_the_same_target_runs_the_defaults(pair, tmp_path):
    other = tmp_path / "other-draft"
    tiny_model("llama", seed=5, num_layers=1, vocab_size=CHAR_VOCAB).save_pretrained(other)
    char_tokenizer().save_pretrained(other)
    with pytest.warns(TunedForAnotherDrafterWarning, match="this run's drafter model is not the one recorded"):
        result = generate(pair, "--draft", other)
    assert result.exit_code == 0, result.output
    assert f"not applied: {ANOTHER_DRAFTER}" in result.output and "[engine / lossy]" in result.output


def test_settings_measured_with_prompt_lookup_apply_to_prompt_lookup_only(pair):
    _record_drafter(pair, PROMPT_LOOKUP_DRAFTER)
    result = generate(pair, "--draft", PROMPT_LOOKUP_DRAFTER)
    assert result.exit_code == 0, result.output
    assert "choice lenient, applied" in result.output
    with pytest.warns(TunedForAnotherDrafterWarning, match="measured with another drafter: prompt lookup"):
        result = generate(pair)
    assert f"not applied: {ANOTHER_DRAFTER}" in result.output


def test_an_older_file_without_a_drafter_record_is_applied_and_says_it_was_not_checked(tuned_pair):
    assert "drafter" not in json.loads((tuned_pair / "tuned.json").read_text())
    result = generate(tuned_pair, "--draft", PROMPT_LOOKUP_DRAFTER)
    assert result.exit_code == 0, result.output
    assert "choice lenient, applied" in result.output and "[engine / lenient]" in result.output
    assert "tuned settings' drafter: not recorded" in result.output


def test_the_bench_with_another_drafter_does_not_run_the_tuned_points(pair, tmp_path):
    out = tmp_path / "bench.json"
    with pytest.warns(TunedForAnotherDrafterWarning):
        result = invoke("bench", "--pair", pair, "--draft", PROMPT_LOOKUP_DRAFTER, "--frameworks", "engine", "--modes",
                        "lenient", "--repeats", 1, "--num-prompts", 1, "--max-new-tokens", 2, "--task-prompts", 0,
                        "--json", out)
    assert result.exit_code == 0, result.output
    assert f"beside the mask NOT applied: {ANOTHER_DRAFTER}" in result.output
    assert json.loads(out.read_text())["run"]["settings"]["lenience"] == 0.5  # the default, not the best lenient point


def test_tune_records_the_drafter_it_measured_with(tmp_path, char_pair_copy):
    pair = char_pair_copy
    result = invoke("tune", "--pair", pair, "--alpha1", "0", "--alpha2", "0.2", "--lenience", "0.3", "--greedy-gates", "top",
                    "--prompts", 2, "--max-new-tokens", 4, "--gamma", 3)
    assert result.exit_code == 0, result.output
    tuned = TunedSettings.load(pair / "tuned.json")
    assert tuned.drafter is not None and tuned.drafter.as_dict() == _own_drafter_fingerprint(pair)
    assert tuned.drafter.as_dict() != tuned.fingerprint.as_dict()  # the drafter's, not the target's
    looked_up = pair.parent / "lookup"
    import shutil

    shutil.copytree(pair, looked_up)
    (looked_up / "tuned.json").unlink()
    result = invoke("tune", "--pair", looked_up, "--draft", PROMPT_LOOKUP_DRAFTER, "--alpha1", "0", "--alpha2", "0.2",
                    "--lenience", "0.3", "--greedy-gates", "top", "--prompts", 2, "--max-new-tokens", 4, "--gamma", 3)
    assert result.exit_code == 0, result.output
    assert TunedSettings.load(looked_up / "tuned.json").drafter == PROMPT_LOOKUP_DRAFTER


@pytest.fixture()
def char_pair_copy(tmp_path):
    from tests.support.pairs import save_char_pair

    return save_char_pair(tmp_path / "pair", with_mask=True)


def test_the_shipped_tuned_files_record_their_pairs_drafter():
    from viasd_adapt.models.registry import shipped_dir

    for name in ("demo", "demo-ee", "smollm2"):
        tuned = TunedSettings.load(shipped_dir() / name / "tuned.json")
        assert tuned.drafter is not None and tuned.drafter.num_layers is not None, name
        assert tuned.drafter.as_dict() != tuned.fingerprint.as_dict(), name
    from transformers import AutoModelForCausalLM

    demo = AutoModelForCausalLM.from_pretrained(shipped_dir() / "demo" / "draft", dtype=torch.float32)
    from viasd_adapt.routing.mask import model_mismatches

    assert model_mismatches(TunedSettings.load(shipped_dir() / "demo" / "tuned.json").drafter, demo) == []


def test_the_demo_pairs_choice_runs_with_its_drafter_not_with_another_or_with_eagle():
    from tests.support.tuned import shipped_tuned

    choice = shipped_tuned("demo").choice  # whatever viasd tune last wrote for the pair
    result = invoke("generate", "--framework", "engine", "--prompt", "def f(x):", "--max-new-tokens", 3, "--no-color",
                    "--explain")
    assert result.exit_code == 0, result.output
    assert f"choice {choice}, applied" in result.output and "tuned settings' drafter: the run's drafter" in result.output
    with pytest.warns(TunedForAnotherDrafterWarning, match="this run drafts with prompt lookup"):
        result = invoke("generate", "--framework", "engine", "--draft", PROMPT_LOOKUP_DRAFTER, "--prompt", "def f(x):",
                        "--max-new-tokens", 3, "--no-color", "--explain")
    assert result.exit_code == 0, result.output
    assert f"not applied: {ANOTHER_DRAFTER}" in result.output


def test_eagle_does_not_run_a_choice_measured_with_a_drafter_model():
    pytest.importorskip("eagle.model.ea_model")
    with pytest.warns(TunedForAnotherDrafterWarning, match="this run drafts with its EAGLE head"):
        result = invoke("generate", "--framework", "eagle", "--mode", "none", "--prompt", "def f(x):", "--max-new-tokens",
                        3, "--no-color", "--explain")
    assert result.exit_code == 0, result.output
    assert f"not applied: {ANOTHER_DRAFTER}" in result.output and "[eagle / none]" in result.output
