"""The target's two verifiers over one changing token sequence, with their shared prefix computed once.

The slim verifier u and the target q run the same weights on the same inputs below u's first
skipped layer s1, so below s1 they compute exactly the same keys, values and residual stream.
:class:`SharedPrefixRunners` keeps that work once:

* **one prefix cache** for layers ``0 .. s1-1``, shared (the very same cache-layer objects) by u's
  and q's caches; u's cache adds u's retained layers at or after s1, q's its layers ``s1 .. L-1``;
* **the residual stream entering layer s1** (``h_s1``) of every token the prefix has processed,
  captured at no extra cost during u's forward (layer s1 is a stub in u) and q's full forwards;
* **resumed q passes**: when every token q is asked about already went through the prefix (the
  common case in lossy mode: q escalates on exactly u's block, and catches up on tokens tiers
  1-2 committed), q runs only layers ``s1 .. L-1``, from the stored ``h_s1``. The stubs below s1
  make the forward skip those layers; the last of them injects ``h_s1``;
* otherwise (a token nobody has processed yet, e.g. the slim verifier's own correction that the
  lossless cascade hands to q) q runs a **full pass** over the shared cache and captures ``h_s1``
  for later. One forward per call either way: on hardware where a layer costs about the same for
  one token as for a block (small batches on a GPU, small models on a CPU), a second forward to
  push one token through the prefix would cost more than it saves.

Each role remembers which tokens its cache holds and crops to the longest prefix shared with the
sequence it is asked about, like :class:`~viasd_adapt.routing.runner.CachedRunner`. The target is never
modified: every forward goes through a weight-sharing view (:mod:`viasd_adapt.routing.view`).

:class:`SeparateRunners` is the same interface with no sharing (two independent caches), used
when s1 = 0, when sharing is switched off, and as the reference the shared runners are tested
against.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn
from transformers import DynamicCache

from viasd_adapt.errors import ConfigError
from viasd_adapt.routing.layers import find_decoder_stack
from viasd_adapt.routing.slim import SlimCache, SlimVerifier
from viasd_adapt.routing.view import FULL_DEPTH_VIEW, PassThroughLayer, StubLayer, build_layer_view
from viasd_adapt.routing.runner import (
    CachedRunner,
    accepts_logits_to_keep,
    cache_kwarg_name,
    can_truncate,
    common_prefix_length,
    enable_rollback,
    layers_bytes,
    run_block,
    truncate_cache,
)


class TargetRunners(Protocol):
    """Next-token logits of the target q and its slim verifier u over a changing sequence."""

    full_passes: int
    slim_passes: int
    resumed_full_passes: int

    def full_logits(self, sequence: list[int], n_tail: int) -> torch.Tensor: ...

    def slim_logits(self, sequence: list[int], n_tail: int) -> torch.Tensor: ...

    def cache_bytes(self) -> dict[str, int]: ...


def _check_request(sequence: list[int], n_tail: int) -> None:
    if not sequence:
        raise ConfigError("cannot run a model on an empty sequence (empty prompt?)")
    if not 1 <= n_tail <= len(sequence):
        raise ValueError(f"n_tail={n_tail} must be in [1, {len(sequence)}]")


class SeparateRunners:
    """q and u each with a cache of their own; nothing shared (the reference implementation).

    ``full`` and ``slim`` are runners with ``logits_for(sequence, n_tail)``, ``passes`` and
    ``cache_bytes()`` (decoder-only :class:`~viasd_adapt.routing.runner.CachedRunner` by default; the
    encoder-decoder runners of :mod:`viasd_adapt.engine.seq2seq` plug in the same way).
    """

    def __init__(self, full, slim=None):
        self.full = full
        self.slim = slim
        self.resumed_full_passes = 0

    @classmethod
    def of(cls, target: nn.Module, slim: SlimVerifier | None) -> "SeparateRunners":
        """Decoder-only runners for ``target`` and (if given) its slim verifier."""
        return cls(CachedRunner(target), CachedRunner(slim.model, slim.new_cache) if slim is not None else None)

    @property
    def full_passes(self) -> int:
        return self.full.passes

    @property
    def slim_passes(self) -> int:
        return self.slim.passes if self.slim is not None else 0

    def full_logits(self, sequence: list[int], n_tail: int) -> torch.Tensor:
        return self.full.logits_for(sequence, n_tail)

    def slim_logits(self, sequence: list[int], n_tail: int) -> torch.Tensor:
        if self.slim is None:
            raise ConfigError("this mode needs a routing mask (slim verifier); pass mask=...")
        return self.slim.logits_for(sequence, n_tail)

    def cache_bytes(self) -> dict[str, int]:
        """Key/value bytes per cache: q's, u's, and (none here) a shared prefix."""
        return {"full": self.full.cache_bytes(), "slim": self.slim.cache_bytes() if self.slim is not None else 0, "shared": 0}


# ----------------------------------------------------------------------------- capture / inject


class HiddenSlot:
    """Where a capture layer leaves the residual stream, and where an inject layer takes it from.

    The record/take pair is the whole of the shared-prefix stubs' logic; the stubs of each layer
    API (transformers' here, eagle-llm's in :mod:`viasd_adapt.adapters.eagle.slim_tree`) only wrap it.
    """

    def __init__(self) -> None:
        self.value: torch.Tensor | None = None

    def record(self, hidden_states: torch.Tensor) -> None:
        """Keeps the residual stream entering the first skipped layer (``h_s1``)."""
        self.value = hidden_states

    def take(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The recorded ``h_s1``, in place of the block ``hidden_states`` a resumed forward would
        have computed below s1; refuses one recorded for another block."""
        value = self.value
        if value is None or value.shape != hidden_states.shape:
            got = None if value is None else tuple(value.shape)
            raise RuntimeError(f"resumed forward: stored hidden states {got} do not fit the block {tuple(hidden_states.shape)}")
        return value.to(hidden_states.dtype)


