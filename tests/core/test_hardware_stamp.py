"""Files that say where they were measured (viasd_adapt.config.hardware, viasd_adapt.routing.hardware):
the stamp is read from the loaded model, and a tuned choice measured on another kind of device is
not applied, with one notice that says how to tune here."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from tests.support.pairs import truncated_pair
from viasd_adapt.config.hardware import HardwareStamp, cpu_name, device_mismatch, retune_hint
from viasd_adapt.config.mask import MaskArtifact
from viasd_adapt.config.resolve import read_settings
from viasd_adapt.config.tuned import TunedForAnotherDeviceWarning, TunedOnUnknownDeviceWarning, TunedSettings
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.engine.context import check_spec_model, open_context
from viasd_adapt.routing.hardware import compute_device_kind, hardware_stamp, model_devices
from viasd_adapt.routing.mask import model_fingerprint

CHOSEN = TierSettings(mode="lenient", lenience=0.3)


# ----------------------------------------------------------------------------- the stamp


def test_the_stamp_is_read_from_the_loaded_model():
    tiny = truncated_pair("llama", layers=2)
    stamp = hardware_stamp(tiny.target)
    assert (stamp.device, stamp.device_count, stamp.dtype) == ("cpu", 1, "float32")
    assert stamp.device_name == cpu_name() and stamp.threads == torch.get_num_threads()
    assert stamp.torch == torch.__version__ and stamp.transformers
    # control: the same model in another dtype says so (read from the weights, not from an option)
    assert hardware_stamp(tiny.target.to(torch.bfloat16)).dtype == "bfloat16"


def test_a_split_model_computes_on_its_accelerator_and_counts_every_device():
    assert compute_device_kind(["cuda:0", "cpu", "disk"]) == "cuda"
    assert compute_device_kind(["cpu", "disk"]) == "cpu"  # disk offload stores, the CPU computes
    assert compute_device_kind(["cpu"]) == "cpu"
    tiny = truncated_pair("llama", layers=2)
    tiny.target.hf_device_map = {"model.embed_tokens": 0, "model.layers.0": "cpu", "model.layers.1": "disk"}
    try:
        assert model_devices(tiny.target) == ["cuda:0", "cpu", "disk"]
        assert hardware_stamp(tiny.target).device_count == 3
    finally:
        del tiny.target.hf_device_map


def test_device_mismatch_compares_the_kind_only():
    gpu = HardwareStamp(device="cuda", device_name="NVIDIA H100")
    assert device_mismatch(gpu, "cpu") == "measured on cuda (NVIDIA H100), this run is on cpu"
    assert device_mismatch(gpu, "cuda") is None  # another GPU model: same kind
    assert device_mismatch(None, "cuda") is None  # an older file: not a mismatch (its own notice)
    assert retune_hint("smollm2", "cuda") == "viasd tune --pair smollm2 --device cuda"


def test_artifacts_carry_the_stamp_and_older_files_keep_their_shape(tmp_path):
    tiny = truncated_pair("llama", layers=2)
    stamp = hardware_stamp(tiny.target)
    stamped = MaskArtifact(tiny.mask, fingerprint=model_fingerprint(tiny.target), hardware=stamp)
    assert MaskArtifact.load(stamped.save(tmp_path / "mask.json")).hardware == stamp
    assert "hardware" not in MaskArtifact(tiny.mask).to_json()  # control: no stamp, no key
    tuned = TunedSettings(CHOSEN, "lenient", None, hardware=stamp)
    assert TunedSettings.load(tuned.save(tmp_path / "tuned.json")).hardware == stamp
    assert "hardware" not in TunedSettings(CHOSEN, "lenient", None).to_json()


# ----------------------------------------------------------------------------- the cross-device rule


def _pair_with_tuned(tmp_path, device: str | None):
    """A pair folder (mask.json, tuned.json choosing lenient) whose tuned file says it was measured on
    ``device`` (None: written before files recorded it)."""
    tiny = truncated_pair("llama", layers=4)
    folder = tmp_path / "mypair"
    folder.mkdir()
    MaskArtifact(tiny.mask, fingerprint=model_fingerprint(tiny.target)).save(folder / "mask.json")
    hardware = None if device is None else HardwareStamp(device=device, device_name="NVIDIA H100" if device == "cuda" else None)
    TunedSettings(CHOSEN, "lenient", None, model_fingerprint(tiny.target), hardware=hardware).save(folder / "tuned.json")
    return tiny, folder


def test_a_choice_measured_on_cuda_is_not_applied_on_the_cpu(tmp_path):
    tiny, folder = _pair_with_tuned(tmp_path, "cuda")
    with pytest.warns(TunedForAnotherDeviceWarning) as caught:
        context = open_context(tiny.target, folder / "mask.json")
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "measured on cuda (NVIDIA H100), this run is on cpu" in message and "\n" not in message
    assert "viasd tune --pair mypair --device cpu" in message
    # the default mode with the pair's mask; the file's prices do not steer the adaptive tier either
    assert context.settings == TierSettings() and context.routing == tiny.mask and context.evidence is None
    assert not context.runs_tuned and context.spec.not_applied.startswith("measured on another device")


def test_control_the_same_file_stamped_cpu_applies_silently(tmp_path):
    tiny, folder = _pair_with_tuned(tmp_path, "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        context = open_context(tiny.target, folder / "mask.json")
    assert context.settings == CHOSEN and context.runs_tuned
    assert context.spec.device_note == "cpu, as this run"


def test_the_commands_path_sets_it_aside_and_explain_says_why(tmp_path):
    tiny, folder = _pair_with_tuned(tmp_path, "cuda")
    spec = read_settings(pair_mask=folder / "mask.json")
    assert spec.settings == CHOSEN and spec.tuned_applied  # before the run's device is known
    with pytest.warns(TunedForAnotherDeviceWarning):
        checked = check_spec_model(spec, tiny.target, tiny.drafter)
    assert checked.settings == TierSettings() and not checked.tuned_applied
    explained = "\n".join(checked.explain())
    assert "not applied: measured on another device" in explained
    assert "tuned settings' device: measured on cuda" in explained


def test_a_file_without_a_stamp_gives_one_unknown_device_notice_and_applies(tmp_path):
    tiny, folder = _pair_with_tuned(tmp_path, None)
    assert "hardware" not in json.loads((folder / "tuned.json").read_text())
    with pytest.warns(TunedOnUnknownDeviceWarning) as caught:
        context = open_context(tiny.target, folder / "mask.json")
    assert len(caught) == 1 and "does not say which device it was measured on" in str(caught[0].message)
    assert context.settings == CHOSEN and context.runs_tuned
    # checked once: the spec that says so is not warned about again on the next step
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_spec_model(context.spec, tiny.target).device_note == context.spec.device_note


def test_the_shipped_tuned_files_say_they_were_measured_on_a_cpu():
    """Read from the package's assets, so the real model's package need not be installed."""
    from tests.support.tuned import shipped_tuned

    for name in ("demo", "demo-ee", "smollm2"):
        tuned = shipped_tuned(name)
        assert tuned.hardware is not None and tuned.hardware.device == "cpu", name


def test_the_demo_answers_with_the_defaults_when_tunes_pick_was_measured_on_another_device(monkeypatch):
    """The demo's second answer follows the same rule: a pick of the target alone (``ar``) made on a
    GPU is not the answer on a CPU; control: the same pick stamped ``cpu`` answers once, with ar."""
    from types import SimpleNamespace

    from viasd_adapt.bench import demo
    from viasd_adapt.config.provenance import Source
    from viasd_adapt.config.resolve import RunSpec
    from viasd_adapt.engine.context import spec_for_device

    tiny = truncated_pair("llama", layers=2)
    runs = []
    monkeypatch.setattr(demo, "show_answer", lambda pair, framework, settings, ids, n, label, *rest, **kw: runs.append(
        (framework, label)) or {"tokens": [1]})
    shown = SimpleNamespace(prompts=[SimpleNamespace(ids=[1, 2])], shown_text="q", shown_source="test")
    for device, frameworks in (("cuda", ["ar", "hf"]), ("cpu", ["ar"])):
        tuned = TunedSettings(TierSettings(mode="none"), "ar", None, hardware=HardwareStamp(device=device))
        spec = RunSpec(tuned.settings, {"mode": Source.tuned("x", "choice ar")}, tuned=tuned, tuned_applied=True)
        checked = spec_for_device(spec, tiny.target)
        runs[:] = []
        demo.two_answers(None, shown, checked, SimpleNamespace(answer_tokens=4), lambda line: None, lambda text: None,
                         False)
        assert [framework for framework, _ in runs] == frameworks, device
        if device == "cuda":
            assert "the defaults: tune's pick was measured on another device" in runs[1][1]
            assert [n.category for n in checked.notices] == [TunedForAnotherDeviceWarning]
