"""Tiny encoder-decoder target/drafter pairs shared by the seq2seq test modules.

As for the decoder-only pairs (:mod:`tests.support.pairs`), a random drafter would disagree with a random
target almost everywhere, so the drafter is the target's first layers: its embeddings, its first
encoder layer, its first decoder layer and its head, copied into a separate, smaller model of the
same family. Whisper's pair can also use a decoder-only drafter (``WhisperForCausalLM``, the
distil-Whisper set-up) that reads the target's encoder output.
"""

from __future__ import annotations

import torch
from transformers import WhisperForCausalLM

from tests.support.pairs import TinyPair, half_mask, sharpen
from viasd_adapt.models.tiny_seq2seq import synthetic_features, tiny_seq2seq_config, tiny_seq2seq_model

VOCAB = 96


def copy_matching(source: torch.nn.Module, destination: torch.nn.Module) -> torch.nn.Module:
    """Loads every tensor of ``source`` whose name and shape ``destination`` has."""
    own = destination.state_dict()
    state = {k: v for k, v in source.state_dict().items() if k in own and own[k].shape == v.shape}
    destination.load_state_dict(state, strict=False)
    return destination.eval()


def unit_gain_init(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Re-draws every weight matrix with unit gain (std 1/sqrt(fan_in); embeddings std 1).

    transformers' small init (std 0.02) leaves a tiny random BART almost deaf to its source: its
    greedy output barely changes with the source or with which source positions are masked. With
    unit gain every layer, cross-attention included, writes as much as the embeddings, so a test
    that needs source sensitivity can fail when the source is mishandled.
    """
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if weight.dim() >= 2:
                std = 1.0 if "embed" in name or "shared" in name else weight.shape[-1] ** -0.5
                weight.copy_(torch.randn(weight.shape, generator=generator) * std)
    return model


#: Head scaling per family: the random BART/Whisper-style heads are nearly flat, T5's already peaked
#: (scaled further, its drafter would agree with it everywhere and nothing would be tested).
SHARPNESS = {"t5": 1.0}


def seq2seq_pair(family: str, layers: int = 4, vocab_size: int = VOCAB, sharpness: float | None = None,
                 seed: int = 0, decoder_only_drafter: bool = False, unit_gain: bool = False) -> TinyPair:
    """(target, drafter, mask skipping about half the decoder layers, never layer 0).

    ``unit_gain`` re-draws the target's weights (:func:`unit_gain_init`) before the drafter copies
    its first layers: a source-sensitive pair whose drafter is rejected more often.
    """
    target = tiny_seq2seq_model(family, seed, decoder_layers=layers, vocab_size=vocab_size)
    if unit_gain:
        unit_gain_init(target, seed)
        sharpness = 1.0 if sharpness is None else sharpness
    sharpness = SHARPNESS.get(family, 3.0) if sharpness is None else sharpness
    if sharpness != 1.0:
        sharpen(target, sharpness)
    if decoder_only_drafter:
        config = tiny_seq2seq_config(family, vocab_size=vocab_size, decoder_layers=1)
        config.is_encoder_decoder = False
        drafter = WhisperForCausalLM(config)
        own = drafter.state_dict()
        mapped = {"model." + k[len("model."):]: v for k, v in target.state_dict().items() if k.startswith("model.decoder.")}
        mapped["proj_out.weight"] = target.state_dict()["proj_out.weight"]
        drafter.load_state_dict({k: v for k, v in mapped.items() if k in own and own[k].shape == v.shape}, strict=False)
        drafter.eval()
    else:
        drafter = copy_matching(target, tiny_seq2seq_model(family, seed + 1, decoder_layers=1, encoder_layers=1,
                                                           vocab_size=vocab_size))
    return TinyPair(target, drafter, half_mask(layers))


def source_for(family: str, seed: int = 0, length: int = 6) -> dict:
    """The generate() keyword carrying a source: ``input_ids`` (text) or ``input_features`` (Whisper)."""
    if family == "whisper":
        return {"input_features": synthetic_features(seed)}
    generator = torch.Generator().manual_seed(seed)
    return {"input_ids": torch.randint(3, VOCAB - 3, (1, length), generator=generator)}


def damped_seq2seq_pair(family: str = "whisper", layers: int = 6) -> TinyPair:
    """A pair whose skipped decoder layers barely write to the residual stream, so the slim
    verifier agrees with q where the drafter does not: the regime the tier is for."""
    from viasd_adapt.routing.layers import find_decoder_stack

    target, drafter, mask = seq2seq_pair(family, layers=layers)
    with torch.no_grad():
        for index in mask.skipped:
            layer = find_decoder_stack(target).layers[index]
            for module in (layer.self_attn.out_proj, layer.encoder_attn.out_proj, layer.fc2):
                module.weight.mul_(0.05)
    return TinyPair(target, drafter, mask)
