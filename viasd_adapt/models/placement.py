"""Where a model's weights go, and in what dtype: ``--device``, ``--dtype`` and ``--device-map``.

One meaning in every command and in Python (``load_pair(..., device=, dtype=, device_map=)``,
``AddRequest``), checked here before anything loads, each bad value refused in one line:

* **device**: ``auto`` (CUDA when torch sees a CUDA device, else the CPU), ``cpu``, ``cuda`` or
  ``cuda:N``. Models load *on* it: ``from_pretrained`` gets ``device_map`` = that device, so the
  weights never sit in the CPU's memory on the way to a GPU.
* **dtype**: ``auto``, ``float32``, ``bfloat16`` or ``float16``. ``auto`` is float32 on the CPU
  (half-precision matmuls are slow and inexact there) and the checkpoint's stored dtype on a GPU
  (a 7B checkpoint saved in bfloat16 loads in bfloat16: 13.5 GB, not 28). The weights are
  created in that dtype: no float32 copy on the way.
* **device map**: a target too large for one device, spread by accelerate over the GPUs, then the
  CPU, then the disk (``auto``, ``balanced``, ``balanced_low_0``, ``sequential``; from Python also
  a dict of module name -> device, ``"disk"`` included). accelerate's hooks then move each layer's
  weights and inputs where that layer runs; the slim pass, the resumed pass and the shared prefix
  run through them (:mod:`viasd_adapt.routing.view` re-points the hooks of its copies). Layers
  placed on ``"disk"`` are written to an offload folder: the one given, else a temporary folder
  removed with the model. A device map decides where every layer goes, so it is refused together
  with a ``--device`` that names one device (``cpu``, ``cuda:1``).
"""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from viasd_adapt.config.placement_words import DEVICE_MAPS, DEVICE_WORDS, DTYPE_CHOICES
from viasd_adapt.errors import ConfigError, UnsupportedModelError
from viasd_adapt.routing.runner import input_device  # noqa: F401  (where inputs go; placement's word for it)

_CUDA = re.compile(r"cuda(?::(\d+))?")


def cuda_count() -> int:
    """How many CUDA devices torch sees (0 without CUDA)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_device(name: str | torch.device = "auto") -> torch.device:
    """The device ``name`` asks for, or a one-line :class:`ConfigError` saying why there is none."""
    text = str(name).strip().lower()
    if text == "auto":
        return torch.device("cuda" if cuda_count() else "cpu")
    if text == "cpu":
        return torch.device("cpu")
    match = _CUDA.fullmatch(text)
    if match is None:
        raise ConfigError(f"--device {name!r} is not a device: use {DEVICE_WORDS}")
    count = cuda_count()
    if not count:
        raise ConfigError(f"--device {text} needs CUDA, and this torch sees no CUDA device "
                          f"(torch {torch.__version__}, CUDA build {torch.version.cuda or 'none'}); use --device cpu")
    index = int(match.group(1) or 0)
    if index >= count:
        raise ConfigError(f"--device {text}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}")
    return torch.device("cuda", index)


def check_dtype(name: str | torch.dtype | None) -> str | None:
    """The dtype's name (``"bfloat16"``), or None for ``auto``; an unknown one is refused by name."""
    if name is None:
        return None
    text = str(name).removeprefix("torch.")
    if text not in DTYPE_CHOICES:
        raise ConfigError(f"--dtype {name!r} is not a dtype this loads in: use {', '.join(DTYPE_CHOICES)}")
    return None if text == "auto" else text


def check_device_map(device_map: str | Mapping[str, Any] | None, device: str | torch.device = "auto"):
    """``device_map`` checked (a named strategy or a dict), and refused beside a ``device`` that names
    one device: the map decides where each layer goes (``--device cuda`` only asks for the GPUs)."""
    if device_map is None:
        return None
    if isinstance(device_map, str):
        if device_map not in DEVICE_MAPS:
            raise ConfigError(f"--device-map {device_map!r} is not a device map: use {', '.join(DEVICE_MAPS)} "
                              "(from Python, also a dict of module name -> device)")
    elif not isinstance(device_map, Mapping) or not device_map:
        raise ConfigError(f"device_map must be one of {', '.join(DEVICE_MAPS)} or a dict of module name -> device, "
                          f"got {device_map!r}")
    if str(device).strip().lower() not in ("auto", "cuda"):
        shown = device_map if isinstance(device_map, str) else "(a dict)"
        raise ConfigError(f"--device-map {shown} places every layer itself, and --device {device} names one device: "
                          "give one of them (--device-map auto spreads the target over the GPUs, then the CPU, then the disk)")
    check_device(device)  # --device cuda without CUDA is refused here too
    import importlib.util

    if importlib.util.find_spec("accelerate") is None:
        raise ConfigError("--device-map needs the accelerate package (it places the layers): pip install accelerate, "
                          "or pip install 'viasd-adapt[gguf]'")
    return device_map


