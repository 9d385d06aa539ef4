"""Loading models and tokenizers: damaged or wrong directories get one clear ViasdError.

Before: a truncated safetensors file raised SafetensorError from inside safetensors, and a
directory without a tokenizer got transformers' advice to install sentencepiece.
"""

from __future__ import annotations

import shutil

import pytest
import torch

from viasd_adapt.errors import ViasdError
from viasd_adapt.models.registry import demo_pair_paths
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.models.loading import load_model, load_tokenizer

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny saved model with the demo tokenizer beside it."""
    path = tmp_path_factory.mktemp("model") / "m"
    tiny_model("llama", num_layers=1).save_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(demo_pair_paths().target / name, path / name)
    return path


def _copy(saved, tmp_path):
    return shutil.copytree(saved, tmp_path / "copy")


def test_good_directory_loads(saved):
    assert load_model(saved, CPU, "target").config.model_type == "llama"
    assert load_tokenizer(saved) is not None


def test_truncated_weights(saved, tmp_path):
    path = _copy(saved, tmp_path)
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ViasdError, match="draft model .* damaged or truncated"):
        load_model(path, CPU, "draft")


def test_missing_weights_and_bad_config(saved, tmp_path):
    path = _copy(saved, tmp_path)
    (path / "model.safetensors").unlink()
    with pytest.raises(ViasdError, match="cannot load the target model"):
        load_model(path, CPU, "target")
    (path / "config.json").write_text("{not json")
    with pytest.raises(ViasdError, match="cannot load the target model"):
        load_model(path, CPU, "target")
    (path / "config.json").write_text("{}")
    with pytest.raises(ViasdError, match="model_type"):
        load_model(path, CPU, "target")


def test_not_a_model_directory(tmp_path):
    with pytest.raises(ViasdError, match="does not exist"):
        load_model(tmp_path / "nope", CPU, "target")
    with pytest.raises(ViasdError, match="no config.json"):
        load_model(tmp_path, CPU, "target")


def test_tokenizer_errors_name_the_problem(saved, tmp_path):
    with pytest.raises(ViasdError, match="does not exist"):
        load_tokenizer(tmp_path / "nope")
    with pytest.raises(ViasdError, match="holds no tokenizer") as err:
        load_tokenizer(tmp_path)
    assert "sentencepiece" not in str(err.value)
    path = _copy(saved, tmp_path)
    (path / "tokenizer.json").write_text('{"truncated": ')
    (path / "tokenizer_config.json").unlink()
    with pytest.raises(ViasdError, match="cannot load a tokenizer"):
        load_tokenizer(path)


# ------------------------------------------------------------------------------ a pair by name


def test_a_pair_loads_by_name_with_its_mask_and_tuned_settings():
    from viasd_adapt import load_pair
    from viasd_adapt.config.resolve import resolve_settings, tuned_mask_path
    from viasd_adapt.config.tuned import TunedSettings

    paths = demo_pair_paths()
    pair = load_pair("demo")
    tuned = TunedSettings.load(paths.root / "tuned.json")
    assert pair.name == "demo" and pair.draft is not None and pair.tokenizer is not None
    assert pair.settings == tuned.settings == resolve_settings(pair_mask=paths.mask).settings
    expected_mask = tuned_mask_path(paths.mask) or paths.mask  # the mask the tuned choice was measured with
    assert pair.mask_path == expected_mask and pair.routing == pair.mask.artifact.mask
    assert pair.eagle_head is not None  # the demo pair ships an EAGLE head
    ids = pair.tokenizer("def add(a, b):", return_tensors="pt").input_ids
    with torch.no_grad():
        assert pair.draft(ids).logits.shape[-1] == pair.target(ids).logits.shape[-1]


def test_a_named_pair_takes_no_other_mask_and_unknown_names_are_refused():
    from viasd_adapt import load_pair
    from viasd_adapt.errors import ConfigError

    with pytest.raises(ConfigError, match="pair's own mask"):
        load_pair("demo", mask_path=demo_pair_paths().mask)
    with pytest.raises(ViasdError, match="no model pair named 'nonexistent'"):
        load_pair("nonexistent")


def test_the_package_hands_out_its_names_without_loading_torch():
    import subprocess
    import sys

    code = ("import sys, viasd_adapt; assert 'torch' not in sys.modules; "
            "from viasd_adapt import TierSettings; print(viasd_adapt.__version__)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-1500:]
    assert result.stdout.strip() == __import__("viasd_adapt").__version__
