"""Where a file was measured: the hardware stamp ``mask.json``, ``tuned.json`` and the reports carry.

Why: what a pass costs depends on the machine. A ``tuned.json`` chosen on a CPU (``ar``, say,
because a slim pass costs nearly a full one there) says nothing about a GPU, where the prices
differ. So every measured file records the device kind (``cpu``, ``cuda``, ``mps``, ...) and name
(the CPU model or the GPU's name), how many devices the model was spread over, its dtype, torch's
thread count, and the torch and transformers versions: read from what the run used (the loaded
target's parameters), not from the options that asked for it.

What each file does with it:

* ``tuned.json``: a run on another device *kind* than the file was measured on does not apply the
  file's choice (:func:`device_mismatch`); it runs the default mode with the pair's mask, and says
  how to tune again there. A file written before stamps existed reads as measured on an unknown
  device: its choice still applies (every shipped file and every file users tuned before were
  measured on a CPU, and a run on a CPU should not lose them), with one notice saying it cannot
  be checked.
* ``mask.json``: the mask is a property of the weights (which layers the target can skip), so it
  applies on any device; the stamp says where the search ran.
* the bench report and ``models add``'s report: the stamp says where their figures were measured.

This module imports no torch (the vLLM plugin reads ``tuned.json`` in every engine process);
:func:`viasd_adapt.routing.hardware.hardware_stamp` builds a stamp from a live model.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Optional

from pydantic import StrictInt, StrictStr

from viasd_adapt.config.schema import SparseRecord

#: The device kind of a file written before stamps existed.
UNKNOWN_DEVICE = "unknown"


class HardwareStamp(SparseRecord):
    """Where a file's figures were measured (module docstring). Every field but ``device`` is
    optional: a hand-written stamp may give only the kind."""

    device: StrictStr  # the device kind: cpu, cuda, mps, xpu, ... (torch.device(...).type)
    device_name: Optional[StrictStr] = None  # the CPU model or the GPU's name
    device_count: Optional[StrictInt] = None  # the devices the target's weights were spread over
    dtype: Optional[StrictStr] = None  # the target's parameter dtype, e.g. "bfloat16"
    threads: Optional[StrictInt] = None  # torch.get_num_threads() (what a CPU forward is run with)
    torch: Optional[StrictStr] = None
    transformers: Optional[StrictStr] = None

    def describe(self) -> str:
        """The stamp in a few words: ``cuda (NVIDIA H100 80GB HBM3)``."""
        return f"{self.device} ({self.device_name})" if self.device_name else self.device


def device_kind(stamp: HardwareStamp | None) -> str:
    """The device kind a file was measured on, :data:`UNKNOWN_DEVICE` for a file without a stamp."""
    return stamp.device if stamp is not None else UNKNOWN_DEVICE


def device_mismatch(recorded: HardwareStamp | None, run_device: str) -> str | None:
    """Why figures measured on ``recorded`` do not steer a run on a ``run_device`` kind of device
    ("measured on cuda (NVIDIA H100), this run is on cpu"), or None when the kinds agree or the
    file has no stamp (an older file: its choice applies; :func:`unknown_device`). Only the kind is
    compared: two CPUs (or two GPUs) of other models price passes alike enough to share a choice."""
    if recorded is None or recorded.device == run_device:
        return None
    return f"measured on {recorded.describe()}, this run is on {run_device}"


def unknown_device(recorded: HardwareStamp | None) -> bool:
    """Whether a file says nothing of where it was measured (written before stamps existed)."""
    return recorded is None


def retune_hint(pair: str | None, run_device: str) -> str:
    """The command that tunes the pair again on this run's device kind."""
    return f"viasd tune --pair {pair or 'NAME'} --device {run_device}"


def cpu_name() -> str:
    """This machine's CPU model (``model name`` of /proc/cpuinfo on Linux), else what
    :mod:`platform` knows of it, else the machine type (``x86_64``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


__all__ = ["UNKNOWN_DEVICE", "HardwareStamp", "cpu_name", "device_kind", "device_mismatch", "retune_hint",
           "unknown_device"]
