"""The slim verifier's own KV cache: a ``DynamicCache`` in which the skipped layers stay empty.

Its own module (not :mod:`viasd_adapt.routing.slim`) because both the slim view and the
encoder-decoder caches (:mod:`viasd_adapt.routing.encdec`, whose slim self-attention part is a
SlimCache) build it, and the slim view in turn builds encoder-decoder caches: the cache is the
piece they share, so it sits below both.

**Layer 0 pitfall.** HF reads the cache length from layer 0 for position ids and masks. When
layer 0 is skipped it is empty, so :class:`SlimCache` answers length queries from the first
retained layer of the same attention type.
"""

from __future__ import annotations

from transformers import DynamicCache


class SlimCache(DynamicCache):
    """A DynamicCache that tolerates empty (skipped) layers.

    Length and mask-size queries name a layer index, usually 0. For a skipped layer we answer from
    the first retained layer of the same cache-layer type (full vs. sliding attention), falling back
    to any retained layer.
    """

    def __init__(self, config, retained: tuple[int, ...]):
        super().__init__(config=config)
        self._retained = tuple(retained)
        self._skipped = set(range(len(self.layers))) - set(retained)

    def _stand_in(self, layer_idx: int) -> int:
        if layer_idx not in self._skipped or layer_idx >= len(self.layers):
            return layer_idx
        wanted = type(self.layers[layer_idx])
        for idx in self._retained:
            if idx < len(self.layers) and type(self.layers[idx]) is wanted:
                return idx
        return self._retained[0]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return super().get_seq_length(self._stand_in(layer_idx))

    def get_mask_sizes(self, query_length: int, layer_idx: int) -> tuple[int, int]:
        return super().get_mask_sizes(query_length, self._stand_in(layer_idx))

    def get_query_offset(self, layer_idx: int = 0) -> int:
        return super().get_query_offset(self._stand_in(layer_idx))


__all__ = ["SlimCache"]
