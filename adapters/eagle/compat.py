"""Loading an eagle-llm 1.2.1 ``EaModel`` on the installed transformers, and proving each load sane.

eagle-llm's modules come out broken on transformers 5 (a ``rope_scaling`` KeyError, the 4.x
``_tied_weights_keys`` list, NaN rotary caches); :mod:`viasd_adapt.models.eagle_compat` repairs
them for one scope (:func:`eagle_compat`, :func:`repair_rotary_caches`, :func:`quiet_eagle_noise`,
re-exported here). It lives in the core because training a head
(:mod:`viasd_adapt.training.eagle_head`) builds eagle's modules too, and the core never imports an
adapter.

Because the failure mode is *silent* garbage, a compatibility layer alone is not enough:
:func:`check_base_model` runs the loaded EAGLE base model and the stock Hugging Face model on the
same checkpoint over a probe sequence, through both a plain forward and eagle's own KV-cache path,
and raises :class:`~viasd_adapt.errors.ModelMismatchError` on any difference beyond float noise.
:func:`load_ea_model` does load + repair + check in one call and is what the adapter uses.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator
from pathlib import Path

import torch
import transformers
from torch import nn

if TYPE_CHECKING:
    from viasd_adapt.models.pair import LoadedPair

from viasd_adapt.errors import ConfigError, ModelMismatchError, UnsupportedModelError, ViasdError
from viasd_adapt.models.eagle_compat import (  # noqa: F401 - the compat scope, importable from here as before
    TRANSFORMERS_MAJOR,
    RopeSpec,
    eagle_compat,
    eagle_modules,
    quiet_eagle_noise,
    repair_rotary_caches,
    rope_spec,
)

# Logit agreement demanded of the EAGLE base model against the stock model, per dtype: (atol, rtol).
# float32 on CPU differs by ~1e-6; half precision by ~1e-2 (different attention kernels); a broken
# rotary table, a missing or untied weight differs by O(1), far beyond either.
LOGIT_TOLERANCE = {
    torch.float32: (1e-3, 1e-3),
    torch.float16: (5e-2, 3e-2),
    torch.bfloat16: (1.5e-1, 6e-2),
}
LOGIT_ATOL, LOGIT_RTOL = LOGIT_TOLERANCE[torch.float32]


# --------------------------------------------------------------------------- deprecation notices

#: What transformers 5 says, once per process, about eagle-llm 1.2.1's own generation code: it reads
#: ``config.use_return_dict`` and passes ``past_key_values`` by their 4.x names. (logger, message start)
EAGLE_DEPRECATION_NOTICES = (
    ("transformers.configuration_utils", "`use_return_dict` is deprecated"),
    ("transformers.utils.generic", "`past_key_values`/`cache_params` are deprecated"),
)


class _EagleDeprecations(logging.Filter):
    """Drops :data:`EAGLE_DEPRECATION_NOTICES` logged by a thread that holds an adapter scope; every
    other record, and these from any other thread, pass."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: dict[int, int] = {}  # thread ident -> scopes it holds

    def filter(self, record: logging.LogRecord) -> bool:
        if record.thread not in self.threads:
            return True
        message = record.getMessage()
        return not any(message.startswith(start) for _, start in EAGLE_DEPRECATION_NOTICES)


_DEPRECATIONS = _EagleDeprecations()
_DEPRECATIONS_LOCK = threading.Lock()


