"""Making eagle-llm 1.2.1 build correct modules on transformers 5, for one scope at a time.

eagle-llm was written against transformers 4.3x. On transformers 5 it imports, but its modified
Llama (``eagle.model.modeling_llama_kv``) and its head (``eagle.model.cnets``) come out broken in
three ways, each of which this module repairs without editing eagle's files:

1. **``rope_scaling`` KeyError.** transformers 5 made ``config.rope_scaling`` an alias of
   ``config.rope_parameters`` (``{"rope_type": "default", "rope_theta": ...}``), so eagle's
   ``_init_rope`` finds a non-None dict and reads ``["type"]``. We swap both eagle ``_init_rope``
   methods, for the duration of a load only, for :func:`_init_rope_from_config`, which reads
   either config dialect and builds *eagle's own* rotary classes, passing ``rope_theta`` as the
   base (eagle itself always used 10000, silently wrong for models with another theta).
2. **``_tied_weights_keys`` AttributeError.** transformers 5 expects a ``{target: source}`` dict,
   eagle declares the 4.x list. The class attribute is swapped for the dict form during the load.
3. **NaN rotary caches.** transformers 5 builds the model on the meta device and only
   materialises what the checkpoint holds. Eagle's rotary ``inv_freq`` (a persistent buffer the
   checkpoint never had) and the ``cos_cached``/``sin_cached`` tables come back uninitialised, so
   every attention score is NaN and greedy decoding silently emits token 0.
   :func:`repair_rotary_caches` recomputes them from the config after loading. This is not a
   patch: it fixes the buffers of the loaded instance.

Every swap is done by :func:`eagle_compat`, a context manager that restores the original
attributes on exit, also when the load raises; nothing leaks into later code.
:func:`quiet_eagle_noise` silences, for one scope, what transformers says about eagle's 4.x code.

Why this lives in the core's models package and not in the EAGLE adapter: both training an EAGLE
head (:mod:`viasd_adapt.training.eagle_head`, core) and loading an ``EaModel``
(:mod:`viasd_adapt.adapters.eagle.compat`, the adapter, which re-exports these names) build eagle's
modules in this scope, and the core never imports an adapter.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from dataclasses import dataclass
from typing import Iterator

import torch
import transformers
from torch import nn

from viasd_adapt.errors import UnsupportedModelError, ViasdError

TRANSFORMERS_MAJOR = int(transformers.__version__.split(".")[0])


def eagle_modules():
    """eagle's model modules, imported lazily so that viasd-adapt works without eagle-llm."""
    try:
        from eagle.model import cnets, ea_model, modeling_llama_kv
    except ImportError as err:  # pragma: no cover - exercised only without eagle-llm installed
        raise ViasdError(f"eagle-llm is not importable ({err}); install it with `pip install eagle-llm`") from None
    return ea_model, modeling_llama_kv, cnets


# --------------------------------------------------------------------------- rope parameters


@dataclass(frozen=True)
class RopeSpec:
    """The rotary embedding a config asks for, in either transformers dialect."""

    kind: str  # "default", "linear" or "dynamic"
    theta: float
    factor: float = 1.0


def rope_spec(config) -> RopeSpec:
    """Reads rope settings from a 4.x config (``rope_scaling`` + ``rope_theta``) or a 5.x config
    (``rope_parameters``). Raises UnsupportedModelError for rope types eagle cannot express."""
    params = getattr(config, "rope_parameters", None)
    if TRANSFORMERS_MAJOR < 5 or params is None:
        params = getattr(config, "rope_scaling", None)
    theta = float(getattr(config, "rope_theta", None) or 10000.0)
    if not params:
        return RopeSpec("default", theta)
    params = dict(params)
    theta = float(params.get("rope_theta", theta))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return RopeSpec("default", theta)
    if kind in ("linear", "dynamic"):
        return RopeSpec(kind, theta, float(params.get("factor", 1.0)))
    raise UnsupportedModelError(
        f"eagle-llm implements only default, linear and dynamic RoPE; this model uses {kind!r}"
    )


def _init_rope_from_config(attention: nn.Module) -> None:
    """Replacement for eagle's ``LlamaAttention._init_rope`` (both copies): same classes, read
    from either config dialect, with the config's theta as base."""
    module = __import__(type(attention).__module__, fromlist=["LlamaRotaryEmbedding"])
    spec = rope_spec(attention.config)
    common = dict(max_position_embeddings=attention.max_position_embeddings, base=spec.theta)
    if spec.kind == "default":
        attention.rotary_emb = module.LlamaRotaryEmbedding(attention.head_dim, **common)
    elif spec.kind == "linear":
        attention.rotary_emb = module.LlamaLinearScalingRotaryEmbedding(
            attention.head_dim, scaling_factor=spec.factor, **common
        )
    else:
        attention.rotary_emb = module.LlamaDynamicNTKScalingRotaryEmbedding(
            attention.head_dim, scaling_factor=spec.factor, **common
        )


