"""The words of ``--device``, ``--dtype`` and ``--device-map``, without torch: the commands' help
and their option parsing read them before torch is imported (``viasd --help`` stays fast). What
they mean, and the checks against this machine, live in :mod:`viasd_adapt.models.placement`."""

from __future__ import annotations

import re

from viasd_adapt.config.pair_file import DTYPES

#: ``--dtype``: ``auto`` (float32 on the CPU, the checkpoint's stored dtype on a GPU) or a dtype.
DTYPE_CHOICES = ("auto", *DTYPES)
#: ``--device-map``: accelerate's named strategies for spreading a model over devices.
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
#: What ``--device`` takes, as help and errors say it.
DEVICE_WORDS = "auto, cpu, cuda or cuda:N"
#: The spelling of a device (whether this machine has it is checked when the command runs).
DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(?::\d+)?")

__all__ = ["DEVICE_MAPS", "DEVICE_PATTERN", "DEVICE_WORDS", "DTYPE_CHOICES"]
