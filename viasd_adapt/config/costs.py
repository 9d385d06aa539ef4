"""Cost files (``--costs``): another machine's forward costs, as ratios, typed and versioned.

``viasd bench --costs`` and ``viasd tune --costs`` price measured pass counts with them
(:mod:`viasd_adapt.bench.projection` says how). The shipped ones are
``viasd_adapt/assets/costs/*.json``. Every field is a ratio of two forward times:

* ``block_over_single``: a (gamma + 1)-token target pass over a 1-token one;
* ``slim_over_block``: a slim pass over a full block pass, measured at skip ratio ``slim_ratio``
  (the two come together, or not at all);
* ``draft_over_single``: a drafter pass over a 1-token target pass (0: prompt lookup, no model).

The projection prices in full block passes, so it divides by ``block_over_single``: a file whose
*derived* ratios (a 1-token pass ``1 / block_over_single`` of a block pass, a drafter pass
``draft_over_single / block_over_single``) are not finite and positive is refused by name here, before it
turns every projected cost into inf or nan (``block_over_single = 1e-310`` is a positive number whose
inverse overflows).
"""

from __future__ import annotations

import math
import os
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, ValidationInfo, model_validator

from viasd_adapt.config.schema import Artifact, read_json
from viasd_adapt.errors import ConfigError

COST_FORMAT = "viasd-adapt/forward-costs"


def _positive(value: Any, info: ValidationInfo) -> float | None:
    """A ratio that must be a positive number (``None``: absent, for the optional ones)."""
    if value is None and info.field_name != "block_over_single":
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"'{info.field_name}' must be a positive number, got {value!r}")
    return float(value)


def _draft_ratio(value: Any, info: ValidationInfo) -> float:
    """``draft_over_single``: a number >= 0 (0, or absent: no drafter model)."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"'{info.field_name}' must be a positive number (or 0: no drafter model), got {value!r}")
    return float(value)


def _ratio(numerator: float, denominator: float) -> float:
    try:
        return numerator / denominator
    except (OverflowError, ZeroDivisionError):
        return math.inf


def derived_ratio_problems(block_over_single: float, slim_over_block: float | None, slim_ratio: float | None,
                           draft_over_single: float) -> list[str]:
    """Why these ratios cannot price passes (empty: they can): a slim measurement without its skip
    ratio (or one outside (0, 1)), or a derived ratio the projection divides into that is not
    finite and positive."""
    problems = []
    if (slim_over_block is None) != (slim_ratio is None) or (slim_ratio is not None and not 0 < slim_ratio < 1):
        problems.append("'slim_over_block' needs 'slim_ratio' in (0, 1) beside it")
    single = _ratio(1.0, block_over_single)
    if not math.isfinite(single) or single <= 0:
        problems.append(f"'block_over_single' {block_over_single!r} makes a 1-token pass 1 / {block_over_single!r} = "
                        f"{single!r} block passes: not a finite positive ratio")
    draft = _ratio(draft_over_single, block_over_single)
    if not math.isfinite(draft) or (draft_over_single > 0 and draft <= 0):
        problems.append(f"'draft_over_single' {draft_over_single!r} / 'block_over_single' {block_over_single!r} = "
                        f"{draft!r} (a drafter pass, in block passes): not a finite positive ratio")
    return problems


def check_cost_ratios(block_over_single: float, slim_over_block: float | None, slim_ratio: float | None,
                      draft_over_single: float, source: str = "cost model") -> None:
    """Raises ConfigError naming ``source`` for the problems of :func:`derived_ratio_problems`."""
    problems = derived_ratio_problems(block_over_single, slim_over_block, slim_ratio, draft_over_single)
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))


class CostFile(Artifact):
    """A ``--costs`` file (module docstring): typed, each ratio checked, derived ratios included."""

    FORMAT: ClassVar[str] = COST_FORMAT
    VERSION: ClassVar[int] = 1
    WHAT: ClassVar[str] = "cost file"

    label: str = ""
    source: str = ""
    block_over_single: Annotated[float, BeforeValidator(_positive)]
    slim_over_block: Annotated[float | None, BeforeValidator(_positive)] = None
    slim_ratio: Annotated[float | None, BeforeValidator(_positive)] = None
    draft_over_single: Annotated[float, BeforeValidator(_draft_ratio)] = 0.0

    @model_validator(mode="after")
    def _derived_ratios_are_usable(self) -> "CostFile":
        problems = derived_ratio_problems(self.block_over_single, self.slim_over_block, self.slim_ratio,
                                          self.draft_over_single)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @classmethod
    def check_header(cls, data: Any, source: str) -> None:
        if not isinstance(data, dict) or data.get("format") != COST_FORMAT:
            raise ConfigError(f"{source} is not a {COST_FORMAT} file (its 'format' field)")
        super().check_header(data, source)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "CostFile":
        """Reads a cost file; every error names it ("cost file <path>: ...") and the field."""
        return cls.from_json(read_json(path, cls.WHAT), source=f"cost file {path}")


__all__ = ["COST_FORMAT", "CostFile", "check_cost_ratios", "derived_ratio_problems"]
