"""DIMR: finding the routing mask of the slim verifier (VIA-SD.md section 3).

A search runs in three stages (``pipeline.py``): ``calibrate.py`` (prompts -> calibration
windows), ``run.py`` (windows + plan -> best mask and trace) and ``report.py`` (trace -> typed
report in ``records.py`` and the mask artifact), configured by ``config.py``.

The names below are imported on first use, so that ``viasd`` starts without loading torch (the
CLI reads :data:`viasd_adapt.search.config.DEFAULTS` at start-up).
"""

from __future__ import annotations

import importlib

_NAMES = {
    "AgreementProbe": "objective",
    "CalibrationSet": "calibration",
    "MaskObjective": "objective",
    "MaskScore": "objective",
    "SearchResult": "dimr",
    "SearchSettings": "dimr",
    "build_calibration": "calibration",
    "check_compatible": "calibration",
    "dimr_search": "dimr",
    "load_prompt_file": "calibration",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name not in _NAMES:
        raise AttributeError(f"module 'viasd_adapt.search' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"viasd_adapt.search.{_NAMES[name]}"), name)
    globals()[name] = value
    return value
