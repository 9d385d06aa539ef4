"""The hardware stamp of a live model: where a run's figures are being measured.

Read from what the run actually uses (the devices and dtype of the loaded target's parameters,
accelerate's ``hf_device_map`` for a model split across devices), not from the options that asked
for them: a ``--device auto`` that found no GPU ran on the CPU, and its files say so. What the stamp
holds and what each file does with it: :mod:`viasd_adapt.config.hardware`.
"""

from __future__ import annotations

import torch
from torch import nn

from viasd_adapt.config.hardware import HardwareStamp, cpu_name

#: Devices that hold weights without computing on them (accelerate's offload, meta tensors).
_STORAGE_ONLY = ("meta", "disk")


def model_devices(model: nn.Module) -> list[str]:
    """The devices ``model``'s weights live on, as torch names them (``cpu``, ``cuda:0``), plus
    ``disk`` for layers accelerate offloads there; in first-seen order."""
    found: dict[str, None] = {}
    device_map = getattr(model, "hf_device_map", None)
    if isinstance(device_map, dict):
        for where in device_map.values():
            name = f"cuda:{where}" if isinstance(where, int) else str(where)
            found.setdefault(str(torch.device(name)) if name != "disk" else "disk", None)
    for parameter in model.parameters():
        found.setdefault(str(parameter.device), None)
    return [name for name in found if name != "meta"] or ["cpu"]


def compute_device_kind(devices: list[str]) -> str:
    """The kind of device a run on ``devices`` computes on: an accelerator where there is one (a
    target split between a GPU and the CPU runs at a GPU's prices), else ``cpu``."""
    kinds = [torch.device(name).type for name in devices if name not in _STORAGE_ONLY]
    accelerators = [kind for kind in kinds if kind != "cpu"]
    return accelerators[0] if accelerators else "cpu"


def _device_name(kind: str, devices: list[str]) -> str:
    if kind == "cuda" and torch.cuda.is_available():
        index = next((torch.device(d).index for d in devices if d.startswith("cuda")), None)
        return torch.cuda.get_device_name(index or 0)
    if kind == "cpu":
        return cpu_name()
    return kind


def model_dtype(model: nn.Module) -> str | None:
    """The dtype of ``model``'s first floating-point parameter (``bfloat16``), None without one."""
    for parameter in model.parameters():
        if parameter.is_floating_point():
            return str(parameter.dtype).removeprefix("torch.")
    return None


def hardware_stamp(model: nn.Module) -> HardwareStamp:
    """Where a run on ``model`` (the target) is measured: its device kind and name, how many devices
    its weights are spread over, its dtype, torch's threads, and the library versions."""
    import transformers

    devices = model_devices(model)
    kind = compute_device_kind(devices)
    return HardwareStamp(device=kind, device_name=_device_name(kind, devices), device_count=len(devices),
                         dtype=model_dtype(model), threads=torch.get_num_threads(), torch=torch.__version__,
                         transformers=transformers.__version__)


def run_device_kind(model: nn.Module) -> str:
    """The device kind a run on ``model`` computes on (:func:`compute_device_kind`)."""
    return compute_device_kind(model_devices(model))


__all__ = ["compute_device_kind", "hardware_stamp", "model_devices", "model_dtype", "run_device_kind"]
