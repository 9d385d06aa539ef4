"""Mask artifacts: a fingerprint that holds across dtypes and devices, and files whose fields must
agree with their bits."""

from __future__ import annotations

import copy
import json
import warnings

import pytest
import torch
from transformers import AutoModelForCausalLM

from viasd_adapt.errors import ConfigError, ModelMismatchError, ViasdError
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.routing.mask import FingerprintWarning, legacy_weights_sha256, model_fingerprint, model_mismatches
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.routing.mask import load_mask


LAYERS = 4
MASK = RoutingMask.from_skipped(LAYERS, [1, 2])
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny llama checkpoint on disk and a mask artifact searched on it in float32."""
    root = tmp_path_factory.mktemp("fp")
    model = tiny_model("llama", seed=0, num_layers=LAYERS)
    model.save_pretrained(root / "model")
    MaskArtifact(MASK, ratio=0.5, fingerprint=model_fingerprint(model)).save(root / "mask.json")
    return root


def load(root, dtype, **kw):
    return AutoModelForCausalLM.from_pretrained(str(root / "model"), dtype=dtype, **kw).eval()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mask_loads_for_the_same_model_in_any_dtype(saved, dtype):
    model = load(saved, dtype)
    assert next(model.parameters()).dtype == dtype
    assert load_mask(saved / "mask.json", model).mask == MASK
    # a cast in place (not a reload) is the same model too
    assert not model_mismatches(MaskArtifact.load(saved / "mask.json").fingerprint, load(saved, torch.float32).to(dtype))


@pytest.mark.parametrize("searched_in", DTYPES, ids=str)
def test_a_mask_searched_in_any_dtype_loads_in_every_other(saved, searched_in):
    fingerprint = model_fingerprint(load(saved, searched_in))
    for dtype in DTYPES:
        assert model_mismatches(fingerprint, load(saved, dtype)) == []
    # bf16 of an fp16 round trip (fp16-trained weights run in bf16)
    twice = load(saved, torch.float16).to(torch.bfloat16)
    assert model_mismatches(fingerprint, twice) == []


def test_mask_loads_with_a_cpu_device_map(saved):
    pytest.importorskip("accelerate")
    model = load(saved, torch.bfloat16, device_map="cpu")
    assert load_mask(saved / "mask.json", model).mask == MASK


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_different_seed_is_refused_in_every_dtype(saved, dtype):
    other = tiny_model("llama", seed=1, num_layers=LAYERS).to(dtype)
    with pytest.raises(ModelMismatchError, match=r"weights \(embeddings weight\): \d+ of 32 sampled entries differ"):
        load_mask(saved / "mask.json", other)


def test_a_model_differing_only_in_its_last_layer_is_refused(saved):
    model = load(saved, torch.float32)
    with torch.no_grad():
        model.model.layers[-1].self_attn.q_proj.weight.mul_(1.05)  # 5%: far beyond any dtype's rounding
    with pytest.raises(ModelMismatchError, match=r"last_layer self_attn.q_proj.weight"):
        load_mask(saved / "mask.json", model)


def test_fingerprint_reads_float32_values_on_the_cpu_and_is_json(saved):
    fingerprint = model_fingerprint(load(saved, torch.bfloat16))
    sketch = fingerprint["weights_sketch"]["tensors"]
    assert set(sketch) == {"embeddings", "first_layer", "last_layer"}
    assert sketch["first_layer"]["parameter"] == "self_attn.q_proj.weight"
    assert all(len(entry["values"]) == 32 for entry in sketch.values())
    assert json.loads(json.dumps(fingerprint)) == fingerprint


def test_offloaded_or_quantized_tensors_are_skipped_not_refused(saved):
    fingerprint = MaskArtifact.load(saved / "mask.json").fingerprint
    model = load(saved, torch.float16)
    layer = model.model.layers[0].self_attn.q_proj
    layer.weight = torch.nn.Parameter(torch.empty_like(layer.weight, device="meta"), requires_grad=False)
    # the layer's first *comparable* matrix is sampled instead; its name differs, so it is not compared
    assert model_fingerprint(model)["weights_sketch"]["tensors"]["first_layer"]["parameter"] == "self_attn.k_proj.weight"
    assert model_mismatches(fingerprint, model) == []  # embeddings and the last layer still agree
    int8 = load(saved, torch.float32)
    int8.model.layers[-1].self_attn.q_proj.weight = torch.nn.Parameter(
        torch.zeros_like(int8.model.layers[-1].self_attn.q_proj.weight, dtype=torch.int8), requires_grad=False)
    assert model_mismatches(fingerprint, int8) == []
    # with nothing comparable left, the mask is accepted on sizes alone, and the user is told
    offloaded = load(saved, torch.float16).to("meta")
    assert all(e["values"] is None for e in model_fingerprint(offloaded)["weights_sketch"]["tensors"].values())
    with pytest.warns(FingerprintWarning, match="could be compared"):
        assert model_mismatches(fingerprint, offloaded) == []


def test_first_format_fingerprints_load_where_their_hash_holds_and_say_to_rerun_otherwise(saved):
    model = load(saved, torch.float32)
    old = {key: value for key, value in model_fingerprint(model).items() if key != "weights_sketch"}
    old["weights_sha256"] = legacy_weights_sha256(model)
    assert model_mismatches(old, copy.deepcopy(model)) == []
    problems = model_mismatches(old, load(saved, torch.bfloat16))
    assert len(problems) == 1 and "re-run `viasd search`" in problems[0] and "bfloat16" in problems[0]


def test_the_shipped_demo_mask_loads_in_every_dtype():
    from viasd_adapt.models.registry import demo_pair_paths

    pair = demo_pair_paths()
    for dtype in DTYPES:
        target = AutoModelForCausalLM.from_pretrained(str(pair.target), dtype=dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("error", FingerprintWarning)
            assert load_mask(pair.mask, target).mask.skipped == (1, 2, 5, 6, 7, 11, 12)
    draft = AutoModelForCausalLM.from_pretrained(str(pair.draft), dtype=torch.float32)
    with pytest.raises(ModelMismatchError):
        load_mask(pair.mask, draft)


# ============================================================================== fields vs bits


def artifact_json(**changes) -> dict:
    data = MaskArtifact(RoutingMask.from_skipped(16, [1, 2, 5, 6, 7, 11, 12]), ratio=0.45).to_json()
    data.update(changes)
    return data


def test_a_consistent_artifact_parses():
    artifact = MaskArtifact.from_json(artifact_json())
    assert artifact.mask.skipped == (1, 2, 5, 6, 7, 11, 12) and artifact.ratio == 0.45
    # fields that can be derived may be left out
    bare = artifact_json()
    del bare["skipped_layers"], bare["ratio"]
    assert MaskArtifact.from_json(bare).ratio == pytest.approx(7 / 16)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(skipped_layers=[1, 2, 5, 6, 7, 11, 16]), r"'skipped_layers' entries \[16\] are out of range"),
        (dict(skipped_layers=[1, 2, 5, 6, 7, 11, -1]), r"out of range"),
        (dict(skipped_layers=[1, 2, 5, 6, 7, 11]), r"'skipped_layers' .* disagree with 'mask'"),
        (dict(skipped_layers=[1, 2, 5, 6, 7, 11, 12, 12]), r"lists a layer twice"),
        (dict(skipped_layers=[1, 2, 5, 6, 7, 11, 12.0]), r"'skipped_layers' must be a list of layer indices"),
        (dict(skipped_layers="1,2"), r"'skipped_layers' must be a list"),
        (dict(mask=[1] + [0] * 15, skipped_layers=list(range(1, 16))), r"'ratio' 0.45 disagrees with 'mask', which skips 15 of 16"),
        (dict(ratio=0.3), r"'ratio' 0.3 disagrees"),
        (dict(ratio=1.5), r"'ratio' must be in \(0, 1\)"),
        (dict(ratio=True), r"'ratio' must be a number"),
        (dict(ratio="half"), r"'ratio' must be a number"),
        (dict(mask=[1] * 16, skipped_layers=[]), r"skips no layer"),
        (dict(mask=[0] * 16, skipped_layers=list(range(16))), r"keep at least one"),
        (dict(mask=[1, 0.5] + [1] * 14), r"'mask' entries must be 0 or 1 .*\[1\] = 0.5"),
        (dict(mask=[1, "0"] + [1] * 14), r"'mask' entries must be 0 or 1"),
        (dict(mask=[1, None] + [1] * 14), r"'mask' entries must be 0 or 1"),
        (dict(mask=[1, 2] + [1] * 14), r"'mask' entries must be 0 or 1"),
        (dict(mask=[]), r"'mask' must be a non-empty list"),
        (dict(mask="1001"), r"'mask' must be a non-empty list"),
        (dict(version=99), r"'version' 99"),
        (dict(fingerprint=[1, 2]), r"'fingerprint' must be an object"),
        (dict(score="low"), r"'score' must be a number"),
    ],
)
def test_fields_that_disagree_with_the_bits_are_refused(changes, message):
    with pytest.raises(ConfigError, match=message):
        MaskArtifact.from_json(artifact_json(**changes))


def test_json_booleans_are_bits():
    data = artifact_json(mask=[bool(b) for b in artifact_json()["mask"]])
    assert MaskArtifact.from_json(data).mask.skipped == (1, 2, 5, 6, 7, 11, 12)


def test_a_mask_path_that_is_a_folder_or_binary_gets_a_clear_error(tmp_path):
    with pytest.raises(ViasdError, match="is a directory"):
        MaskArtifact.load(tmp_path)
    binary = tmp_path / "mask.json"
    binary.write_bytes(b"\xff\xfe\x00\x81 not text")
    with pytest.raises(ViasdError, match="not UTF-8"):
        MaskArtifact.load(binary)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(artifact_json(ratio=0.3)))
    with pytest.raises(ConfigError, match=f"mask file {bad}: 'ratio'"):
        MaskArtifact.load(bad)


def test_save_is_atomic_and_refuses_a_folder(tmp_path):
    path = MaskArtifact.from_json(artifact_json()).save(tmp_path / "mask.json")
    before = path.read_text()
    with pytest.raises(ViasdError, match="is a directory"):
        MaskArtifact.from_json(artifact_json()).save(tmp_path)
    assert path.read_text() == before and [p.name for p in tmp_path.iterdir()] == ["mask.json"]  # no temp files left