@contextlib.contextmanager
def quiet_eagle_deprecations() -> Iterator[None]:
    """Silences :data:`EAGLE_DEPRECATION_NOTICES` for the calling thread, for one scope: they speak of
    eagle-llm's code, which a user of the adapter cannot change. The filter sits on the two loggers
    only while a scope is open, and is removed when the last one closes. transformers prints each
    notice once per process (``warning_once``): one dropped inside the scope is not printed later either."""
    ident = threading.get_ident()
    with _DEPRECATIONS_LOCK:
        if not _DEPRECATIONS.threads:
            for name, _ in EAGLE_DEPRECATION_NOTICES:
                logging.getLogger(name).addFilter(_DEPRECATIONS)
        _DEPRECATIONS.threads[ident] = _DEPRECATIONS.threads.get(ident, 0) + 1
    try:
        yield
    finally:
        with _DEPRECATIONS_LOCK:
            _DEPRECATIONS.threads[ident] -= 1
            if not _DEPRECATIONS.threads[ident]:
                del _DEPRECATIONS.threads[ident]
            if not _DEPRECATIONS.threads:
                for name, _ in EAGLE_DEPRECATION_NOTICES:
                    logging.getLogger(name).removeFilter(_DEPRECATIONS)


# --------------------------------------------------------------------------- sanity check


def _probe_ids(vocab_size: int, length: int = 24, seed: int = 1234) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (1, length), generator=generator)


