"""Incremental forward passes with a KV cache that follows a changing token sequence.

Speculative loops feed drafts that may later be thrown away, and the full verifier may lag behind
tokens the slim tier committed on its own. :class:`CachedRunner` handles both with one rule: it
remembers which tokens its cache holds, keeps the longest prefix shared with the sequence it is
asked about, crops the rest, and feeds everything after that prefix in a single forward. That one
forward is how q "catches up" on tokens it never saw.
"""

from __future__ import annotations

import inspect
from typing import Callable

import torch
from torch import nn
from transformers import DynamicCache

from viasd_adapt.errors import ConfigError


def cache_kwarg_name(model: nn.Module) -> str:
    """transformers 5.24 renamed ``past_key_values`` to ``cache``; accept both."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def cache_length(cache) -> int:
    """Longest layer of a cache (robust to empty skipped layers)."""
    return max((layer.get_seq_length() for layer in cache.layers), default=0)


def enable_rollback(cache) -> None:
    """Lets sliding-window layers (Gemma2, Mistral with a window) be cropped after the window fills.

    transformers' ``DynamicSlidingWindowLayer`` drops keys older than the window on every update and
    then refuses ``crop`` once the window is reached; with past recording on, it keeps the states of
    the last forward until the next crop, which is exactly what discarding rejected drafts needs.
    """
    for layer in _layers(cache):
        if getattr(layer, "is_sliding", False) and hasattr(layer, "activate_past_recording"):
            layer.activate_past_recording()


def _layers(cache_or_layers) -> list:
    """The cache layers of a Cache object, or a list of cache layers as is."""
    return cache_or_layers.layers if hasattr(cache_or_layers, "layers") else cache_or_layers


def can_truncate(cache, length: int) -> bool:
    """Whether cropping to ``length`` tokens leaves every layer the states its next forward needs.

    A sliding layer only holds its most recent keys; cropping deeper than what it still holds would
    silently lose tokens inside the window, so the caller must rebuild the cache instead.
    """
    for layer in _layers(cache):
        if not getattr(layer, "is_sliding", False) or layer.get_seq_length() <= length:
            continue
        if layer.get_seq_length() >= layer.sliding_window and not getattr(layer, "record_past", False):
            return False
        stored = layer.keys.shape[-2] if layer.is_initialized and layer.keys is not None else 0
        first_stored = layer.get_seq_length() - stored
        if first_stored > max(0, length - layer.sliding_window + 1):
            return False
    return True


def truncate_cache(cache, length: int) -> None:
    """Crops every layer longer than ``length`` back to ``length`` tokens.

    Per layer, so that a cache with empty (skipped) layers is cropped correctly: a whole-cache
    ``crop(-k)`` would compute k from one layer and apply it to all.
    """
    for layer in _layers(cache):
        extra = layer.get_seq_length() - length
        if extra > 0:
            layer.crop(-extra)


def accepts_logits_to_keep(model: nn.Module) -> bool:
    """Whether ``model.forward`` can project only the last rows through the LM head."""
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def input_device(model: nn.Module) -> torch.device:
    """Where a model's inputs go: the device of its first parameter held in memory. A layer that
    accelerate offloaded (a device map with ``"cpu"`` or ``"disk"`` entries) holds ``meta``
    tensors, and its hooks run it where its map says; an input is never put on ``meta``."""
    for parameter in model.parameters():
        if parameter.device.type != "meta":
            return parameter.device
    return torch.device("cpu")


def run_block(model: nn.Module, cache, cache_kwarg: str, tokens: list[int], start: int, n_tail: int,
              trim_head: bool) -> torch.Tensor:
    """One forward of ``tokens`` placed at positions ``start, start+1, ...`` after ``cache``.

    Returns the float logits of the last ``n_tail`` positions, ``(n_tail, V)``. With ``trim_head``
    only those rows go through the LM head (a catch-up forward over many tokens needs one row).
    """
    device = input_device(model)
    input_ids = torch.tensor([tokens], dtype=torch.long, device=device)
    position_ids = torch.arange(start, start + len(tokens), device=device).unsqueeze(0)
    kwargs = {cache_kwarg: cache, "use_cache": True, "position_ids": position_ids}
    if trim_head:
        kwargs["logits_to_keep"] = n_tail
    out = model(input_ids=input_ids, **kwargs)
    return out.logits[0, -n_tail:].float()


def layers_bytes(layers) -> int:
    """Bytes of the key/value tensors of some cache layers."""
    total = 0
    for layer in layers:
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor):
                total += tensor.numel() * tensor.element_size()
    return total


def common_prefix_length(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class CachedRunner:
    """Runs ``model`` over a growing sequence, returning next-token logits for the requested tail.

    Attributes:
        passes: number of forward passes made (the metric "forward passes").
        fed: token ids whose keys/values the cache holds.
    """

    def __init__(self, model: nn.Module, cache_factory: Callable[[], object] | None = None):
        self.model = model
        self._cache_factory = cache_factory or (lambda: DynamicCache(config=model.config))
        self._cache_kwarg = cache_kwarg_name(model)
        self._trim_head = accepts_logits_to_keep(model)
        self.cache = self._new_cache()
        self.fed: list[int] = []
        self.passes = 0

    def _new_cache(self):
        cache = self._cache_factory()
        enable_rollback(cache)
        return cache

    def reset(self) -> None:
        self.cache = self._new_cache()
        self.fed = []

    @torch.no_grad()
    def logits_for(self, sequence: list[int], n_tail: int) -> torch.Tensor:
        """Logits predicting the token after each of the last ``n_tail`` tokens of ``sequence``.

        Returns a float tensor of shape ``(n_tail, V)``.
        """
        if not sequence:
            raise ConfigError("cannot run a model on an empty sequence (empty prompt?)")
        if not 1 <= n_tail <= len(sequence):
            raise ValueError(f"n_tail={n_tail} must be in [1, {len(sequence)}]")
        keep = min(common_prefix_length(self.fed, sequence), len(sequence) - n_tail)
        if not can_truncate(self.cache, keep):
            self.reset()
            keep = 0
        truncate_cache(self.cache, keep)
        logits = run_block(self.model, self.cache, self._cache_kwarg, sequence[keep:], keep, n_tail, self._trim_head)
        self.passes += 1
        self.fed = list(sequence)
        return logits

    def rollback(self, length: int) -> None:
        """Forgets everything after the first ``length`` tokens."""
        if not can_truncate(self.cache, length):
            self.reset()
            return
        truncate_cache(self.cache, length)
        self.fed = self.fed[:length]

    def cache_bytes(self) -> int:
        """Bytes held by the cache's key/value tensors."""
        return layers_bytes(self.cache.layers)
