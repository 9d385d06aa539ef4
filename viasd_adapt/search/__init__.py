"""DIMR: finding the routing mask of the slim verifier (VIA-SD.md section 3)."""

from viasd_adapt.search.calibration import CalibrationSet, build_calibration, check_compatible, load_prompt_file
from viasd_adapt.search.dimr import SearchResult, SearchSettings, dimr_search
from viasd_adapt.search.objective import AgreementProbe, MaskObjective, MaskScore

__all__ = [
    "AgreementProbe",
    "CalibrationSet",
    "MaskObjective",
    "MaskScore",
    "SearchResult",
    "SearchSettings",
    "build_calibration",
    "check_compatible",
    "dimr_search",
    "load_prompt_file",
]