# --------------------------------------------------------------------------- scoped patching


@contextlib.contextmanager
def _swapped(owner: object, name: str, value: object) -> Iterator[None]:
    """Sets ``owner.name = value`` and restores the previous state (also its absence) on exit."""
    missing = object()
    previous = owner.__dict__.get(name, missing) if isinstance(owner, type) else getattr(owner, name, missing)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if previous is missing:
            delattr(owner, name)
        else:
            setattr(owner, name, previous)


@contextlib.contextmanager
def eagle_compat() -> Iterator[None]:
    """Scope in which eagle-llm builds correct models on the installed transformers.

    Only class attributes of eagle's own classes are swapped, and all are restored on exit. Under
    transformers 4.x the rope fix still applies (it makes eagle honour ``rope_theta``) and the
    tied-weights list is left alone.
    """
    _, kv, cnets = eagle_modules()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_swapped(kv.LlamaAttention, "_init_rope", _init_rope_from_config))
        stack.enter_context(_swapped(cnets.LlamaAttention, "_init_rope", _init_rope_from_config))
        if TRANSFORMERS_MAJOR >= 5:
            stack.enter_context(
                _swapped(kv.LlamaForCausalLM, "_tied_weights_keys", {"lm_head.weight": "model.embed_tokens.weight"})
            )
        yield


def repair_rotary_caches(model: nn.Module) -> int:
    """Recomputes ``inv_freq`` and the cos/sin tables of every eagle rotary module in ``model``.

    Returns how many modules were repaired. Safe on a healthy model (it recomputes the same values).
    """
    _, kv, cnets = eagle_modules()
    classes = (kv.LlamaRotaryEmbedding, cnets.LlamaRotaryEmbedding)
    repaired = 0
    for module in model.modules():
        if not isinstance(module, classes):
            continue
        device = next((b.device for b in module.buffers() if b.device.type != "meta"), torch.device("cpu"))
        exponent = torch.arange(0, module.dim, 2, dtype=torch.float32, device=device) / module.dim
        inv_freq = 1.0 / (module.base ** exponent)
        persistent = "inv_freq" not in module._non_persistent_buffers_set
        module.register_buffer("inv_freq", inv_freq, persistent=persistent)
        module._set_cos_sin_cache(seq_len=module.max_position_embeddings, device=device, dtype=torch.float32)
        repaired += 1
    return repaired


# --------------------------------------------------------------------------- transformers' messages


class _EagleNoise(logging.Filter):
    """Drops two of transformers' messages about eagle-llm's own (4.x-era) classes, which the user
    can do nothing about:

    * the load report, when the only keys it lists are rotary ``inv_freq`` buffers reported
      MISSING: eagle's Llama keeps them as persistent buffers, checkpoints do not hold them, and
      :func:`repair_rotary_caches` recomputes them right after the load (the report's advice,
      "consider training", does not apply). A report that lists anything else is shown as is;
    * "doesn't directly inherit from GenerationMixin": eagle's Llama is never asked to ``generate``.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "directly inherit from `GenerationMixin`" in message:
            return False
        rows = [line for line in message.splitlines()
                if "|" in line and any(status in line for status in ("MISSING", "UNEXPECTED", "MISMATCH"))]
        return not (rows and all("inv_freq" in row and "MISSING" in row for row in rows))


@contextlib.contextmanager
def quiet_eagle_noise() -> Iterator[None]:
    """Silences, for one scope, what transformers 5 says about eagle-llm's code on every head load
    or head build (never globally, and nothing else):

    * the ``rope_scaling`` FutureWarning: eagle's ``EConfig`` assigns ``rope_scaling``, which
      transformers 5 deprecates; the head's rotary set-up is proven by the load's sanity check;
    * the messages :class:`_EagleNoise` drops.
    """
    loggers = [logging.getLogger(name) for name in ("transformers.modeling_utils", "transformers.utils.loading_report")]
    quiet = _EagleNoise()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`rope_scaling` is deprecated", category=FutureWarning)
        for logger in loggers:
            logger.addFilter(quiet)
        try:
            yield
        finally:
            for logger in loggers:
                logger.removeFilter(quiet)


__all__ = [
    "TRANSFORMERS_MAJOR",
    "RopeSpec",
    "eagle_compat",
    "eagle_modules",
    "quiet_eagle_noise",
    "repair_rotary_caches",
    "rope_spec",
]
