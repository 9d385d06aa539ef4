"""Routing masks and their on-disk artifact.

A mask ``z`` in {0,1}^L keeps layer l when ``z[l] == 1``; ``round(r * L)`` layers are skipped. A mask
only makes sense for the model it was searched on, so the artifact carries a fingerprint of that
model (architecture, sizes, and a hash of a few weight tensors) and refuses to load onto another.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence, Union

import torch
from torch import nn

from viasd_adapt.errors import ConfigError, ModelMismatchError, ViasdError
from viasd_adapt.routing.layers import find_decoder_stack

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
    def random(cls, num_layers: int, ratio: float, generator: torch.Generator | None = None) -> "RoutingMask":
        """A uniformly random mask with exactly ``round(ratio * L)`` skipped layers."""
        k = skip_count(num_layers, ratio)
        order = torch.randperm(num_layers, generator=generator)[:k]
        return cls.from_skipped(num_layers, sorted(order.tolist()))

    @classmethod
    def from_bits(cls, bits: Sequence[int] | torch.Tensor) -> "RoutingMask":
        values = bits.tolist() if isinstance(bits, torch.Tensor) else list(bits)
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

    def as_tensor(self) -> torch.Tensor:
        return torch.tensor(self.bits(), dtype=torch.float64)

    def validate_for(self, model: nn.Module) -> None:
        """Checks the mask has one bit per decoder layer of ``model``."""
        layers = find_decoder_stack(model).num_layers
        if layers != self.num_layers:
            raise ModelMismatchError(
                f"routing mask has {self.num_layers} bits but {type(model).__name__} has {layers} decoder layers "
                "(a mask for another model?)"
            )

    def __str__(self) -> str:
        return "".join("1" if k else "0" for k in self.keep)


# ---------------------------------------------------------------------------- fingerprint


def model_fingerprint(model: nn.Module) -> dict[str, Any]:
    """Identifies a model well enough to refuse a mask searched on another one.

    Hashes a strided sample of the input embeddings and of the first and last decoder layers'
    parameters. Values are rounded to 1e-3 before hashing so that the same checkpoint loaded on
    another device still matches; a different dtype can still change the hash, which errs on the
    side of refusing.
    """
    config = getattr(model, "config", None)
    stack = find_decoder_stack(model)
    digest = hashlib.sha256()
    tensors = []
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if embeddings is not None:
        tensors.append(embeddings.weight)
    for layer in (stack.layers[0], stack.layers[-1]):
        first_param = next(iter(layer.parameters()), None)
        if first_param is not None:
            tensors.append(first_param)
    for tensor in tensors:
        sample = tensor.detach().reshape(-1).float()
        stride = max(1, sample.numel() // 65536)
        rounded = torch.round(sample[::stride][:65536] * 1e3) / 1e3
        digest.update(rounded.cpu().numpy().tobytes())
    return {
        "architecture": (getattr(config, "architectures", None) or [type(model).__name__])[0],
        "model_type": getattr(config, "model_type", None),
        "num_layers": stack.num_layers,
        "hidden_size": getattr(config, "hidden_size", getattr(config, "n_embd", None)),
        "vocab_size": getattr(config, "vocab_size", None),
        "weights_sha256": digest.hexdigest(),
    }


def fingerprint_mismatches(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    return [
        f"{key}: mask was searched on {expected.get(key)!r}, this model has {actual.get(key)!r}"
        for key in ("architecture", "num_layers", "hidden_size", "vocab_size", "weights_sha256")
        if expected.get(key) != actual.get(key)
    ]


# ---------------------------------------------------------------------------- artifact


@dataclass
class MaskArtifact:
    """A searched mask with everything needed to trust and reproduce it."""

    mask: RoutingMask
    ratio: float
    score: float | None = None
    delta: float | None = None
    search: dict[str, Any] = field(default_factory=dict)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "viasd-adapt/routing-mask",
            "version": ARTIFACT_VERSION,
            "mask": self.mask.bits(),
            "skipped_layers": list(self.mask.skipped),
            "ratio": self.ratio,
            "score": self.score,
            "delta": self.delta,
            "search": self.search,
            "fingerprint": self.fingerprint,
            "report": self.report,
        }

    def save(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        except OSError as err:
            raise ViasdError(f"cannot write mask artifact to {path}: {err.strerror or err}") from None
        return path

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "MaskArtifact":
        if not isinstance(data, dict) or data.get("format") != "viasd-adapt/routing-mask" or "mask" not in data:
            raise ConfigError("not a viasd-adapt routing-mask artifact (missing 'format' or 'mask')")
        ratio = data.get("ratio", 0.0)
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)):
            raise ConfigError(f"routing-mask artifact has a non-numeric ratio: {ratio!r}")
        return cls(
            mask=RoutingMask.from_bits(data["mask"]),
            ratio=float(ratio),
            score=data.get("score"),
            delta=data.get("delta"),
            search=data.get("search", {}),
            fingerprint=data.get("fingerprint", {}),
            report=data.get("report", {}),
        )

    @classmethod
    def load(cls, path: str | os.PathLike, model: nn.Module | None = None) -> "MaskArtifact":
        """Reads an artifact; with ``model``, refuses it unless it was searched on that model."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ViasdError(f"mask file not found: {path}") from None
        except json.JSONDecodeError as err:
            raise ConfigError(f"mask file {path} is not valid JSON: {err}") from None
        artifact = cls.from_json(data)
        if model is not None:
            artifact.check_model(model, source=str(path))
        return artifact

    def check_model(self, model: nn.Module, source: str = "mask") -> None:
        self.mask.validate_for(model)
        problems = fingerprint_mismatches(self.fingerprint, model_fingerprint(model))
        if problems:
            raise ModelMismatchError(f"{source} belongs to another model: " + "; ".join(problems))


MaskLike = Union[RoutingMask, MaskArtifact, str, os.PathLike]


def resolve_mask(model: nn.Module, mask: MaskLike | None, mode) -> RoutingMask | None:
    """Whatever an adapter was given as ``mask=``, as a :class:`RoutingMask` checked against ``model``.

    Accepts a :class:`RoutingMask`, a :class:`MaskArtifact` or the path of a ``mask.json``; an
    artifact must have been searched on ``model`` (fingerprint). The modes without a slim verifier
    (none, lenient) need no mask and ignore one that is given.
    """
    from viasd_adapt.settings import Mode

    mode = Mode.parse(mode)
    if not mode.uses_slim:
        return None
    if mask is None:
        raise ConfigError(f"mode {mode.value!r} needs a routing mask (mask=...); modes none and lenient run without one")
    if isinstance(mask, (str, os.PathLike)):
        return MaskArtifact.load(mask, model=model).mask
    if isinstance(mask, MaskArtifact):
        mask.check_model(model)
        return mask.mask
    if isinstance(mask, RoutingMask):
        mask.validate_for(model)
        return mask
    raise ConfigError(f"mask must be a RoutingMask, a MaskArtifact or a path to mask.json, got {type(mask).__name__}")

