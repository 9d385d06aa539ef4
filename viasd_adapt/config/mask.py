"""Routing masks and their on-disk artifact, ``mask.json`` (torch-free: read by the CLI and the
resolver before any model is loaded).

A mask ``z`` in {0,1}^L keeps layer l when ``z[l] == 1``; ``round(r * L)`` layers are skipped. A mask
only makes sense for the model it was searched on, so the artifact carries a fingerprint of that
model (architecture, sizes, and a sketch of a few weight tensors that holds in any dtype and on any
device; :class:`~viasd_adapt.config.fingerprint.ModelFingerprint`); :mod:`viasd_adapt.routing.mask`
computes fingerprints and refuses a mask for another model. How the mask was found and what was
measured are the typed ``search`` and ``report`` sections (:mod:`viasd_adapt.config.search_record`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Optional, Sequence, Union

from pydantic import BeforeValidator, Field, PlainSerializer, ValidationInfo, WrapValidator

from viasd_adapt.config.fingerprint import ModelFingerprint
from viasd_adapt.config.hardware import HardwareStamp
from viasd_adapt.config.schema import Artifact, read_json
from viasd_adapt.config.search_record import EARLY_EXIT, EarlyExitRecord, SearchMeasurements, SearchRecord
from viasd_adapt.errors import ConfigError

ARTIFACT_VERSION = 1


def skip_count(num_layers: int, ratio: float) -> int:
    """Number of layers a ratio skips: ``round(r * L)``, checked to skip at least one and keep at least one."""
    if not isinstance(ratio, (int, float)) or not 0.0 < ratio < 1.0:
        raise ConfigError(f"routing ratio must be in (0, 1), got {ratio!r}")
    k = int(round(ratio * num_layers))
    if k == 0:
        raise ConfigError(
            f"ratio {ratio} skips no layer of {num_layers} (round({ratio} * {num_layers}) = 0): the slim "
            "verifier would be the full target; raise the ratio"
        )
    if k >= num_layers:
        raise ConfigError(f"ratio {ratio} skips {k} of {num_layers} layers; at least one layer must remain")
    return k


@dataclass(frozen=True)
class RoutingMask:
    """Which decoder layers the slim verifier keeps (``keep[l] is True``) or bypasses."""

    keep: tuple[bool, ...]

    def __post_init__(self) -> None:
        if not self.keep:
            raise ConfigError("a routing mask needs at least one layer")
        if not any(self.keep):
            raise ConfigError("a routing mask must keep at least one layer")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_skipped(cls, num_layers: int, skipped: Sequence[int]) -> "RoutingMask":
        bad = [i for i in skipped if not 0 <= int(i) < num_layers]
        if bad:
            raise ConfigError(f"skipped layer indices {bad} are out of range for {num_layers} layers")
        if len(set(skipped)) >= num_layers:
            raise ConfigError(f"cannot skip {len(set(skipped))} of {num_layers} layers")
        skip = set(int(i) for i in skipped)
        return cls(tuple(i not in skip for i in range(num_layers)))

    @classmethod
    def full(cls, num_layers: int) -> "RoutingMask":
        return cls((True,) * num_layers)

    @classmethod
    def from_bits(cls, bits: Sequence[int]) -> "RoutingMask":
        """From 0/1 values: a list, or anything with ``tolist()`` (a tensor)."""
        values = bits.tolist() if hasattr(bits, "tolist") else list(bits)
        if any(v not in (0, 1, True, False, 0.0, 1.0) for v in values):
            raise ConfigError(f"mask bits must be 0/1, got {values}")
        return cls(tuple(bool(v) for v in values))

    # ------------------------------------------------------------------ views
    @property
    def num_layers(self) -> int:
        return len(self.keep)

    @property
    def skipped(self) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.keep) if not k)

    @property
    def retained(self) -> tuple[int, ...]:
        return tuple(i for i, k in enumerate(self.keep) if k)

    @property
    def first_skipped(self) -> int:
        """s1, the first skipped layer: below it the slim verifier computes exactly what the target
        computes (same weights, same inputs), so that work can be shared with the target."""
        return self.skipped[0] if self.skipped else self.num_layers

    @property
    def num_skipped(self) -> int:
        return len(self.skipped)

    @property
    def ratio(self) -> float:
        return self.num_skipped / self.num_layers

    def bits(self) -> list[int]:
        return [int(k) for k in self.keep]

    def __str__(self) -> str:
        return "".join("1" if k else "0" for k in self.keep)


# ---------------------------------------------------------------------------- artifact


def _parse_bits(bits: Any) -> RoutingMask:
    """The ``mask`` field: a non-empty list of 0/1 integers (JSON true/false too), nothing else,
    skipping at least one layer (else every "slim" pass would be a full pass)."""
    if isinstance(bits, RoutingMask):
        return bits
    if not isinstance(bits, list) or not bits:
        raise ValueError(f"'mask' must be a non-empty list of 0/1, got {bits!r}")
    bad = [(i, v) for i, v in enumerate(bits) if not (isinstance(v, (bool, int)) and v in (0, 1))]
    if bad:
        shown = ", ".join(f"[{i}] = {v!r}" for i, v in bad[:4])
        raise ValueError(f"'mask' entries must be 0 or 1 (integers), got {shown}")
    mask = RoutingMask(tuple(bool(v) for v in bits))
    if mask.num_skipped == 0:
        raise ValueError(f"'mask' skips no layer of {mask.num_layers}: the slim verifier would be the full target")
    return mask


def _check_skipped(listed: Any, info: ValidationInfo) -> Any:
    """``skipped_layers``, when present: integers in range, without repeats, exactly the zeros of ``mask``."""
    if listed is None:
        return None
    if not isinstance(listed, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in listed):
        raise ValueError(f"'skipped_layers' must be a list of layer indices (integers), got {listed!r}")
    mask = info.data.get("mask")
    if mask is None:  # the bits are refused already
        return listed
    layers = mask.num_layers
    out_of_range = [i for i in listed if not 0 <= i < layers]
    if out_of_range:
        raise ValueError(f"'skipped_layers' entries {out_of_range} are out of range for {layers} layers")
    if len(set(listed)) != len(listed):
        raise ValueError(f"'skipped_layers' {listed} lists a layer twice")
    if sorted(listed) != list(mask.skipped):
        raise ValueError(f"'skipped_layers' {sorted(listed)} disagree with 'mask', whose zeros are {list(mask.skipped)}")
    return listed


def _check_ratio(ratio: Any, info: ValidationInfo) -> Any:
    """``ratio``, when present: a number in (0, 1) that rounds to the skipped count,
    ``|ratio - skipped/L| <= 1/(2L)``, i.e. ``round(ratio * L)`` could have produced the mask (the
    search skips ``round(r * L)`` layers; 0.45 of 16 layers is 7.2, so 7 skipped is right, 15 is
    not). Missing, it is taken from the bits."""
    if ratio is None:
        return None
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not math.isfinite(ratio):
        raise ValueError(f"'ratio' must be a number, got {ratio!r}")
    if not 0.0 < ratio < 1.0:
        raise ValueError(f"'ratio' must be in (0, 1), got {ratio!r}")
    mask = info.data.get("mask")
    if mask is not None and abs(ratio - mask.ratio) > 1.0 / (2 * mask.num_layers) + 1e-9:
        layers = mask.num_layers
        raise ValueError(f"'ratio' {ratio} disagrees with 'mask', which skips {mask.num_skipped} of {layers} "
                         f"layers ({mask.ratio:.3g}; a ratio r skips round(r * {layers}) layers)")
    return float(ratio)


def _number_or_null(value: Any, info: ValidationInfo) -> Any:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError(f"'{info.field_name}' must be a number or null, got {value!r}")
    return value


def _an_object(value: Any, info: ValidationInfo) -> Any:
    if not isinstance(value, dict):
        raise ValueError(f"'{info.field_name}' must be an object, got {type(value).__name__}")
    return value


def _search_section(value: Any, handler: Any, info: ValidationInfo) -> SearchRecord | EarlyExitRecord | None:
    """The ``search`` section: a search record, an early exit (``kind: "early exit"``), or nothing
    (``{}``, a mask built by hand). A bad field is refused by name (``search.alpha1``)."""
    if value is None or isinstance(value, (SearchRecord, EarlyExitRecord)):
        return value
    if not _an_object(value, info):
        return None
    return (EarlyExitRecord if value.get("kind") == EARLY_EXIT else SearchRecord).model_validate(value)


def _report_section(value: Any, handler: Any, info: ValidationInfo) -> SearchMeasurements | None:
    """The ``report`` section: a search's measurements, or nothing (``{}``: a mask not searched)."""
    if value is None or isinstance(value, SearchMeasurements):
        return value
    if not _an_object(value, info):
        return None
    return SearchMeasurements.model_validate(value)


