"""Skipping decoder layers by identity pass-through (the residual stream goes on unchanged).

Used twice while building a pair: to train the target with LayerDrop (so that it keeps working
when layers are skipped) and to measure how a slim verifier, i.e. the target with a layer mask,
compares with the full target. Routing at inference time is another module's job; this one only
needs the plain Hugging Face Llama forward with no KV cache.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterable, Iterator

import torch
from torch import nn

from viasd_adapt.errors import ConfigError, UnsupportedModelError


class PassThroughLayer(nn.Module):
    """Stands in for a skipped decoder layer: returns the hidden states it is given."""

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        return hidden_states


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The list of decoder layers of a Llama-style causal LM (``model.model.layers``)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise UnsupportedModelError(f"{type(model).__name__} has no model.layers decoder list")
    return layers


@contextlib.contextmanager
def skipped_layers(model: nn.Module, skip: Iterable[int]) -> Iterator[nn.Module]:
    """Within the block, the decoder layers listed in ``skip`` are pass-throughs.

    The original layers (and their parameters, which the optimizer holds) are put back on exit,
    even on error.
    """
    layers = decoder_layers(model)
    skip = sorted(set(skip))
    if skip and not (0 <= skip[0] and skip[-1] < len(layers)):
        raise ConfigError(f"layer indices {skip} out of range for {len(layers)} layers")
    originals = {index: layers[index] for index in skip}
    try:
        for index in skip:
            layers[index] = PassThroughLayer()
        yield model
    finally:
        for index, layer in originals.items():
            layers[index] = layer


def random_mask(num_layers: int, ratio: float, rng: random.Random, keep_first: bool = True) -> list[int]:
    """Indices of ``round(ratio * num_layers)`` layers to skip, drawn at random.

    With ``keep_first`` layer 0 is never drawn: it turns raw embeddings into the representation
    every later layer expects, and skipping it collapses small models (docs/method.md section 2).
    """
    if not 0.0 <= ratio < 1.0:
        raise ConfigError(f"skip ratio must be in [0, 1), got {ratio}")
    count = round(ratio * num_layers)
    candidates = list(range(1 if keep_first else 0, num_layers))
    if count > len(candidates):
        raise ConfigError(f"cannot skip {count} of {num_layers} layers")
    return sorted(rng.sample(candidates, count))