@torch.no_grad()
def _eagle_logits_plain(base_model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    inner = base_model.model
    saved = getattr(inner, "tree_mask", None), getattr(inner, "tree_mode", None)
    inner.tree_mask, inner.tree_mode = None, None
    try:
        hidden = inner(input_ids=ids, past_key_values=None, use_cache=False, return_dict=False)[0]
    finally:
        inner.tree_mask, inner.tree_mode = saved
    return base_model.lm_head(hidden).float()


@torch.no_grad()
def _eagle_logits_cached(base_model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """The same logits through eagle's pre-allocated KV cache, fed in two chunks (checks cached
    rotary positions too)."""
    from eagle.model.kv_cache import initialize_past_key_values

    inner = base_model.model
    saved = getattr(inner, "tree_mask", None), getattr(inner, "tree_mode", None)
    inner.tree_mask, inner.tree_mode = None, None
    past, data, lengths = initialize_past_key_values(base_model)
    try:
        half = ids.shape[1] // 2
        outs = []
        for start, stop in ((0, half), (half, ids.shape[1])):
            position_ids = torch.arange(start, stop, device=ids.device)[None]
            hidden = inner(input_ids=ids[:, start:stop], past_key_values=past, position_ids=position_ids, return_dict=False)[0]
            outs.append(base_model.lm_head(hidden).float())
    finally:
        inner.tree_mask, inner.tree_mode = saved
        del past, data, lengths
    return torch.cat(outs, dim=1)


@dataclass(frozen=True)
class SanityReport:
    """What :func:`check_base_model` measured."""

    max_abs_diff_plain: float
    max_abs_diff_cached: float
    argmax_agreement: float
    probe_tokens: int


def compare_logits(name: str, eagle_logits: torch.Tensor, stock_logits: torch.Tensor,
                   dtype: torch.dtype = torch.float32) -> float:
    """Max abs difference, raising ModelMismatchError on NaN or a difference beyond the tolerance
    for the models' ``dtype``."""
    atol, rtol = LOGIT_TOLERANCE.get(dtype, LOGIT_TOLERANCE[torch.bfloat16])
    if not torch.isfinite(eagle_logits).all():
        raise ModelMismatchError(
            f"the EAGLE base model produces non-finite logits ({name}); its rotary caches or weights did not "
            "load (transformers-5 incompatibility?). Refusing to run: generation would silently emit token 0."
        )
    diff = (eagle_logits - stock_logits).abs()
    limit = atol + rtol * stock_logits.abs()
    if bool((diff > limit).any()):
        raise ModelMismatchError(
            f"the EAGLE base model disagrees with the stock transformers model on the same weights ({name}): "
            f"max |logit difference| = {float(diff.max()):.4g} (tolerance {atol} + {rtol}*|logit| for {dtype}). "
            "Refusing to run a model that is not the target."
        )
    return float(diff.max())


def check_base_model(base_model: nn.Module, reference: nn.Module, probe_length: int = 24) -> SanityReport:
    """Proves the EAGLE base model computes the same function as ``reference`` (stock HF model).

    Raises :class:`ModelMismatchError` otherwise. Both models run a seeded random probe, once by a
    plain forward and once through eagle's KV cache in two chunks; the tolerance depends on the
    dtype (:data:`LOGIT_TOLERANCE`).
    """
    if base_model.config.vocab_size != reference.config.vocab_size:
        raise ModelMismatchError(
            f"vocabulary sizes differ: EAGLE base {base_model.config.vocab_size}, stock {reference.config.vocab_size}"
        )
    device = next(base_model.parameters()).device
    ids = _probe_ids(base_model.config.vocab_size, probe_length).to(device)
    with torch.no_grad():
        stock = reference(input_ids=ids.to(next(reference.parameters()).device), use_cache=False).logits.float().to(device)
    dtype = next(base_model.parameters()).dtype
    plain = _eagle_logits_plain(base_model, ids)
    diff_plain = compare_logits("plain forward", plain, stock, dtype)
    cached = _eagle_logits_cached(base_model, ids)
    diff_cached = compare_logits("KV-cache forward", cached, stock, dtype)
    agreement = float((plain.argmax(-1) == stock.argmax(-1)).float().mean())
    return SanityReport(diff_plain, diff_cached, agreement, probe_length)


def _load_stock(base_model_path: str | os.PathLike, dtype: torch.dtype) -> nn.Module:
    return transformers.AutoModelForCausalLM.from_pretrained(base_model_path, dtype=dtype).eval()


def load_ea_model(
    base_model_path: str | os.PathLike,
    ea_model_path: str | os.PathLike,
    dtype: torch.dtype = torch.float32,
    sanity_check: bool = True,
    **kwargs,
):
    """``EaModel.from_pretrained`` made to work on the installed transformers, then proven sane.

    Returns the EaModel with ``ea_model.viasd_sanity`` set to the :class:`SanityReport` (None when
    ``sanity_check=False``). The check loads the stock model once more, so the peak memory of a
    load is about twice the target's; pass ``sanity_check=False`` only for a model already checked.
    """
    from viasd_adapt.models.eagle_head_files import complete_head
    from viasd_adapt.models.gguf import gguf_model_folder, is_gguf_path

    ea_model_mod, _, _ = eagle_modules()
    base_model_path, ea_model_path = Path(base_model_path), Path(ea_model_path)
    if is_gguf_path(base_model_path) and base_model_path.is_file():  # eagle reads folders: the dequantized one
        base_model_path = gguf_model_folder(base_model_path)
    for label, path, needed in (("base model", base_model_path, "config.json"), ("EAGLE head", ea_model_path, "config.json")):
        if not (path / needed).is_file():
            raise ViasdError(f"{label} directory {path} has no {needed}")
    if not (ea_model_path / "pytorch_model.bin").is_file():
        raise ViasdError(f"EAGLE head directory {ea_model_path} has no pytorch_model.bin")
    architecture = (transformers.AutoConfig.from_pretrained(base_model_path).architectures or ["?"])[0]
    if architecture != "LlamaForCausalLM":
        raise UnsupportedModelError(
            f"the eagle-llm 1.2.1 adapter supports Llama targets only (its Mixtral path is untested); got {architecture}"
        )
    check_head_matches(base_model_path, ea_model_path)
    # a head shipped without its embedding table gets the base model's, in a cached eagle-format folder
    ea_model_path = complete_head(ea_model_path, base_model_path)
    with eagle_compat(), quiet_eagle_noise():
        model = ea_model_mod.EaModel.from_pretrained(
            base_model_path=str(base_model_path), ea_model_path=str(ea_model_path), dtype=dtype, **kwargs
        )
    repair_rotary_caches(model.base_model)
    model.eval()
    model.viasd_sanity = None
    if sanity_check:
        reference = _load_stock(base_model_path, dtype)
        try:
            model.viasd_sanity = check_base_model(model.base_model, reference)
        finally:
            del reference
    return model


#: Why EAGLE refuses a target spread by a device map: what its loop assumes of the base model.
SPLIT_REASON = ("eagle-llm loads its own copy of the base model on one device and keeps its KV cache in buffers "
                "allocated beside each layer's weights, which accelerate's offload hooks do not hold")


def load_for_pair(pair: "LoadedPair") -> nn.Module:
    """The pair's EaModel: the one it holds (:attr:`~viasd_adapt.models.pair.LoadedPair.framework_models`,
    loaded once by the planner for every request of a command), else loaded (and sanity-checked)
    now. Nothing is kept beside the pair: a program that runs EAGLE many times loads its EaModel
    once (:func:`load_ea_model`) and hands it to the adapter."""
    held = pair.framework_models.get("eagle")
    if held is not None:
        return held
    if not pair.eagle_head:
        raise ConfigError("the eagle framework needs an EAGLE head (--eagle-head PATH, or a pair that ships eagle_head/)")
    from viasd_adapt.models.placement import refuse_split

    refuse_split(pair.target, "the eagle framework", SPLIT_REASON)
    on_cpu = pair.device.type == "cpu"
    dtype = torch.float32 if on_cpu else next(pair.target.parameters()).dtype
    kwargs = {} if on_cpu else {"device_map": str(pair.device)}
    return load_ea_model(pair.target_path, pair.eagle_head, dtype=dtype, **kwargs)


def check_head_matches(base_model_path: str | os.PathLike, ea_model_path: str | os.PathLike) -> None:
    """Refuses a head trained for another base model, before anything is built.

    Compares the head's config (and, when the head was trained by viasd-adapt, the recorded target
    fingerprint) with the base model's config.
    """
    import json

    base = json.loads((Path(base_model_path) / "config.json").read_text())
    head = json.loads((Path(ea_model_path) / "config.json").read_text())
    problems = [
        f"{key}: head {head.get(key)!r}, base model {base.get(key)!r}"
        for key in ("hidden_size", "vocab_size")
        if head.get(key) != base.get(key)
    ]
    recorded = head.get("viasd_target_fingerprint")
    if recorded is not None and not problems:
        from viasd_adapt.models.eagle_head_files import target_weights_digest

        actual = target_weights_digest(base_model_path)
        if actual != recorded:
            problems.append(f"target weights digest: head was trained on {recorded[:12]}, this base model is {actual[:12]}")
    if problems:
        raise ModelMismatchError(
            f"the EAGLE head in {ea_model_path} belongs to another base model: " + "; ".join(problems)
        )


def check_head_embeddings(ea_model: nn.Module) -> None:
    """Refuses a loaded EaModel whose head was trained for another base model.

    EAGLE heads carry a frozen copy of their base model's token embeddings (eagle's training script
    and :func:`viasd_adapt.training.eagle_head.train_eagle_head` both copy them), so a head whose
    embedding table differs from the base model's was trained on another model's features.
    """
    head = ea_model.ea_layer.embed_tokens.weight.detach()
    base = ea_model.base_model.get_input_embeddings().weight.detach()
    if head.shape != base.shape:
        raise ModelMismatchError(
            f"the EAGLE head's embedding table {tuple(head.shape)} does not match the base model's {tuple(base.shape)}: "
            "a head for another base model"
        )
    tolerance = 1e-2 * float(base.float().abs().max()) + 1e-3  # fp16 round-trips pass, other models do not
    difference = float((head.float().cpu() - base.float().cpu()).abs().max())
    if difference > tolerance:
        raise ModelMismatchError(
            f"the EAGLE head's token embeddings differ from the base model's (max |difference| {difference:.3g}): "
            "it was trained for another base model"
        )


__all__ = [
    "EAGLE_DEPRECATION_NOTICES",
    "load_for_pair",
    "TRANSFORMERS_MAJOR",
    "RopeSpec",
    "SanityReport",
    "check_base_model",
    "check_head_embeddings",
    "check_head_matches",
    "compare_logits",
    "eagle_compat",
    "load_ea_model",
    "quiet_eagle_deprecations",
    "quiet_eagle_noise",
    "repair_rotary_caches",
    "rope_spec",
]
