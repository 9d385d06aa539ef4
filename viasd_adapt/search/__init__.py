"""DIMR: finding the routing mask of the slim verifier (the paper's section 3).

One :class:`~viasd_adapt.search.config.SearchConfig` says what a search does. It runs in three
stages (``pipeline.py``): ``prepare.py`` (prompt ids from ``prompt_ids.py`` -> calibration
windows), ``run.py`` (windows + config -> best mask and trace) and ``report.py`` (trace -> the mask
artifact, whose sections are typed in :mod:`viasd_adapt.config.search_record`). The strategies are
``dimr.py`` and ``guided.py`` (sharing the GP of ``gp.py``), the cost ``objective.py``.

The search never imports the decoding engine (``viasd_adapt.engine``, ``viasd_adapt.frameworks``):
it scores masks with teacher-forced forwards only.

The names below are imported on first use, so that ``viasd`` starts without loading torch (the
CLI reads :data:`viasd_adapt.search.config.DEFAULTS` at start-up).
"""

from __future__ import annotations

import importlib

_NAMES = {
    "AgreementProbe": "objective",
    "CalibrationSet": "windows",
    "MaskObjective": "objective",
    "MaskScore": "objective",
    "SearchConfig": "config",
    "SearchResult": "dimr",
    "build_calibration": "decoder_windows",
    "dimr_search": "dimr",
    "guided_search": "guided",
    "search_pair": "pipeline",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name not in _NAMES:
        raise AttributeError(f"module 'viasd_adapt.search' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"viasd_adapt.search.{_NAMES[name]}"), name)
    globals()[name] = value
    return value
