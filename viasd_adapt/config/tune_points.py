"""The ``viasd tune --json`` file: every measured point of a sweep, and the tuned.json written from it.

``viasd tune --reuse FILE`` judges these points again under another budget (or prices them with
another machine's costs) without measuring again, so the file is read back by later versions:
typed and versioned like every artifact, each point's fields checked, errors naming the file and
the field. Files written before the format tag existed (``benchmarks/results/tune_*.json``) carry
none and are read as version 1.

The points are what :class:`viasd_adapt.tuning.tune.Point` holds; turning them back into a
:class:`~viasd_adapt.tuning.tune.TuneResult` is :func:`viasd_adapt.tuning.tune.load_result`'s job.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Field

from viasd_adapt.config.schema import Artifact, Record, TierSettingsField, read_json, validate
from viasd_adapt.config.tuned import TunedSettings, old_names_notice, renamed_families
from viasd_adapt.core.notices import emit
from viasd_adapt.errors import ConfigError


class TunePoint(Record):
    """One measured candidate of the sweep (the fields of ``tuning.tune.Point``)."""

    family: str
    settings: TierSettingsField
    mask: str | None
    full_equivalent: float
    ll_drop: float
    overrule: float | None
    tokens: int
    metrics: dict[str, Any] = Field(default_factory=dict)
    regret: float | None = None
    passes: dict[str, Any] = Field(default_factory=dict)
    per_prompt: dict[str, Any] | None = None


def _tuned_part(value: Any) -> Any:
    """The ``tuned`` part: a tuned-settings artifact, its own format and version checked."""
    if isinstance(value, TunedSettings):
        return value
    try:
        return TunedSettings.from_json(value, "its 'tuned' part")
    except ConfigError as err:
        raise ValueError(f"'tuned': {err}") from None


def _renamed_point(point: Any, version: int, found: list[str]) -> Any:
    renamed, names = renamed_families({"choice": point.get("family")} if isinstance(point, dict) else None, version)
    found.extend(name for name in names if name not in found)
    return {**point, "family": renamed["choice"]} if names else point


class TunePoints(Artifact):
    """A ``viasd tune --json`` file (module docstring)."""

    FORMAT: ClassVar[str] = "viasd-adapt/tune-points"
    #: 2: the points' families take the one vocabulary of modes, as tuned.json's do
    VERSION: ClassVar[int] = 2
    WHAT: ClassVar[str] = "viasd tune --json file"
    READS_UNTAGGED: ClassVar[bool] = True

    points: list[TunePoint]
    tuned: Annotated[TunedSettings, BeforeValidator(_tuned_part)]

    def to_json(self) -> dict[str, Any]:
        """The file's JSON: each point as measured (a non-finite number stays one, as the tuner
        wrote it), and the tuned part as ``tuned.json`` itself is written."""
        return {"format": self.FORMAT, "version": self.VERSION, "points": [point.model_dump() for point in self.points],
                "tuned": self.tuned.to_json()}

    @classmethod
    def check_header(cls, data: Any, source: str) -> None:
        """Another kind of file (a mask, a tuned.json, a bench report) is refused as what it is."""
        if isinstance(data, dict) and "format" not in data and not (
                isinstance(data.get("points"), list) and isinstance(data.get("tuned"), dict)):
            raise ConfigError(f"{source} is not a {cls.WHAT} (it needs 'points' and 'tuned')")
        if isinstance(data, dict) and data.get("format") not in (None, cls.FORMAT):
            raise ConfigError(f"{source} is not a {cls.WHAT} (this is a {data.get('format')} file)")
        super().check_header(data, source)

    @classmethod
    def from_json(cls, data: Any, source: str | None = None) -> "TunePoints":
        """Reads the file's JSON; one of version 1 has its points' families and its tuned part read
        under today's names (:func:`~viasd_adapt.config.tuned.renamed_families`), with one notice."""
        source = source or cls.WHAT
        cls.check_header(data, source)
        version = data.get("version", 1)
        found: list[str] = []
        points = data.get("points")
        if isinstance(points, list):
            points = [_renamed_point(point, version, found) for point in points]
        tuned = data.get("tuned")
        if isinstance(tuned, dict) and tuned.get("format") == TunedSettings.FORMAT:
            tuned, in_tuned = renamed_families(tuned, tuned.get("version", 1))
            tuned = {**tuned, "version": TunedSettings.VERSION} if in_tuned else tuned
            found.extend(name for name in in_tuned if name not in found)
        if found:
            emit([old_names_notice(source, found)])
            data = {**data, "points": points, "tuned": tuned}
        return validate(cls, data, source)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "TunePoints":
        """Reads a ``viasd tune --json`` file; errors name it and the field."""
        return cls.from_json(read_json(path, cls.WHAT), source=str(path))


__all__ = ["TunePoint", "TunePoints"]
