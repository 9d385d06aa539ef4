"""Encoder-decoder plumbing for routing: the encoder's output per prompt, and the decoder's caches.

Why these choices (docs/method.md section 2, for T5/BART/Whisper-style models):

* **Only decoder layers are routed.** The encoder runs once per prompt; its output
  (:class:`EncoderContext`) is computed once and handed to every decoder pass of the same model, as
  transformers' ``generate`` does. The slim verifier u and the target q are the same model, so they
  share the target's encoder output; an encoder-decoder drafter keeps its own encoder (run once per
  prompt too), a decoder-only drafter that reads ``encoder_outputs`` (distil-Whisper's
  ``WhisperForCausalLM``) reads the target's.
* **Self-attention caches are per model.** u's retained layers see u's residual stream, so their
  keys/values differ from q's: u gets a :class:`~viasd_adapt.routing.slim_cache.SlimCache` (skipped
  layers stay empty, length queries answered from a retained layer), q a plain ``DynamicCache``.
* **The cross-attention cache is shared.** A cross-attention layer's keys/values are a function of
  the encoder output and that layer's weights only, not of the decoder's residual stream, so u's
  and q's are bit-identical for every layer u retains. :class:`SharedCrossAttention` holds one
  cross-attention ``DynamicCache`` and one ``is_updated`` table for the prompt, and both models'
  ``EncoderDecoderCache`` objects point at them: whichever model reaches a layer first projects the
  encoder output, the other reuses it. u never touches the layers it skips. Memory: one set of
  cross-attention keys/values instead of two; no correctness cost (cropping a decoder cache never
  touches the cross-attention part, which does not grow with the decoded sequence).
* **Cache sizes come from the decoder.** ``DynamicCache(config=...)`` pre-allocates
  ``config.num_hidden_layers`` layers, which for T5 and Whisper is the *encoder's* depth.
  :func:`decoder_cache_config` gives a copy of the config with the decoder's depth (what Whisper's
  own decoder does), checked against the stack.

How a model reads the source (:func:`~viasd_adapt.model_kind.source_reader`, :data:`OWN_ENCODER`,
:data:`TARGET_ENCODER_OUTPUT`) is decided in :mod:`viasd_adapt.model_kind` and importable from here too.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn
from transformers import DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutput

from viasd_adapt.checks import check_encoder_source
from viasd_adapt.errors import ConfigError, UnsupportedModelError
from viasd_adapt.model_kind import OWN_ENCODER, TARGET_ENCODER_OUTPUT, is_encoder_decoder, source_reader
from viasd_adapt.routing.layers import find_decoder_stack
from viasd_adapt.routing.slim_cache import SlimCache
from viasd_adapt.routing.runner import layers_bytes


def decoder_cache_config(model: nn.Module):
    """A copy of ``model.config`` from which ``DynamicCache(config=...)`` builds one layer per
    decoder layer of ``model``."""
    layers = find_decoder_stack(model).num_layers
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = layers  # T5: num_layers (the encoder's); Whisper/BART: encoder_layers
    built = len(DynamicCache(config=config).layers)
    if built != layers:
        raise UnsupportedModelError(
            f"cannot size a decoder cache for {type(model).__name__}: its config builds {built} cache layers for "
            f"{layers} decoder layers"
        )
    return config


class SharedCrossAttention:
    """One prompt's cross-attention keys/values, shared by the caches of every pass of one model
    (module docstring). ``is_updated[l]`` is transformers' flag that layer ``l`` already holds them."""

    def __init__(self, config):
        self.cache = DynamicCache(config=config)
        self.is_updated: dict[int, bool] = {i: False for i in range(len(self.cache.layers))}

    def attach(self, self_attention) -> EncoderDecoderCache:
        """An ``EncoderDecoderCache`` over ``self_attention`` and this shared cross-attention part."""
        cache = EncoderDecoderCache(self_attention, self.cache)
        cache.is_updated = self.is_updated  # the same table: a layer projected once is reused by all
        return cache

    def bytes(self) -> int:
        return layers_bytes(self.cache.layers)


@dataclass(frozen=True)
class EncoderContext:
    """One prompt's encoder output (batch of one), and the source mask cross-attention uses.

    Attributes:
        hidden_states: ``(1, S, H)`` the encoder's last hidden state.
        attention_mask: ``(1, S)`` 1 for real source positions, or None (no padding).
    """

    hidden_states: torch.Tensor
    attention_mask: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.hidden_states.dim() != 3 or self.hidden_states.shape[0] != 1:
            raise ConfigError(f"an encoder context holds one prompt, (1, S, H); got {tuple(self.hidden_states.shape)}")
        if self.attention_mask is not None and self.attention_mask.shape != self.hidden_states.shape[:2]:
            raise ConfigError(
                f"source attention_mask {tuple(self.attention_mask.shape)} does not fit the encoder output "
                f"{tuple(self.hidden_states.shape[:2])}"
            )

    @property
    def padded(self) -> bool:
        return self.attention_mask is not None and bool((self.attention_mask == 0).any())

    def outputs(self) -> BaseModelOutput:
        return BaseModelOutput(last_hidden_state=self.hidden_states)

    @classmethod
    def from_outputs(cls, encoder_outputs, row: int = 0, attention_mask: torch.Tensor | None = None) -> "EncoderContext":
        """Row ``row`` of a batched encoder output (a ModelOutput, a tuple, or a tensor)."""
        hidden = encoder_outputs
        if not isinstance(hidden, torch.Tensor):
            hidden = hidden["last_hidden_state"] if hasattr(hidden, "keys") else hidden[0]
        mask = attention_mask[row : row + 1] if attention_mask is not None else None
        return cls(hidden[row : row + 1], mask)

    @classmethod
    @torch.no_grad()
    def encode(cls, model: nn.Module, inputs: torch.Tensor, attention_mask: torch.Tensor | None = None) -> "EncoderContext":
        """Runs ``model``'s encoder once on one source: token ids ``(1, S)`` for text models, input
        features ``(1, mel, frames)`` for Whisper (``model.main_input_name`` says which)."""
        if not is_encoder_decoder(model) or not hasattr(model, "get_encoder"):
            raise ConfigError(f"{type(model).__name__} has no encoder to run")
        check_encoder_source(inputs)
        name = getattr(model, "main_input_name", "input_ids")
        kwargs = {name: inputs}
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask
        out = model.get_encoder()(**kwargs)
        return cls(out[0] if not hasattr(out, "last_hidden_state") else out.last_hidden_state, attention_mask)


def seq2seq_cache(config, retained: tuple[int, ...] | None = None,
                  cross: SharedCrossAttention | None = None) -> EncoderDecoderCache:
    """A decoder cache for one model pass role: a ``SlimCache`` over ``retained`` layers (the slim
    verifier) or a full ``DynamicCache`` (``retained=None``), plus the cross-attention part, shared
    when ``cross`` is given. ``config`` comes from :func:`decoder_cache_config`."""
    self_attention = DynamicCache(config=config) if retained is None else SlimCache(config, retained)
    return (cross or SharedCrossAttention(config)).attach(self_attention)


def self_attention_layers(cache) -> list:
    """The growing (self-attention) cache layers of a decoder cache; the cross-attention part does
    not depend on the decoded tokens and is never cropped."""
    inner = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
    return inner.layers


__all__ = [
    "OWN_ENCODER",
    "TARGET_ENCODER_OUTPUT",
    "EncoderContext",
    "SharedCrossAttention",
    "decoder_cache_config",
    "self_attention_layers",
    "seq2seq_cache",
    "source_reader",
]
