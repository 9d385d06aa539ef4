"""Where and in what dtype models load (viasd_adapt.models.placement): the checks of ``--device``,
``--dtype`` and ``--device-map``, what ``from_pretrained`` is asked for (the weights created on the
device, in the dtype: no float32 copy on the way), the dtype ``auto`` resolves to, and the
temporary offload folder a device map gets."""

from __future__ import annotations

import gc

import pytest
import torch
from transformers import AutoModelForCausalLM

from viasd_adapt.errors import ConfigError
from viasd_adapt.models.loading import load_model
from viasd_adapt.models.pair import load_pair
from viasd_adapt.models.placement import Placement, check_device, check_dtype, concrete_dtype, placement
from viasd_adapt.models.tiny import tiny_model

CPU = torch.device("cpu")


@pytest.fixture
def saved(tmp_path):
    model = tiny_model("llama", seed=1, num_layers=2, vocab_size=48)
    model.save_pretrained(tmp_path / "m")
    return tmp_path / "m"


@pytest.fixture
def asked(monkeypatch):
    """The keyword arguments each ``from_pretrained`` call got."""
    real, calls = AutoModelForCausalLM.from_pretrained, []

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", spy)
    return calls


def test_auto_is_the_cpu_without_cuda_and_bad_values_are_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert check_device("auto") == CPU and check_device("CPU") == CPU
    for bad, message in (("cuda", "--device cuda needs CUDA"), ("cuda:1", "--device cuda:1 needs CUDA"),
                         ("tpu", "'tpu' is not a device: use auto, cpu, cuda or cuda:N")):
        with pytest.raises(ConfigError, match=message) as err:
            check_device(bad)
        assert "\n" not in str(err.value)
    assert check_dtype("auto") is None and check_dtype(torch.bfloat16) == "bfloat16"
    with pytest.raises(ConfigError, match="--dtype 'int8' is not a dtype this loads in"):
        check_dtype("int8")
    with pytest.raises(ConfigError, match="--device-map 'everywhere' is not a device map"):
        placement(device_map="everywhere")
    with pytest.raises(ConfigError, match="max_memory bounds a device map"):
        placement(max_memory={"cpu": 10})


def test_the_weights_are_made_in_the_dtype_asked_and_float32_on_the_cpu_by_default(saved, asked):
    half = load_model(saved, CPU, "target", dtype="bfloat16")
    assert asked[-1]["dtype"] == torch.bfloat16 and "device_map" not in asked[-1]  # no float32 model first
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16}
    full = load_model(saved, CPU, "target")  # control: auto on the CPU
    assert asked[-1]["dtype"] == torch.float32 and {p.dtype for p in full.parameters()} == {torch.float32}
    pair = load_pair(saved, None, need_mask=False, device="cpu", dtype="float16", tokenizer=object())
    assert next(pair.target.parameters()).dtype == torch.float16 and asked[-1]["dtype"] == torch.float16


def test_a_gpu_gets_the_weights_loaded_onto_it_in_their_stored_dtype():
    """What ``from_pretrained`` is asked for (no GPU needed to read it): the device itself as the
    device map, so the weights go straight to it, and the stored dtype unless one is asked."""
    on_gpu = Placement(torch.device("cuda", 1))
    assert on_gpu.load_kwargs() == {"device_map": "cuda:1"} and on_gpu.torch_dtype() == "auto"
    assert Placement(torch.device("cuda", 0), "bfloat16").torch_dtype() == torch.bfloat16
    assert Placement(CPU).load_kwargs() == {} and Placement(CPU).torch_dtype() == torch.float32  # control: the CPU path
    mapped = Placement(CPU, None, "auto", {"cpu": 1000}, "/tmp/x").load_kwargs()
    assert mapped == {"device_map": "auto", "offload_folder": "/tmp/x", "max_memory": {"cpu": 1000}}


def test_auto_resolves_to_the_dtype_pair_json_records(saved, tmp_path):
    import json

    config = json.loads((saved / "config.json").read_text())
    config["dtype"] = "bfloat16"
    (saved / "config.json").write_text(json.dumps(config))
    gpu = Placement(torch.device("cuda", 0))
    assert concrete_dtype(saved, gpu) == "bfloat16"  # the checkpoint's stored dtype
    assert concrete_dtype(tmp_path / "m.gguf", gpu) == "bfloat16"
    assert concrete_dtype(saved, Placement(CPU)) == "float32"  # control: the CPU keeps float32
    assert concrete_dtype(saved, Placement(CPU, "float16")) == "float16"


def test_a_device_map_without_an_offload_folder_gets_a_temporary_one_removed_with_the_model(saved, tmp_path):
    from viasd_adapt.models import placement as placement_module

    layers = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.norm": "cpu", "lm_head": "cpu",
              "model.layers.0": "cpu", "model.layers.1": "disk"}
    model = load_model(saved, CPU, "target", placement=placement(device_map=layers))
    folder = placement_module._TEMPORARY[-1]
    assert folder.is_dir() and folder.name.startswith("viasd-offload-")  # (safetensors weights are read in place)
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]]))  # the offloaded layer runs from the folder
    del model
    gc.collect()
    assert not folder.exists()
