"""The slim verifier u over EAGLE's draft tree: a routed view of eagle's base model and its own cache.

The view is built with :func:`viasd_adapt.routing.view.build_layer_view`, so it shares every weight
with eagle's base model, never modifies it, copies the hook registries and re-binds instance-level
forwards (accelerate's device hooks): with a ``device_map`` model the view still runs only the
retained layers. Skipped layers are :class:`EagleSkippedLayer` stubs with eagle's layer API (eagle's
decoder layers return ``(hidden_states, present)`` tuples and the stock
:class:`~viasd_adapt.routing.view.PassThroughLayer` returns a tensor); what they record and inject
for the shared prefix is :class:`~viasd_adapt.routing.shared.HiddenSlot`'s, as in every framework.

The cache is eagle's pre-allocated ``KVCache`` for the retained layers only; skipped layers hold a
length counter and no tensors (eagle reads the cache length from layer 0, which may be skipped).
For prefix sharing (package docstring) the stub at the first skipped layer s1 records the residual
stream entering it, ``h_s1``, for every token the slim verifier processes, in a buffer laid out and
compacted exactly like the KV cache.
"""

from __future__ import annotations

import torch
from torch import nn

from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.routing.shared import HiddenSlot
from viasd_adapt.routing.view import build_layer_view, view_owner
from viasd_adapt.routing.mask import check_mask_layers


class EagleSkippedLayer(nn.Module):
    """A bypassed decoder layer with eagle's layer API: returns ``(hidden_states, None)``.

    It advances its layer's length counters, so eagle, which reads the cache length from layer 0,
    sees the right length even when layer 0 is skipped. With a ``slot`` it also records the
    residual stream entering it (``h_s1`` when it stands at the first skipped layer).
    """

    def __init__(self, index: int, slot: HiddenSlot | None = None):
        super().__init__()
        self.index = index
        self.slot = slot

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_value=None,
                output_attentions=False, use_cache=False):
        if self.slot is not None:
            self.slot.record(hidden_states)
        _advance(past_key_value, hidden_states.shape[1])
        return (hidden_states, None)

    def extra_repr(self) -> str:
        return f"skipped_layer={self.index}" + (", records_input" if self.slot is not None else "")


class EagleInjectLayer(nn.Module):
    """Stands in for the last layer below s1 in a resumed q pass: returns the stored ``h_s1``."""

    def __init__(self, index: int, slot: HiddenSlot):
        super().__init__()
        self.index = index
        self.slot = slot

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_value=None,
                output_attentions=False, use_cache=False):
        value = self.slot.take(hidden_states)
        _advance(past_key_value, hidden_states.shape[1])
        return (value, None)

    def extra_repr(self) -> str:
        return f"inject_output_of_layer={self.index}"


def _advance(past_key_value, n: int) -> None:
    if past_key_value is not None:
        for part in past_key_value:
            part.current_length.add_(n)


class LengthOnly:
    """Stands in for eagle's ``KVCache`` on a layer that keeps no tensors: a length, nothing else."""

    def __init__(self, current_length: torch.Tensor):
        self.current_length = current_length

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (1, 0, int(self.current_length), 0)


