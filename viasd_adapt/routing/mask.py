"""Masks against models: the fingerprint that ties a mask to the model it was searched on, and the
checks that refuse a mask for another model.

The mask itself and its file are :mod:`viasd_adapt.config.mask` (torch-free); this module needs a
live model.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from typing import Any, Union

import torch
from torch import nn

from viasd_adapt.config.fingerprint import SIZE_KEYS, ModelFingerprint, WeightsSketch
from viasd_adapt.config.mask import MaskArtifact, RoutingMask, skip_count
from viasd_adapt.core.settings import Mode
from viasd_adapt.errors import ConfigError, ModelMismatchError
from viasd_adapt.routing.layers import find_decoder_stack

# ---------------------------------------------------------------------------- fingerprint

#: How the weights are fingerprinted (see :func:`model_fingerprint`); stored beside the sketch.
SKETCH_SCHEME = "sampled-values-v2"
#: Sampled entries per fingerprinted tensor.
SKETCH_SIZE = 32
#: Two sketches agree when every sampled pair is within this relative tolerance (twice bf16's unit
#: roundoff 2**-8, so a value and its bf16, fp16 or bf16-of-fp16 round trip always agree) ...
SKETCH_RTOL = 2.0**-7
#: ... plus this absolute slack, for fp16's subnormals (spacing 2**-24) and underflow to zero.
SKETCH_ATOL = 2.0**-20


class FingerprintWarning(UserWarning):
    """A mask was accepted without a weight comparison (offloaded or quantized weights)."""


def _comparable(tensor: torch.Tensor) -> bool:
    """Whether a tensor's values can be compared across dtypes: a floating type of 16 bits or more
    (8-bit floats and integer/packed quantized storage are not the values the mask was searched
    on), and present in memory (accelerate's disk/CPU offload leaves ``meta`` tensors behind)."""
    return tensor.is_floating_point() and tensor.element_size() >= 2 and tensor.device.type != "meta"


def _sketch_positions(numel: int, count: int = SKETCH_SIZE) -> list[int]:
    """``count`` flat indices spread over a tensor of ``numel`` entries, a function of its size only
    (so every dtype and device samples the same entries). A jitter inside each stride keeps them off
    one column of a row-major matrix whose row length divides the stride."""
    count = min(count, numel)
    step = numel // count
    return [i * step + (i * 7919) % step for i in range(count)]


def _fingerprint_tensors(model: nn.Module) -> list[tuple[str, str, torch.Tensor]]:
    """``(component, parameter name, tensor)`` for the input embeddings and the first and last
    decoder layers (each layer's first floating matrix, e.g. ``self_attn.q_proj.weight``; a layer
    whose matrices are all quantized falls back to its first floating parameter, whose name then
    differs from the one recorded on an unquantized model, so that component is not compared)."""
    stack = find_decoder_stack(model)
    found: list[tuple[str, str, torch.Tensor]] = []
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    weight = getattr(embeddings, "weight", None)
    if isinstance(weight, torch.Tensor):
        found.append(("embeddings", "weight", weight))
    for component, layer in (("first_layer", stack.layers[0]), ("last_layer", stack.layers[-1])):
        params = list(layer.named_parameters())
        chosen = next(((n, p) for n, p in params if p.dim() >= 2 and _comparable(p)), None)
        chosen = chosen or next(((n, p) for n, p in params if _comparable(p)), None) or next(iter(params), None)
        if chosen is not None:
            found.append((component, chosen[0], chosen[1]))
    return found


def _sketch(tensor: torch.Tensor) -> list[float] | None:
    """The sampled entries of ``tensor`` as float32 values (exact for every 16/32-bit float), or
    None when they cannot be compared across dtypes (:func:`_comparable`)."""
    if not _comparable(tensor):
        return None
    flat = tensor.detach().reshape(-1)
    index = torch.tensor(_sketch_positions(flat.numel()), dtype=torch.long, device=flat.device)
    values = flat.index_select(0, index).to("cpu", torch.float32).tolist()
    return [float(f"{v:.8g}") for v in values]  # float32 round-trips through 9 digits; 8 is far inside the tolerance


def model_fingerprint(model: nn.Module) -> dict[str, Any]:
    """Identifies a model well enough to refuse a mask searched on another one, in any dtype and on
    any device.

    Architecture, layer count, hidden and vocabulary sizes, plus a *sketch* of the weights:
    :data:`SKETCH_SIZE` entries at fixed positions of the input embeddings and of the first and
    last decoder layers' first weight matrix, read from the stored values and converted to float32
    on the CPU. Two sketches are compared entry by entry with a relative tolerance of
    :data:`SKETCH_RTOL` (2**-7), :func:`fingerprint_mismatches`.

    Why values with a tolerance and not a hash: any hash of rounded values breaks across dtypes,
    however coarse the rounding, because some of thousands of values always sit next to a rounding
    boundary and a bf16 cast moves them across it (the first fingerprint hashed values rounded to
    1e-3 and refused the demo mask on CUDA in float16). The tolerance covers every cast a user
    makes: fp32 -> bf16 or fp16 moves a value by at most 2**-8 relative (bf16's unit roundoff),
    fp16-trained weights loaded in bf16 likewise, bf16 checkpoints loaded in fp16 or fp32 not at
    all, and fp16's subnormals (below 6e-5) by at most 2**-25 absolute, inside :data:`SKETCH_ATOL`.
    Reading on the CPU in float32 makes the device irrelevant (float32 holds every fp16/bf16 value
    exactly, and no arithmetic is done on the device).

    Why it still discriminates: independently trained (or seeded) models agree on a sampled entry
    within 1% with probability well under 1/10, so 32 entries per tensor, 96 in all, never all
    agree by chance. What counts as "the same model": a checkpoint whose sampled entries moved by
    less than bf16 rounding (a very light fine-tune, e.g. a small LoRA merge into layers other
    than the sampled ones) passes; re-run ``viasd search`` for such a model if in doubt.

    Quantized and offloaded models: 8-bit floats, integer or packed storage (bitsandbytes, GPTQ)
    and ``meta`` (offloaded) tensors are not compared: their sketch entry is None. Embeddings are
    usually left unquantized, so they are still compared; a mask on a model with nothing
    comparable is accepted on its sizes alone, with a :class:`FingerprintWarning`.
    """
    config = getattr(model, "config", None)
    stack = find_decoder_stack(model)
    sketch = {
        component: {"parameter": name, "shape": list(tensor.shape), "values": _sketch(tensor)}
        for component, name, tensor in _fingerprint_tensors(model)
    }
    return {
        "architecture": (getattr(config, "architectures", None) or [type(model).__name__])[0],
        "model_type": getattr(config, "model_type", None),
        "num_layers": stack.num_layers,
        "hidden_size": getattr(config, "hidden_size", getattr(config, "n_embd", None)),
        "vocab_size": getattr(config, "vocab_size", None),
        "weights_sketch": {"scheme": SKETCH_SCHEME, "rtol": SKETCH_RTOL, "atol": SKETCH_ATOL, "tensors": sketch},
    }


def legacy_weights_sha256(model: nn.Module) -> str | None:
    """The first fingerprint's weight hash (``weights_sha256``), computed on the CPU.

    Kept only to accept masks written before the sketch existed, where the hash still matches
    (the same values in a dtype that holds them exactly: an fp16 checkpoint in fp16 or fp32, on
    any device). None when a tensor it read is offloaded.
    """
    stack = find_decoder_stack(model)
    tensors = []
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if embeddings is not None:
        tensors.append(embeddings.weight)
    for layer in (stack.layers[0], stack.layers[-1]):
        first_param = next(iter(layer.parameters()), None)
        if first_param is not None:
            tensors.append(first_param)
    digest = hashlib.sha256()
    for tensor in tensors:
        if tensor.device.type == "meta":
            return None
        flat = tensor.detach().reshape(-1)
        stride = max(1, flat.numel() // 65536)
        sample = flat[::stride][:65536].to("cpu", torch.float32)  # the old code's arithmetic, on the CPU
        digest.update((torch.round(sample * 1e3) / 1e3).numpy().tobytes())
    return digest.hexdigest()


_RERUN = "re-run `viasd search` for this model to record a fingerprint that holds in any dtype and on any device"

#: A fingerprint as the comparisons take it: the typed record, or its JSON object.
FingerprintLike = Union[ModelFingerprint, dict]


def _typed(fingerprint: FingerprintLike | None) -> tuple[ModelFingerprint | None, str | None]:
    """``(record, None)``, or ``(None, why)`` for a recorded fingerprint that is not one (a file
    edited by hand): that is a mismatch to report, not a crash in the middle of a check."""
    try:
        return ModelFingerprint.of(fingerprint), None
    except ConfigError as err:
        return None, f"fingerprint: the recorded fingerprint is malformed ({err}); {_RERUN}"


def _compare_sketches(expected: WeightsSketch, actual: WeightsSketch | None) -> tuple[list[str], int]:
    """``(problems, number of tensors compared)`` between two weight sketches."""
    problems, compared = [], 0
    if expected.scheme != SKETCH_SCHEME:
        return [f"weights_sketch: recorded with scheme {expected.scheme!r}, this version reads "
                f"{SKETCH_SCHEME!r}; {_RERUN}"], 0
    rtol = expected.rtol if expected.rtol is not None else SKETCH_RTOL
    atol = expected.atol if expected.atol is not None else SKETCH_ATOL
    live = actual.tensors if actual is not None else {}
    for component, recorded in expected.tensors.items():
        mine = live.get(component)
        if mine is None or recorded.values is None or mine.values is None:
            continue  # quantized or offloaded on one side: not comparable
        if recorded.parameter != mine.parameter:
            continue  # a different tensor was sampled (its layer is quantized on one side)
        if recorded.shape != mine.shape:
            problems.append(f"weights ({component} {mine.parameter}): mask was searched on shape "
                            f"{recorded.shape}, this model has {mine.shape}")
            continue
        ref, now = recorded.values, mine.values
        if len(ref) != len(now):
            problems.append(f"weights_sketch ({component}): the recorded sketch is malformed; {_RERUN}")
            continue
        compared += 1
        off = [(a, b) for a, b in zip(ref, now) if not abs(a - b) <= rtol * max(abs(a), abs(b)) + atol]
        if off:
            problems.append(
                f"weights ({component} {mine.parameter}): {len(off)} of {len(ref)} sampled entries differ by more "
                f"than dtype rounding (e.g. {off[0][0]:.6g} recorded, {off[0][1]:.6g} here): another checkpoint"
            )
    return problems, compared


def _mismatches(expected: ModelFingerprint, actual: ModelFingerprint) -> tuple[list[str], int]:
    """``(problems, number of weight tensors compared)``; see :func:`fingerprint_mismatches`."""
    problems = [
        f"{key}: mask was searched on {getattr(expected, key)!r}, this model has {getattr(actual, key)!r}"
        for key in SIZE_KEYS
        if getattr(expected, key) != getattr(actual, key)
    ]
    if problems:
        return problems, 0
    if expected.weights_sketch is not None:
        return _compare_sketches(expected.weights_sketch, actual.weights_sketch)
    if expected.weights_sha256 is not None:
        if expected.weights_sha256 == actual.weights_sha256:
            return [], 1
        return [f"weights_sha256: recorded by an older viasd-adapt as an exact hash of the weights in the dtype "
                f"they were searched in, which does not match here; {_RERUN}"], 0
    return [f"weights: the fingerprint records no weights; {_RERUN}"], 0


def fingerprint_mismatches(expected: FingerprintLike, actual: FingerprintLike) -> list[str]:
    """Why a model with fingerprint ``actual`` is not the one ``expected`` was recorded on (empty:
    it is). Sizes must be equal; the weight sketches must agree within dtype rounding
    (:func:`model_fingerprint`). A first-format fingerprint (``weights_sha256`` only) cannot be
    compared with a sketch: :func:`model_mismatches` can still check it against a live model."""
    recorded, malformed = _typed(expected)
    if recorded is None:
        return [malformed]
    return _mismatches(recorded, ModelFingerprint.of(actual))[0]


def model_mismatches(expected: FingerprintLike | None, model: nn.Module) -> list[str]:
    """:func:`fingerprint_mismatches` against a live model. Also reads first-format fingerprints:
    accepted where their exact hash still matches (same values, same or wider dtype), refused
    with the advice to re-run the search otherwise. Warns (:class:`FingerprintWarning`) when the
    sizes match but no weight could be compared (quantized or offloaded weights)."""
    recorded, malformed = _typed(expected)
    if recorded is None:
        return [malformed]
    if recorded.empty:
        return [f"fingerprint: the file records none; {_RERUN}"]
    actual = model_fingerprint(model)
    legacy = recorded.weights_sketch is None and recorded.weights_sha256 is not None
    if legacy:
        actual["weights_sha256"] = legacy_weights_sha256(model)
    problems, compared = _mismatches(recorded, ModelFingerprint.of(actual))
    if legacy:
        problems = [p + f" (this model is loaded as {_model_dtype(model)})" if p.startswith("weights_sha256") else p
                    for p in problems]
    elif not problems and compared == 0:
        warnings.warn(
            "viasd-adapt: none of the fingerprinted weights could be compared (quantized or offloaded); the mask "
            "was accepted on the model's architecture and sizes alone", FingerprintWarning, stacklevel=3)
    return problems


def _model_dtype(model: nn.Module) -> str:
    param = next(iter(model.parameters()), None)
    return str(param.dtype).replace("torch.", "") if param is not None else "unknown dtype"


def random_mask(num_layers: int, ratio: float, generator: torch.Generator | None = None) -> RoutingMask:
    """A uniformly random mask with exactly ``round(ratio * L)`` skipped layers (a baseline, and
    what a quick experiment runs before a search)."""
    k = skip_count(num_layers, ratio)
    order = torch.randperm(num_layers, generator=generator)[:k]
    return RoutingMask.from_skipped(num_layers, sorted(order.tolist()))


# ---------------------------------------------------------------------------- checks against a model


def check_mask_layers(mask: RoutingMask, model: nn.Module) -> None:
    """The mask has one bit per decoder layer of ``model``."""
    layers = find_decoder_stack(model).num_layers
    if layers != mask.num_layers:
        raise ModelMismatchError(
            f"routing mask has {mask.num_layers} bits but {type(model).__name__} has {layers} decoder layers "
            "(a mask for another model?)"
        )


def check_mask_model(artifact: MaskArtifact, model: nn.Module, source: str = "mask") -> None:
    """Refuses ``model`` unless ``artifact`` was searched on it (in any dtype, on any device)."""
    check_mask_layers(artifact.mask, model)
    problems = model_mismatches(artifact.fingerprint, model)
    if problems:
        raise ModelMismatchError(f"{source} belongs to another model: " + "; ".join(problems))


def check_tuned_model(tuned: Any, model: nn.Module, source: str = "tuned settings") -> None:
    """Refuses ``model`` unless the tuned settings (:class:`~viasd_adapt.config.tuned.TunedSettings`)
    were measured on it: settings measured on another model are not a choice for this one."""
    problems = model_mismatches(tuned.fingerprint, model)
    if problems:
        raise ModelMismatchError(f"{source} belongs to another model: " + "; ".join(problems)
                                 + "; run viasd tune for this target, or remove that file")


def load_mask(path: str | os.PathLike, model: nn.Module) -> MaskArtifact:
    """Reads a mask file and refuses it unless it was searched on ``model``."""
    artifact = MaskArtifact.load(path)
    check_mask_model(artifact, model, source=str(path))
    return artifact


MaskLike = Union[RoutingMask, MaskArtifact, str, os.PathLike]


def resolve_mask(model: nn.Module, mask: MaskLike | None, mode, source: str = "mask") -> RoutingMask | None:
    """Whatever an adapter was given as ``mask=``, as a :class:`RoutingMask` checked against ``model``.

    Accepts a :class:`RoutingMask`, a :class:`MaskArtifact` or the path of a ``mask.json``; an
    artifact must have been searched on ``model`` (fingerprint). The modes without a slim verifier
    (none, lenient) need no mask and ignore one that is given. ``source`` names an artifact in
    errors (the file it was read from, when the caller read it).
    """
    mode = Mode.parse(mode)
    if not mode.uses_slim:
        return None
    if mask is None:
        raise ConfigError(f"mode {mode.value!r} needs a routing mask (mask=...); modes none and lenient run without one")
    if isinstance(mask, (str, os.PathLike)):
        return load_mask(mask, model).mask
    if isinstance(mask, MaskArtifact):
        check_mask_model(mask, model, source=source)
        return mask.mask
    if isinstance(mask, RoutingMask):
        check_mask_layers(mask, model)
        return mask
    raise ConfigError(f"mask must be a RoutingMask, a MaskArtifact or a path to mask.json, got {type(mask).__name__}")