@dataclass(frozen=True)
class Placement:
    """Where and in what dtype a pair loads (module docstring), checked."""

    device: torch.device = torch.device("cpu")  # where inputs go, and the drafter (with a device map: the first device)
    dtype: str | None = None  # None: auto
    device_map: str | Mapping[str, Any] | None = None
    max_memory: Mapping[Any, Any] | None = None
    offload_folder: str | Path | None = None

    @property
    def split(self) -> bool:
        """Whether the target is spread by a device map (accelerate's hooks place its layers)."""
        return self.device_map is not None

    def torch_dtype(self, stored: Any = "auto") -> torch.dtype | str:
        """What ``from_pretrained`` gets as ``dtype``: the one asked, else float32 on the CPU and
        ``stored`` (the checkpoint's own, ``"auto"``) on a GPU (with a device map: when GPUs take it)."""
        if self.dtype is not None:
            return getattr(torch, self.dtype)
        return stored if self.device.type == "cuda" else torch.float32

    def load_kwargs(self) -> dict[str, Any]:
        """``from_pretrained``'s placement arguments: ``device_map`` (the device itself off the CPU,
        so weights load straight onto it), ``max_memory`` and ``offload_folder`` with a map."""
        if self.device_map is None:
            return {"device_map": str(self.device)} if self.device.type != "cpu" else {}
        kwargs: dict[str, Any] = {"device_map": self.device_map, "offload_folder": str(self.offload_folder or _temporary_folder())}
        if self.max_memory is not None:
            kwargs["max_memory"] = dict(self.max_memory)
        return kwargs


def placement(device: str | torch.device = "auto", dtype: str | torch.dtype | None = None,
              device_map: str | Mapping[str, Any] | None = None, max_memory: Mapping[Any, Any] | None = None,
              offload_folder: str | Path | None = None) -> Placement:
    """The checked :class:`Placement` of ``device``, ``dtype`` and ``device_map`` (each refused in
    one line when it cannot be honoured here)."""
    device_map = check_device_map(device_map, device)
    dtype_name = check_dtype(dtype)
    if max_memory is not None and device_map is None:
        raise ConfigError("max_memory bounds a device map: pass it with device_map (e.g. device_map='auto')")
    where = check_device("auto" if device_map is not None else device)
    if device_map is not None and where.type == "cuda":
        where = torch.device("cuda", 0)
    return Placement(where, dtype_name, device_map, max_memory, offload_folder)


def concrete_dtype(path: str | Path, where: Placement) -> str:
    """The dtype's name that ``where`` loads the model at ``path`` in, ``auto`` resolved (what a
    ``pair.json`` records): the one asked; else float32 on the CPU; on a GPU bfloat16 for a ``.gguf``
    file (quantized blocks, no float dtype of their own) and a folder's stored dtype (its
    ``config.json``), float32 when it names none this loads in."""
    import json

    from viasd_adapt.config.pair_file import DTYPES

    if where.dtype is not None:
        return where.dtype
    if where.device.type != "cuda":
        return "float32"
    if str(path).lower().endswith(".gguf"):
        return "bfloat16"
    try:
        config = json.loads((Path(path).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return "float32"
    stored = str(config.get("dtype") or config.get("torch_dtype") or "float32").removeprefix("torch.")
    return stored if stored in DTYPES else "float32"


#: Temporary offload folders, removed at exit when a model outlives the folder's own clean-up.
_TEMPORARY: list[Path] = []


def _temporary_folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="viasd-offload-"))
    _TEMPORARY.append(folder)
    atexit.register(shutil.rmtree, folder, True)  # at exit at the latest
    return folder


def forget_offload_with(model: nn.Module, folder: str | Path | None) -> None:
    """Removes a temporary offload ``folder`` when ``model`` is dropped (a folder the user gave is kept)."""
    if folder is not None and Path(folder) in _TEMPORARY:
        weakref.finalize(model, shutil.rmtree, str(folder), True)


def device_map_of(model: nn.Module) -> dict[str, Any] | None:
    """The device map a model was dispatched with (``from_pretrained(device_map=...)``), or None."""
    found = getattr(model, "hf_device_map", None)
    return dict(found) if isinstance(found, Mapping) and found else None


def is_split(model: nn.Module) -> bool:
    """Whether ``model`` is spread over several devices, or partly offloaded (CPU or disk), by a device map."""
    found = device_map_of(model)
    if found is None:
        return False
    places = {str(value) for value in found.values()}
    return len(places) > 1 or "disk" in places


def refuse_split(model: nn.Module, framework: str, why: str) -> None:
    """A one-line :class:`UnsupportedModelError` naming the device map, for a framework that cannot
    run a target spread by one."""
    if is_split(model):
        places = sorted({str(value) for value in device_map_of(model).values()})
        raise UnsupportedModelError(
            f"{framework} cannot run a target split by a device map (device_map/offload over {', '.join(places)}): {why}; "
            "load the target on one device (no --device-map), or use --framework hf or pearl")


__all__ = ["DEVICE_MAPS", "DEVICE_WORDS", "DTYPE_CHOICES", "Placement", "check_device", "check_device_map", "check_dtype",
           "concrete_dtype", "cuda_count", "device_map_of", "forget_offload_with", "input_device", "is_split", "placement", "refuse_split"]