class CaptureLayer(StubLayer):
    """Records the residual stream entering its position, then runs ``inner`` (None: a stub)."""

    def __init__(self, slot: HiddenSlot, layer_index: int, inner: nn.Module | None = None):
        super().__init__()
        self.slot = slot
        self.layer_index = layer_index
        self.inner = inner

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        self.slot.record(hidden_states)
        return self.as_block_output(hidden_states) if self.inner is None else self.inner(hidden_states, *args, **kwargs)

    def extra_repr(self) -> str:
        return f"capture_input_of_layer={self.layer_index}"


class InjectLayer(StubLayer):
    """Stands in for the last prefix layer of a resumed forward: returns the stored ``h_s1``."""

    def __init__(self, slot: HiddenSlot, layer_index: int):
        super().__init__()
        self.slot = slot
        self.layer_index = layer_index

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        return self.as_block_output(self.slot.take(hidden_states))

    def extra_repr(self) -> str:
        return f"inject_output_of_layer={self.layer_index}"


# ----------------------------------------------------------------------------- the shared runners


class _Role:
    """One model's view, cache and the token ids its own (non-shared) cache layers hold."""

    def __init__(self, view: nn.Module):
        self.view = view
        self.cache = None
        self.fed: list[int] = []
        self.passes = 0


