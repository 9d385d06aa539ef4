"""What a new user meets before any mask exists: a first run that works and says how to get the tier,
GGUF caches in the run's dtype with the disk space said first, load_pair on model objects, small
calibration files, and a drafter with another tokenizer refused by name."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

pytest.importorskip("gguf")

import viasd_adapt
from tests.support.expected_warnings import untiered_without_mask_warning  # noqa: E402
from tests.support.gguf import write_tiny_gguf  # noqa: E402
from viasd_adapt.cli.main import cli  # noqa: E402
from viasd_adapt.errors import ConfigError, ModelMismatchError, ViasdError  # noqa: E402
from viasd_adapt.models import gguf as gguf_module  # noqa: E402
from viasd_adapt.models.tiny import tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def target_file(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("first") / "first.gguf", tiny_model("llama", seed=4, vocab_size=64))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("VIASD_CACHE", str(folder))
    return folder


def test_generate_without_a_mask_runs_untiered_and_says_how_to_get_one(cache, target_file):
    args = ["generate", "--target", str(target_file), "--draft", "prompt-lookup", "--prompt", "abc", "--max-new-tokens",
            "3", "--no-color"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "[hf / none] 3 tokens" in result.output
    assert f"viasd models add first --target {target_file} --draft prompt-lookup" in result.output
    asked = CliRunner().invoke(cli, [*args, "--mode", "lossy"])  # control: a mode asked for by name still needs its mask
    assert asked.exit_code == 2 and "needs --mask" in asked.output


def test_bench_without_a_mask_benches_the_modes_that_need_none(cache, target_file):
    result = CliRunner().invoke(cli, ["bench", "--target", str(target_file), "--draft", "prompt-lookup", "--frameworks", "hf",
                                      "--num-prompts", "1", "--max-new-tokens", "3", "--repeats", "1", "--task-prompts", "0"])
    assert result.exit_code == 0, result.output
    assert "benching modes none,lenient" in result.output and "FALLBACK" not in result.output


def test_an_adapter_set_up_without_mask_or_settings_runs_untiered(char_pair_template):
    from transformers import AutoModelForCausalLM

    from viasd_adapt.adapters import hf
    from viasd_adapt.core.settings import TierSettings

    target = AutoModelForCausalLM.from_pretrained(char_pair_template / "target").eval()
    drafter = AutoModelForCausalLM.from_pretrained(char_pair_template / "draft").eval()
    prompt = torch.tensor([[1, 5, 9, 4]])
    with untiered_without_mask_warning():
        with hf.tiered(target):
            tiered = target.generate(prompt, assistant_model=drafter, do_sample=False, max_new_tokens=5)
    plain = target.generate(prompt, do_sample=False, max_new_tokens=5)
    assert torch.equal(tiered, plain)  # untiered SD: the target's own greedy output
    with pytest.raises(ConfigError, match="needs a routing mask"):  # control: settings that need a mask, without one
        hf.patch(target, context=viasd_adapt.context(target, settings=TierSettings(mode="lossy")))


def test_a_gguf_cache_in_bfloat16_is_its_own_entry_at_half_the_size(cache, target_file, capsys):
    from viasd_adapt.models.loading import load_model
    from viasd_adapt.routing.mask import fingerprint_mismatches, model_fingerprint

    full = load_model(target_file, torch.device("cpu"), "target")
    half = load_model(target_file, torch.device("cpu"), "target", dtype="bfloat16")
    said = capsys.readouterr().err
    assert said.count("first load of first.gguf") == 2 and "a bfloat16 cache of" in said and "GB free" in said
    sha = gguf_module.file_sha256(target_file)
    entries = cache / "gguf"
    assert (entries / sha).is_dir() and (entries / f"{sha}-bfloat16").is_dir()
    size = lambda folder: sum(f.stat().st_size for f in folder.glob("*.safetensors"))  # noqa: E731
    assert size(entries / f"{sha}-bfloat16") < 0.6 * size(entries / sha)
    assert next(half.parameters()).dtype == torch.bfloat16 and next(full.parameters()).dtype == torch.float32
    other = tiny_model("llama", seed=9, vocab_size=64)
    assert not fingerprint_mismatches(model_fingerprint(half), model_fingerprint(full))  # the same weights, cast
    assert fingerprint_mismatches(model_fingerprint(other), model_fingerprint(full))  # control: other weights


def test_a_cache_that_would_not_fit_is_refused_before_dequantizing(cache, target_file, monkeypatch):
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(gguf_module.shutil, "disk_usage", lambda path: usage(10**6, 10**6, 100))
    monkeypatch.setattr(gguf_module, "_dequantize_into", lambda *a, **k: pytest.fail("dequantized despite no room"))
    with pytest.raises(ViasdError, match=r"needs 0\.0 GB and .* has 0\.0 GB free"):
        gguf_module.gguf_model_folder(target_file)
    monkeypatch.undo()
    assert gguf_module.gguf_model_folder(target_file).is_dir()  # control: with room, it is written


def test_load_pair_takes_model_objects(char_pair_template):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from viasd_adapt.models.pair import load_pair

    target = AutoModelForCausalLM.from_pretrained(char_pair_template / "target")
    drafter = AutoModelForCausalLM.from_pretrained(char_pair_template / "draft")
    tokenizer = AutoTokenizer.from_pretrained(char_pair_template / "target")
    pair = load_pair(target, drafter, need_mask=False, tokenizer=tokenizer)
    assert pair.target is target and pair.draft is drafter and pair.tokenizer is tokenizer
    other = tiny_model("llama", seed=1, vocab_size=target.config.vocab_size + 3)
    with pytest.raises(ModelMismatchError, match="universal assisted generation"):  # control: another vocabulary
        load_pair(target, other, need_mask=False, tokenizer=tokenizer)


def test_a_small_calibration_file_holds_out_what_it_can_and_says_so(tmp_path):
    from dataclasses import replace

    from viasd_adapt.search.config import DEFAULTS, CalibrationConfig
    from viasd_adapt.search.prompt_ids import fit_heldout

    small, large = tmp_path / "small.txt", tmp_path / "large.txt"
    small.write_text("\n".join(f"prompt {i}" for i in range(12)) + "\n")
    large.write_text("\n".join(f"prompt {i}" for i in range(40)) + "\n")
    fitted, note = fit_heldout(replace(DEFAULTS, calibration=CalibrationConfig(calib_file=small)))
    assert fitted.calibration.n_heldout == 3 and note.startswith(f"{small} has 12 prompts: 3 held out")
    kept, none = fit_heldout(replace(DEFAULTS, calibration=CalibrationConfig(calib_file=large)))
    assert kept.calibration.n_heldout == DEFAULTS.calibration.n_heldout and none is None  # control: room for 16
