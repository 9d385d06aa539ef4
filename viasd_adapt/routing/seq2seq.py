"""The encoder-decoder counterparts of the decoder-only runners (:mod:`viasd_adapt.routing.runner`,
:mod:`viasd_adapt.routing.shared`).

* :class:`Seq2SeqRunner`, the counterpart of :class:`~viasd_adapt.routing.runner.CachedRunner`: the encoder
  output is fixed (:class:`~viasd_adapt.routing.encdec.EncoderContext`, computed once per prompt),
  the decoder ids grow and are cropped to the longest prefix the cache still holds, and everything
  after it is fed in one forward (how q catches up on tokens tiers 1-2 committed).
* :class:`Seq2SeqTargetRunners`, the counterpart of :class:`~viasd_adapt.routing.shared.SeparateRunners`
  (the :class:`~viasd_adapt.routing.shared.TargetRunners` protocol): q and u over the decoder
  sequence, each with its own self-attention cache, both reading the target's one encoder output
  and one shared cross-attention cache (:mod:`viasd_adapt.routing.encdec` explains why sharing
  the cross-attention keys/values is exact).

**No decoder-prefix sharing.** The decoder-only runners let q resume at u's first skipped layer s1
(:class:`~viasd_adapt.routing.shared.SharedPrefixRunners`). Here the work every pass shares for
sure, the encoder, is already done once; sharing the decoder layers below s1 as well would need
family-specific capture/inject stubs (T5 blocks return tuples carrying position biases) and the
cross-attention part of the prefix cache split between roles, for a saving of s1 small decoder
layers per escalation. Until a measurement says that pays, the runners keep separate
self-attention caches (``SeparateRunners`` semantics; ``resumed_full_passes`` stays 0).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from viasd_adapt.errors import ConfigError
from viasd_adapt.model_kind import (
    OWN_ENCODER,
    TARGET_ENCODER_OUTPUT,
    is_encoder_decoder,
    source_reader,
)
from viasd_adapt.routing.encdec import (
    EncoderContext,
    SharedCrossAttention,
    decoder_cache_config,
    seq2seq_cache,
)
from viasd_adapt.routing.runner import (
    accepts_logits_to_keep,
    cache_kwarg_name,
    can_truncate,
    common_prefix_length,
    layers_bytes,
    truncate_cache,
)
from viasd_adapt.routing.shared import SeparateRunners
from viasd_adapt.routing.slim import SlimVerifier


def _cache_layers(cache) -> list:
    return cache.self_attention_cache.layers


class Seq2SeqRunner:
    """Runs one model's decoder over a changing decoder sequence, against a fixed encoder output.

    Attributes:
        passes: decoder forward passes made (the metric "forward passes"; the encoder's one run per
            prompt is not a verification pass and is not counted).
        fed: decoder token ids whose keys/values the self-attention cache holds.
    """

    def __init__(self, model: nn.Module, encoder: EncoderContext, cache_factory: Callable[[], object] | None = None):
        self.model = model
        self.encoder = encoder
        self.reader = source_reader(model)
        if self.reader is None:
            raise ConfigError(f"{type(model).__name__} cannot read a source (neither an encoder nor encoder_outputs)")
        if self.reader == TARGET_ENCODER_OUTPUT and encoder.padded:
            raise ConfigError(
                f"{type(model).__name__} reads the target's encoder output without a source mask; a padded source "
                "would leak padding into its cross-attention (pass an unpadded source)"
            )
        if cache_factory is None:
            config = decoder_cache_config(model)
            cache_factory = lambda: seq2seq_cache(config)  # noqa: E731 - its own cross-attention part
        self._cache_factory = cache_factory
        self._cache_kwarg = cache_kwarg_name(model)
        self._trim_head = accepts_logits_to_keep(model)
        self.cache = cache_factory()
        self.fed: list[int] = []
        self.passes = 0

    def reset(self) -> None:
        self.cache = self._cache_factory()
        self.fed = []

    def _forward(self, tokens: list[int], n_tail: int) -> torch.Tensor:
        device = self.encoder.hidden_states.device
        ids = torch.tensor([tokens], dtype=torch.long, device=device)
        kwargs = {self._cache_kwarg: self.cache, "use_cache": True}
        if self.reader == OWN_ENCODER:
            kwargs.update(encoder_outputs=self.encoder.outputs(), decoder_input_ids=ids)
            if self.encoder.attention_mask is not None:
                kwargs["attention_mask"] = self.encoder.attention_mask
        else:
            kwargs.update(input_ids=ids, encoder_outputs=(self.encoder.hidden_states,))
        if self._trim_head:
            kwargs["logits_to_keep"] = n_tail
        return self.model(**kwargs).logits[0, -n_tail:].float()

    @torch.no_grad()
    def logits_for(self, sequence: list[int], n_tail: int) -> torch.Tensor:
        """Logits predicting the token after each of the last ``n_tail`` decoder tokens, ``(n_tail, V)``."""
        if not sequence:
            raise ConfigError("cannot run a decoder on an empty sequence (no decoder start token?)")
        if not 1 <= n_tail <= len(sequence):
            raise ValueError(f"n_tail={n_tail} must be in [1, {len(sequence)}]")
        keep = min(common_prefix_length(self.fed, sequence), len(sequence) - n_tail)
        if not can_truncate(_cache_layers(self.cache), keep):
            self.reset()
            keep = 0
        truncate_cache(_cache_layers(self.cache), keep)
        logits = self._forward(sequence[keep:], n_tail)
        self.passes += 1
        self.fed = list(sequence)
        return logits

    def cache_bytes(self) -> int:
        """Bytes of the self-attention keys/values (the cross-attention part may be shared)."""
        return layers_bytes(_cache_layers(self.cache))


class Seq2SeqTargetRunners(SeparateRunners):
    """q and u of an encoder-decoder target over one decoder sequence (module docstring).

    Implements :class:`~viasd_adapt.routing.shared.TargetRunners` like
    :class:`~viasd_adapt.routing.shared.SeparateRunners`, with encoder-decoder runners. Both read
    ``encoder`` (the target's encoder output for this prompt) and one :class:`SharedCrossAttention`.
    """

    def __init__(self, target: nn.Module, slim: SlimVerifier | None, encoder: EncoderContext):
        if not is_encoder_decoder(target):
            raise ConfigError(f"{type(target).__name__} is not an encoder-decoder model; use make_target_runners")
        if slim is not None and slim.target is not target:
            raise ConfigError("the slim verifier was built on another model than this target")
        config = decoder_cache_config(target)
        self.cross = SharedCrossAttention(config)
        super().__init__(
            Seq2SeqRunner(target, encoder, lambda: seq2seq_cache(config, None, self.cross)),
            Seq2SeqRunner(slim.model, encoder, lambda: seq2seq_cache(config, slim.mask.retained, self.cross))
            if slim is not None else None,
        )

    def cache_bytes(self) -> dict[str, int]:
        """Key/value bytes: q's and u's self-attention caches, and the cross-attention cache they share."""
        return super().cache_bytes() | {"shared": self.cross.bytes()}

def default_decoder_prompt(target: nn.Module) -> list[int]:
    """``[decoder_start_token_id]`` from the generation config (or the model config)."""
    for config in (getattr(target, "generation_config", None), target.config):
        start = getattr(config, "decoder_start_token_id", None)
        if isinstance(start, int):
            return [start]
    raise ConfigError(f"{type(target).__name__} has no decoder_start_token_id; pass decoder_prompt=[...]")
