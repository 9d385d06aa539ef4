"""The model fingerprint a mask (and a tuned-settings file) carries, typed.

A mask only makes sense for the model it was searched on, so ``mask.json`` and ``tuned.json``
record a fingerprint of that model: architecture and sizes, and a sketch of a few weight tensors
that holds in any dtype and on any device. :func:`viasd_adapt.routing.mask.model_fingerprint`
computes it from a live model and :func:`viasd_adapt.routing.mask.model_mismatches` compares;
this module only says what a recorded one holds, so that a corrupted field is refused by name
(``field 'fingerprint.num_layers': Input should be a valid integer``) when the file is read.

Every field is optional: files written before the sketch existed carry ``weights_sha256``
instead of ``weights_sketch``, hand-built artifacts may carry none, and fields a newer revision
adds are kept (extra fields are allowed). A fingerprint writes back exactly the fields it was
read or built with, so a file round-trips unchanged.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import StrictFloat, StrictInt, StrictStr

from viasd_adapt.config.schema import SparseRecord, validate

#: The keys whose values must be equal for two fingerprints to name the same model's shape.
SIZE_KEYS = ("architecture", "num_layers", "hidden_size", "vocab_size")


class SketchedTensor(SparseRecord):
    """One fingerprinted tensor: its parameter name, shape and sampled values (float32, read on the
    CPU); ``values`` is None where the tensor could not be compared (quantized or offloaded)."""

    parameter: Optional[StrictStr] = None
    shape: list[StrictInt] = []
    values: Optional[list[StrictFloat]] = None


class WeightsSketch(SparseRecord):
    """Sampled weight values of the input embeddings and the first and last decoder layers, with the
    scheme that sampled them and the tolerances two sketches are compared with."""

    scheme: Optional[StrictStr] = None
    rtol: Optional[StrictFloat] = None
    atol: Optional[StrictFloat] = None
    tensors: dict[str, SketchedTensor] = {}


class ModelFingerprint(SparseRecord):
    """What identifies a model well enough to refuse a mask searched on another one."""

    architecture: Optional[StrictStr] = None
    model_type: Optional[StrictStr] = None
    num_layers: Optional[StrictInt] = None
    hidden_size: Optional[StrictInt] = None
    vocab_size: Optional[StrictInt] = None
    weights_sketch: Optional[WeightsSketch] = None
    weights_sha256: Optional[StrictStr] = None  # the first fingerprint format (an exact hash)

    @classmethod
    def of(cls, value: "ModelFingerprint | dict[str, Any] | None", source: str = "fingerprint") -> "ModelFingerprint":
        """``value`` typed: a fingerprint as is, a dict validated (errors name ``source`` and the
        field), None as the empty fingerprint."""
        if isinstance(value, cls):
            return value
        return validate(cls, {} if value is None else value, source)

    @property
    def empty(self) -> bool:
        """Whether nothing is recorded (a hand-built artifact, or a file that lost its fingerprint)."""
        return not self.model_fields_set and not self.model_extra

    def as_dict(self) -> dict[str, Any]:
        """The JSON object the fingerprint is stored as (exactly the recorded fields)."""
        return self.model_dump(mode="json")


__all__ = ["SIZE_KEYS", "ModelFingerprint", "SketchedTensor", "WeightsSketch"]