def _fingerprint_object(value: Any, info: ValidationInfo) -> Any:
    return value if isinstance(value, ModelFingerprint) else _an_object(value, info)


def _section_json(section: Any) -> dict:
    """A section as the file stores it: its record's fields, ``{}`` for none."""
    return {} if section is None else section.model_dump(mode="json")


#: The typed sections; each is written as a JSON object (``{}`` when there is none), as before.
SearchSection = Annotated[Union[SearchRecord, EarlyExitRecord, None], WrapValidator(_search_section),
                          PlainSerializer(_section_json, return_type=dict)]
ReportSection = Annotated[Optional[SearchMeasurements], WrapValidator(_report_section),
                          PlainSerializer(_section_json, return_type=dict)]
FingerprintSection = Annotated[ModelFingerprint, BeforeValidator(_fingerprint_object),
                               PlainSerializer(lambda fingerprint: fingerprint.as_dict(), return_type=dict)]


class MaskArtifact(Artifact):
    """A searched mask with everything needed to trust and reproduce it: ``mask.json``, typed and
    versioned, each field checked against the bits, every error naming the file and the field.

    ``MaskArtifact(mask, ratio, score, delta, search=..., fingerprint=..., report=...)``: the bits
    first; ``ratio`` defaults to the mask's own and ``skipped_layers`` is always derived from the bits.
    ``search`` is a :class:`~viasd_adapt.config.search_record.SearchRecord` (an
    :class:`~viasd_adapt.config.search_record.EarlyExitRecord` for a mask that was not searched, None
    for one built by hand), ``report`` the search's
    :class:`~viasd_adapt.config.search_record.SearchMeasurements` (None without a search), and
    ``fingerprint`` a :class:`~viasd_adapt.config.fingerprint.ModelFingerprint`; each may be given
    as its JSON object.
    """

    FORMAT: ClassVar[str] = "viasd-adapt/routing-mask"
    VERSION: ClassVar[int] = ARTIFACT_VERSION
    WHAT: ClassVar[str] = "routing-mask artifact"

    mask: Annotated[RoutingMask, BeforeValidator(_parse_bits), PlainSerializer(lambda m: m.bits(), return_type=list)]
    skipped_layers: Annotated[list[int] | None, BeforeValidator(_check_skipped)] = None
    ratio: Annotated[float | None, BeforeValidator(_check_ratio)] = None
    score: Annotated[float | None, BeforeValidator(_number_or_null)] = None
    delta: Annotated[float | None, BeforeValidator(_number_or_null)] = None
    search: SearchSection = None
    fingerprint: FingerprintSection = Field(default_factory=ModelFingerprint)
    report: ReportSection = None
    #: where the search ran (:mod:`viasd_adapt.config.hardware`); the mask applies on any device
    hardware: HardwareStamp | None = None

    def __init__(self, mask: Any = None, ratio: float | None = None, score: float | None = None,
                 delta: float | None = None, **fields: Any):
        given = {"mask": mask} if mask is not None else {}  # missing, not null: pydantic names it "required"
        super().__init__(**given, ratio=ratio, score=score, delta=delta, **fields)

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        if self.ratio is None:
            self.ratio = self.mask.ratio
        self.skipped_layers = list(self.mask.skipped)

    @property
    def searched(self) -> bool:
        """Whether the mask was found by a search (its ``search`` and ``report`` are records)."""
        return isinstance(self.search, SearchRecord)

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        if self.hardware is None:  # an older file keeps its shape
            data.pop("hardware", None)
        return data

    def save(self, path: str | os.PathLike) -> Path:
        """Writes the artifact atomically (a failed write leaves an existing file as it was)."""
        return super().save(path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "MaskArtifact":
        """Reads ``path``, refusing a file whose fields disagree with its bits; checking it against a
        model is :func:`viasd_adapt.routing.mask.load_mask`'s job."""
        data = read_json(path, "mask file")  # clear errors for a missing file, a folder, binary content
        return cls.from_json(data, source=f"mask file {path}")


__all__ = ["MaskArtifact", "RoutingMask"]
