"""Reliability through the CLI: every case is a command a new user could
type, and each must either run correctly or stop with one clear line (exit code 2) that names what
is wrong, before any model forward when the problem is in the options."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner

import viasd_adapt
from tests.support.pairs import char_tokenizer
from viasd_adapt.cli.main import cli
from viasd_adapt.errors import ModelMismatchError
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.routing.mask import model_fingerprint
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.config.tuned import TunedSettings, recorded_mask
from viasd_adapt.config.resolve import tuned_mask_path


@pytest.fixture()
def pair(char_pair):
    """A private copy (commands and tests write beside the mask)."""
    return char_pair


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def refused(result, *needles):
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    for needle in needles:
        assert needle in result.output, (needle, result.output)


def files(pair, mask=True):
    return ["--target", pair / "target", "--draft", pair / "draft"] + (["--mask", pair / "mask.json"] if mask else [])


def test_a_prompt_ending_in_eos_generates_on_every_framework(pair, tmp_path):
    eos = char_tokenizer().eos_token
    tokens = {}
    for framework, mode in (("ar", "none"), ("hf", "none"), ("hf", "lossless"), ("engine", "lossless"), ("pearl", "lossless")):
        out = tmp_path / f"{framework}-{mode}.json"
        given = files(pair)[:2] if framework == "ar" else files(pair)  # ar: the target alone
        result = invoke("generate", "--framework", framework, "--mode", mode, *given, "--prompt", f"def f(x):{eos}",
                        "--max-new-tokens", 8, "--json", out, "--no-color")
        assert result.exit_code == 0, result.output
        tokens[(framework, mode)] = json.loads(out.read_text())["tokens"]
    assert all(len(t) > 0 for t in tokens.values()), tokens
    assert tokens[("hf", "lossless")] == tokens[("ar", "none")]


def _foreign_tuned(pair, **settings) -> None:
    other = tiny_model("llama", 7, num_layers=2, vocab_size=112)
    TunedSettings(TierSettings(**settings), "lenient", None, model_fingerprint(other)).save(pair / "tuned.json")


def test_a_tuned_file_for_another_model_is_refused_everywhere(pair):
    _foreign_tuned(pair, mode="lenient", lenience=0.9)
    tuned = str(pair / "tuned.json")
    refused(invoke("generate", "--framework", "hf", *files(pair), "--prompt", "x", "--max-new-tokens", 2), tuned,
            "another model")
    refused(invoke("bench", *files(pair), "--max-new-tokens", 2, "--repeats", 1, "--num-prompts", 1, "--frameworks", "hf",
                   "--modes", "lenient", "--task-prompts", 0), tuned, "another model")
    from transformers import AutoModelForCausalLM

    from viasd_adapt.adapters import hf

    target = AutoModelForCausalLM.from_pretrained(pair / "target")
    with pytest.raises(ModelMismatchError, match="another model"):
        hf.patch(target, context=viasd_adapt.context(target, mask=pair / "mask.json"))  # settings=None would apply it


@pytest.mark.parametrize("value", ["1.5", "NaN"])
def test_a_bad_setting_in_a_tuned_file_names_the_file(pair, value):
    fingerprint = MaskArtifact.load(pair / "mask.json").fingerprint
    TunedSettings(TierSettings(mode="lenient"), "lenient", None, fingerprint).save(pair / "tuned.json")
    data = json.loads((pair / "tuned.json").read_text())
    data["settings"]["lenience"] = float(value)
    (pair / "tuned.json").write_text(json.dumps(data))
    refused(invoke("generate", "--framework", "hf", *files(pair), "--prompt", "x", "--max-new-tokens", 2),
            str(pair / "tuned.json"), "lenience")


def test_a_copied_tuned_file_uses_the_masks_of_its_own_folder(pair, tmp_path):
    """An absolute mask path recorded elsewhere (and existing there) is never used: the same name
    beside the tuned file is."""
    fingerprint = MaskArtifact.load(pair / "mask.json").fingerprint
    elsewhere = shutil.copytree(pair, tmp_path / "elsewhere")
    MaskArtifact(RoutingMask.from_skipped(6, [1, 2, 3]), 0.5, fingerprint=fingerprint).save(elsewhere / "mask-x.json")
    MaskArtifact(RoutingMask.from_skipped(6, [3, 4, 5]), 0.5, fingerprint=fingerprint).save(pair / "mask-x.json")
    viasd = TierSettings(mode="lossy", ratio=0.5)
    report = {"mask_file": str(elsewhere / "mask-x.json"),
              "best_within_budget": {"lossy-fixed": {"settings": viasd.to_dict(), "mask": str(elsewhere / "mask-x.json")}}}
    TunedSettings(viasd, "lossy-fixed", None, fingerprint, report=report).save(pair / "tuned.json")
    assert tuned_mask_path(pair / "mask.json") == pair / "mask-x.json"
    point = TunedSettings.load(pair / "tuned.json").best("lossy-fixed")
    assert recorded_mask(pair / "mask.json", point.mask) == pair / "mask-x.json"


@pytest.mark.parametrize("args, option", [
    (["tune", "--max-regret", "nan"], "--max-regret"),
    (["tune", "--max-ll-drop", "inf"], "--max-ll-drop"),
    (["tune", "--ratios", "nan"], "--ratios"),
    (["bench", "--temperature", "nan"], "--temperature"),
    (["bench", "--max-regret", "nan"], "--max-regret"),
    (["bench", "--alpha1", "nan"], "--alpha1"),
    (["generate", "--lenience", "nan"], "--lenience"),
    (["generate", "--top-p", "inf"], "--top-p"),
    (["search", "--slim-cost", "nan"], "--slim-cost"),
    (["search", "--ratio", "nan"], "--ratio"),
    (["search", "--prompt-tokens", "0"], "--prompt-tokens"),
])
def test_non_finite_and_out_of_range_options_are_refused_by_name(pair, args, option):
    command, rest = args[0], args[1:]
    result = invoke(command, *(["--pair", pair] if command != "generate" else files(pair)), *rest)
    assert result.exit_code == 2, result.output
    assert option in result.output and "Traceback" not in result.output


def test_tune_reuse_refuses_what_is_not_a_tune_json(pair, tmp_path):
    refused(invoke("tune", "--pair", pair, "--reuse", pair / "mask.json"), "not a viasd tune --json file")
    truncated = tmp_path / "points.json"
    truncated.write_text('{"points": [{"family": "sd"')
    refused(invoke("tune", "--pair", pair, "--reuse", truncated), "not valid JSON")
    # a tune file whose point is corrupted: refused naming the file and the field, before any model loads
    tuned = TunedSettings(TierSettings(mode="none"), "none", None, MaskArtifact.load(pair / "mask.json").fingerprint)
    point = {"family": "none", "settings": TierSettings(mode="none").to_dict(), "mask": None, "full_equivalent": 0.5,
             "ll_drop": "tiny", "overrule": None, "tokens": 8}
    corrupted = tmp_path / "corrupted.json"
    corrupted.write_text(json.dumps({"points": [point], "tuned": tuned.to_json()}))
    refused(invoke("tune", "--pair", pair, "--reuse", corrupted), str(corrupted), "field 'points.0.ll_drop'")


def test_unwritable_outputs_fail_before_the_run(pair, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    refused(invoke("tune", "--pair", pair, "--out", blocker / "tuned.json"), "--out", "not a directory")
    refused(invoke("tune", "--pair", pair, "--json", blocker / "points.json"), "--json")
    refused(invoke("bench", "--pair", pair, "--json", blocker / "bench.json"), "--json")
    refused(invoke("generate", *files(pair), "--prompt", "x", "--json", blocker / "out.json"), "--json")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_fails_before_the_run(pair, tmp_path):
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        refused(invoke("tune", "--pair", pair, "--out", folder / "tuned.json"), "--out", "not writable")
        refused(invoke("bench", "--pair", pair, "--json", folder / "bench.json"), "--json", "not writable")
    finally:
        folder.chmod(0o700)


def test_a_drafter_with_another_tokenizer_of_the_same_size_is_refused(pair):
    path = pair / "draft" / "tokenizer.json"
    data = json.loads(path.read_text())
    vocab = data["model"]["vocab"]
    vocab["a"], vocab["b"] = vocab["b"], vocab["a"]  # same size, other ids
    path.write_text(json.dumps(data))
    refused(invoke("generate", "--framework", "hf", *files(pair), "--prompt", "x", "--max-new-tokens", 2),
            "tokenizers have different vocabularies")


def test_an_unknown_pair_is_not_offered_as_a_recipe():
    result = invoke("generate", "--pair", "no-such-pair", "--prompt", "x")
    refused(result, "no model pair named 'no-such-pair'", "no recipe")
    assert "--recipe no-such-pair" not in result.output
