"""The tiny preset builds, reloads through from_pretrained, and rebuilds bit for bit."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from viasd_adapt.training.build import build_pair


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
@pytest.mark.parametrize("model_name", ["target", "draft"])
def test_tiny_pair_reloads_with_from_pretrained(tiny_pair, model_name):
    model = AutoModelForCausalLM.from_pretrained(tiny_pair / model_name)
    tokenizer = AutoTokenizer.from_pretrained(tiny_pair / model_name)
    assert model.config.model_type == "llama"
    assert model.config.vocab_size == len(tokenizer)
    assert model.dtype == torch.float16  # what is on disk
    ids = tokenizer("def main():\n", return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model.float()(input_ids=ids).logits
    assert logits.shape == (1, ids.size(1), len(tokenizer))
    assert torch.isfinite(logits).all()


@pytest.mark.slow
def test_tiny_pair_shapes_and_report(tiny_pair):
    report = json.loads((tiny_pair / "build_report.json").read_text())
    target = AutoModelForCausalLM.from_pretrained(tiny_pair / "target")
    assert target.config.num_hidden_layers >= 12
    assert AutoModelForCausalLM.from_pretrained(tiny_pair / "draft").config.num_hidden_layers == 1
    assert report["parameters"]["target"] == sum(p.numel() for p in target.parameters())
    for key in ("heldout_loss", "argmax_agreement_with_target", "random_masks", "drafter_acceptance", "build_seconds"):
        assert key in report
    assert all(0 not in mask["skipped_layers"] for mask in report["random_masks"]["masks"])
    assert 0.0 <= report["drafter_acceptance"]["speculative_acceptance_rate"] <= 1.0


@pytest.mark.slow
def test_same_seed_gives_identical_weights(tiny_pair, tmp_path):
    rebuilt = build_pair("tiny", out_dir=tmp_path, seed=0, progress=False)
    for name in ("target/model.safetensors", "draft/model.safetensors", "tokenizer/tokenizer.json"):
        assert _digest(rebuilt / name) == _digest(tiny_pair / name), name


@pytest.mark.slow
def test_pair_directory_has_normal_permissions(tiny_pair):
    import os
    import stat

    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(tiny_pair.stat().st_mode) == 0o777 & ~umask  # was 0700 (tempfile.mkdtemp)
    assert stat.S_IMODE((tiny_pair / "build_report.json").stat().st_mode) == 0o666 & ~umask