class SharedPrefixRunners:
    """q and u of one target with layers below s1 computed once (module docstring)."""

    def __init__(self, target: nn.Module, slim: SlimVerifier):
        stack = find_decoder_stack(target)
        mask = slim.mask
        self.s1 = mask.first_skipped
        if not 0 < self.s1 < stack.num_layers:
            raise ConfigError(f"a shared prefix needs 0 < s1 < {stack.num_layers}, got s1 = {self.s1}")
        self.target, self.slim, self.mask = target, slim, mask
        self.config = target.config
        self.num_layers = stack.num_layers
        layers = list(stack.layers)
        s1 = self.s1
        self._capture_slot, self._inject_slot = HiddenSlot(), HiddenSlot()
        slim_layers = [
            layer if keep else (CaptureLayer(self._capture_slot, i) if i == s1 else PassThroughLayer(i))
            for i, (layer, keep) in enumerate(zip(layers, mask.keep))
        ]
        full_layers = [CaptureLayer(self._capture_slot, i, layer) if i == s1 else layer for i, layer in enumerate(layers)]
        resume_layers = (
            [PassThroughLayer(i) for i in range(s1 - 1)] + [InjectLayer(self._inject_slot, s1 - 1)] + layers[s1:]
        )
        self.u = _Role(build_layer_view(target, slim_layers))
        self.q = _Role(build_layer_view(target, full_layers))
        setattr(self.q.view, FULL_DEPTH_VIEW, True)  # every layer runs: priced as a full pass by what it fed
        self._resume_view = build_layer_view(target, resume_layers)
        self._cache_kwarg = cache_kwarg_name(target)
        self._trim_head = accepts_logits_to_keep(target)
        self.resumed_full_passes = 0
        self._reset()

    # ------------------------------------------------------------------ caches
    def _reset(self) -> None:
        """Fresh caches for every role; the prefix layers are one set of objects shared by all."""
        s1 = self.s1
        prefix = DynamicCache(config=self.config).layers[:s1]
        u_cache = SlimCache(self.config, self.mask.retained)
        u_cache.layers[:s1] = prefix
        q_cache = DynamicCache(config=self.config)
        q_cache.layers[:s1] = prefix
        resume_cache = SlimCache(self.config, tuple(range(s1, self.num_layers)))
        resume_cache.layers[s1:] = q_cache.layers[s1:]
        for cache in (u_cache, q_cache, resume_cache):
            enable_rollback(cache)
        self.u.cache, self.q.cache, self._resume_cache = u_cache, q_cache, resume_cache
        self._prefix = prefix
        self.u.fed, self.q.fed = [], []
        self.prefix_fed: list[int] = []
        self._h: torch.Tensor | None = None  # (1, len(prefix_fed), H): h_s1 of every prefix token

    @property
    def full_passes(self) -> int:
        return self.q.passes

    @property
    def slim_passes(self) -> int:
        return self.u.passes

    # ------------------------------------------------------------------ forwards
    @torch.no_grad()
    def slim_logits(self, sequence: list[int], n_tail: int) -> torch.Tensor:
        _check_request(sequence, n_tail)
        logits = self._fused(self.u, sequence, n_tail)
        self.u.passes += 1
        return logits

    @torch.no_grad()
    def full_logits(self, sequence: list[int], n_tail: int) -> torch.Tensor:
        """q's logits; a resumed pass (layers s1.. only) when the prefix has seen every token."""
        _check_request(sequence, n_tail)
        keep = min(common_prefix_length(self.q.fed, sequence), len(sequence) - n_tail)
        suffix = self.q.cache.layers[self.s1 :]
        resumable = common_prefix_length(self.prefix_fed, sequence) == len(sequence) and can_truncate(suffix, keep)
        if resumable:
            truncate_cache(suffix, keep)
            self._inject_slot.value = self._h[:, keep : len(sequence)]
            try:
                logits = run_block(self._resume_view, self._resume_cache, self._cache_kwarg, sequence[keep:], keep,
                                   n_tail, self._trim_head)
            finally:
                self._inject_slot.value = None
            self.q.fed = list(sequence)
            self.resumed_full_passes += 1
        else:
            logits = self._fused(self.q, sequence, n_tail)
        self.q.passes += 1
        return logits

    def _fused(self, role: _Role, sequence: list[int], n_tail: int) -> torch.Tensor:
        """One forward of ``role``'s view through every layer it runs, the shared prefix included,
        from the longest position both its own layers and the prefix still hold."""
        start = min(
            common_prefix_length(role.fed, sequence),
            common_prefix_length(self.prefix_fed, sequence),
            len(sequence) - n_tail,
        )
        if not can_truncate(role.cache, start):
            self._reset()
            start = 0
        truncate_cache(role.cache, start)
        try:
            logits = run_block(role.view, role.cache, self._cache_kwarg, sequence[start:], start, n_tail, self._trim_head)
            captured = self._capture_slot.value
        finally:
            self._capture_slot.value = None
        kept = self._h[:, :start] if self._h is not None else None
        self._h = captured if kept is None or start == 0 else torch.cat([kept, captured], dim=1)
        role.fed = list(sequence)
        self.prefix_fed = list(sequence)
        return logits

    def cache_bytes(self) -> dict[str, int]:
        """Key/value bytes per cache: q's own layers (s1 and up), u's own layers (its retained
        layers from s1), and the shared prefix (layers below s1), counted once."""
        s1 = self.s1
        return {
            "full": layers_bytes(self.q.cache.layers[s1:]),
            "slim": layers_bytes(self.u.cache.layers[s1:]),
            "shared": layers_bytes(self._prefix),
        }


def make_target_runners(target: nn.Module, slim: SlimVerifier | None, share_prefix: bool = True) -> TargetRunners:
    """Shared-prefix runners when the mask allows it (s1 > 0), else separate ones.

    Decoder-only targets only: an encoder-decoder target's runners need its encoder output
    (:class:`viasd_adapt.routing.seq2seq.Seq2SeqTargetRunners`).
    """
    if find_decoder_stack(target).encoder_decoder:
        raise ConfigError(
            f"{type(target).__name__} is an encoder-decoder model: build its runners with "
            "viasd_adapt.routing.seq2seq.Seq2SeqTargetRunners (they need the encoder output)"
        )
    if share_prefix and slim is not None and slim.mask.first_skipped > 0:
        return SharedPrefixRunners(target, slim)
    return SeparateRunners.of(target, slim)


__all__ = [
    "CaptureLayer",
    "HiddenSlot",
    "InjectLayer",
    "SeparateRunners",
    "SharedPrefixRunners",
    "TargetRunners",
    "make_target_runners",
]