def cache_shape(base_model: nn.Module) -> tuple[int, int, int, int]:
    """One layer's key (or value) buffer as eagle allocates it: (1, kv_heads, max_positions, head_dim)."""
    config = base_model.config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return (1, kv_heads, config.max_position_embeddings, config.hidden_size // heads)


class SlimTreeVerifier:
    """u for an eagle base model: a routed view of it, a KV cache for the retained layers, and
    (``record_prefix=True``) the buffer of ``h_s1`` per cache slot.

    ``valid`` is how many committed tokens the cache holds (the rest of the sequence is u's lag,
    fed again in front of the next tree).
    """

    def __init__(self, base_model: nn.Module, mask: RoutingMask, record_prefix: bool = False):
        check_mask_layers(mask, base_model)
        self.base_model = base_model
        self.mask = mask
        s1 = mask.first_skipped
        self.s1 = s1
        self.slot = HiddenSlot() if record_prefix and 0 < s1 < mask.num_layers else None
        layers = [
            layer if keep else EagleSkippedLayer(i, self.slot if i == s1 else None)
            for i, (layer, keep) in enumerate(zip(base_model.model.layers, mask.keep))
        ]
        self.view = build_layer_view(base_model, layers)
        self.decoder = view_owner(self.view)  # eagle's LlamaModel, routed
        self.decoder.tree_mask = None
        self._dtype = base_model.lm_head.weight.dtype
        self._device = base_model.lm_head.weight.device
        self.data: torch.Tensor | None = None
        self.hidden: torch.Tensor | None = None  # (max_positions, H): h_s1 per slot, when recording
        self.lengths: torch.Tensor | None = None
        self.past: list | None = None
        self.valid = 0
        self.passes = 0

    @property
    def records_prefix(self) -> bool:
        return self.slot is not None

    def new_generation(self) -> None:
        """Allocates (once) and empties the cache."""
        from eagle.model.kv_cache import KVCache

        if self.data is None:
            shape = cache_shape(self.base_model)
            self.data = torch.zeros((2 * len(self.mask.retained), *shape), dtype=self._dtype, device=self._device)
            self.lengths = torch.zeros(2 * self.mask.num_layers, dtype=torch.long)
            if self.slot is not None:
                hidden_size = self.base_model.config.hidden_size
                self.hidden = torch.zeros((shape[2], hidden_size), dtype=self._dtype, device=self._device)
            past, slot = [], 0
            for i, keep in enumerate(self.mask.keep):
                if keep:
                    past.append([KVCache(self.data[slot], self.lengths[2 * i]), KVCache(self.data[slot + 1], self.lengths[2 * i + 1])])
                    slot += 2
                else:
                    past.append([LengthOnly(self.lengths[2 * i]), LengthOnly(self.lengths[2 * i + 1])])
            self.past = past
        self.lengths.zero_()
        self.valid = 0

    def cache_bytes(self) -> int:
        """Bytes of the slim verifier's own buffers (KV cache, and the h_s1 buffer when recording)."""
        return sum(t.numel() * t.element_size() for t in (self.data, self.hidden) if t is not None)

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, position_ids: torch.Tensor, tree_mask) -> tuple[torch.Tensor, torch.Tensor]:
        """Feeds ``tokens`` (1, n) at cache slot ``valid``; the last ``tree_mask``-sized block
        attends by the tree mask. Returns ``(logits (n, V), hidden (n, H))``."""
        start = self.valid
        self.lengths.fill_(start)
        self.decoder.tree_mask = tree_mask
        try:
            hidden = self.decoder(input_ids=tokens, past_key_values=self.past, position_ids=position_ids, return_dict=False)[0]
            if self.slot is not None:
                self.hidden[start : start + tokens.shape[1]] = self.slot.value[0]
        finally:
            self.decoder.tree_mask = None
            if self.slot is not None:
                self.slot.value = None
        self.passes += 1
        return self.base_model.lm_head(hidden)[0].float(), hidden[0]

    def tree_pass(self, input_ids: torch.Tensor, tree_tokens: torch.Tensor, tree_positions: torch.Tensor,
                  tree_mask) -> tuple[torch.Tensor, torch.Tensor]:
        """u over its lag (committed tokens it has not seen) plus the tree ``tree_tokens`` (1, n)
        at depths ``tree_positions`` below the end of ``input_ids``, in one forward. Returns the
        tree's ``(logits (n, V), hidden (n, H))``; the cache then holds the whole committed sequence
        and the tree after it (slots by tree node)."""
        length = input_ids.shape[1]
        device = tree_tokens.device
        tokens = torch.cat([input_ids[:, self.valid :].to(device), tree_tokens], dim=1)
        positions = torch.cat([torch.arange(self.valid, length, device=device), tree_positions.to(device) + length])[None]
        logits, hidden = self.forward(tokens, positions, tree_mask)
        self.valid = length
        n = tree_tokens.shape[1]
        return logits[-n:], hidden[-n:]

    def compact(self, sources: torch.Tensor, start: int) -> None:
        """Moves the entries at slots ``sources`` to ``start, start+1, ...``; ``valid`` follows."""
        if self.data is not None and sources.numel():
            picked = self.data[..., sources.to(self.data.device), :]
            self.data[..., start : start + sources.numel(), :] = picked
            if self.hidden is not None:
                self.hidden[start : start + sources.numel()] = self.hidden[sources.to(self.hidden.device)]
        self.valid = start + sources.numel()
        self.lengths.fill_(self.valid)

    def prefix_entries(self, slots: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``h_s1`` and the keys/values of every layer below s1 at ``slots``: what q needs to resume
        at s1 and to keep its own cache complete below it."""
        if self.hidden is None:
            raise RuntimeError("this slim verifier does not record its prefix (record_prefix=False or s1 = 0)")
        # layers below s1 are all retained, so they occupy the first 2*s1 rows of the cache
        kv = [self.data[row][..., slots.to(self.data.device), :] for row in range(2 * self.s1)]
        return self.hidden[slots.to(self.hidden.device)], kv


__all__ = ["EagleInjectLayer", "EagleSkippedLayer", "LengthOnly", "SlimTreeVerifier", "cache_shape"]
