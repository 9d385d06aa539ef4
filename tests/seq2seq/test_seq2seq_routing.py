"""Routing encoder-decoder models: decoder-stack discovery, skip stubs (T5's position bias), the
slim verifier's EncoderDecoderCache, and the seq2seq runners over a changing decoder sequence."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import DynamicCache, PegasusConfig, PegasusForConditionalGeneration

from tests.support.seq2seq import seq2seq_pair, source_for
from viasd_adapt.adapters import hf
from viasd_adapt.errors import ConfigError, UnsupportedModelError
from viasd_adapt.models.tiny_seq2seq import SEQ2SEQ_FAMILIES, tiny_seq2seq_model
from viasd_adapt.routing.encdec import EncoderContext, decoder_cache_config
from viasd_adapt.routing.layers import T5_LAYOUT, find_decoder_stack
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.routing.shared import make_target_runners
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.routing.view import T5PassThroughBlock, build_layer_view
from viasd_adapt.routing.seq2seq import Seq2SeqTargetRunners


DECODER = torch.tensor([[94, 10, 12, 30, 3, 8, 41, 7]])


def source_kwargs(model, family: str) -> dict:
    return source_for(family, seed=3, length=7)


@torch.no_grad()
def logits(model, family: str, decoder=DECODER, **kwargs) -> torch.Tensor:
    return model(**source_kwargs(model, family), decoder_input_ids=decoder, **kwargs).logits


@pytest.mark.parametrize("family", SEQ2SEQ_FAMILIES)
def test_the_decoder_stack_is_found_and_sizes_the_decoder_cache(family):
    model = tiny_seq2seq_model(family, decoder_layers=4, encoder_layers=3)
    stack = find_decoder_stack(model)
    assert stack.encoder_decoder and stack.num_layers == 4
    decoder = model.get_decoder()
    assert stack.layers is (decoder.block if family == "t5" else decoder.layers)  # the decoder's, not the encoder's
    assert (stack.layout == T5_LAYOUT) == (family == "t5")
    assert len(DynamicCache(config=decoder_cache_config(model)).layers) == 4
    if family == "t5":  # T5's own config sizes the encoder's depth: the reason for decoder_cache_config
        assert len(DynamicCache(config=model.config).layers) == 3


def test_other_encoder_decoder_models_are_refused_naming_what_was_looked_for():
    config = PegasusConfig(vocab_size=32, d_model=16, encoder_layers=1, decoder_layers=2, encoder_attention_heads=2,
                           decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64)
    pegasus = PegasusForConditionalGeneration(config).eval()
    with pytest.raises(UnsupportedModelError, match=r"'pegasus'.*t5 \(decoder\.block\).*whisper \(model\.decoder\.layers\)"):
        find_decoder_stack(pegasus)
    with pytest.raises(UnsupportedModelError, match="pegasus"):
        hf.patch(pegasus)  # refused before any context is built
    assert not hf.is_patched(pegasus)


@pytest.mark.parametrize("family", SEQ2SEQ_FAMILIES)
def test_slim_view_with_its_cache_matches_its_own_full_forward(family):
    """Incremental decoding through the slim view (EncoderDecoderCache with a SlimCache self-attention
    part, layer 0 skipped: length queries answered from a retained layer) equals its one-shot forward."""
    model = tiny_seq2seq_model(family)
    slim = SlimVerifier(model, RoutingMask.from_skipped(4, [0, 2]))
    full = logits(slim.model, family)
    assert (full - logits(model, family)).abs().max() > 1e-3  # u is not q
    cache = slim.new_cache()
    steps = [logits(slim.model, family, DECODER[:, :3], cache=cache, use_cache=True)]
    for t in range(3, DECODER.shape[1]):
        steps.append(logits(slim.model, family, DECODER[:, t : t + 1], cache=cache, use_cache=True))
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-4)
    assert cache.self_attention_cache.layers[0].get_seq_length() == 0  # the skipped layer never got keys


def _identity_block_copy(model, index: int):
    """A copy of a T5 model whose block ``index`` adds nothing to the residual stream (its output
    projections zeroed) but still computes the relative position bias: T5 is pre-norm, so that is
    exactly "block bypassed, positional scheme kept"."""
    reference = copy.deepcopy(model)
    block = find_decoder_stack(reference).layers[index]
    with torch.no_grad():
        block.layer[0].SelfAttention.o.weight.zero_()
        block.layer[1].EncDecAttention.o.weight.zero_()
        block.layer[-1].DenseReluDense.wo.weight.zero_()
    return reference


def test_t5_skipping_block_0_keeps_the_shared_relative_position_bias():
    model = tiny_seq2seq_model("t5")
    mask = RoutingMask.from_skipped(4, [0, 2])
    slim = SlimVerifier(model, mask)
    reference = _identity_block_copy(_identity_block_copy(model, 0), 2)
    assert torch.allclose(logits(slim.model, "t5"), logits(reference, "t5"), atol=1e-5)
    # cached decoding: block 0's stub computes the bias for queries after the cached positions
    cache = slim.new_cache()
    first = logits(slim.model, "t5", DECODER[:, :5], cache=cache, use_cache=True)
    rest = logits(slim.model, "t5", DECODER[:, 5:], cache=cache, use_cache=True)
    assert torch.allclose(torch.cat([first, rest], dim=1), logits(reference, "t5"), atol=1e-5)
    # Control: a stub that only passes the (absent) bias through gives every block a zero bias.
    stack = find_decoder_stack(model)
    naive = build_layer_view(model, [T5PassThroughBlock(0)] + [stack.layers[1], T5PassThroughBlock(2), stack.layers[3]])
    assert (logits(naive, "t5") - logits(reference, "t5")).abs().max() > 1e-2


@pytest.mark.parametrize("family", ["t5", "bart", "whisper"])
def test_target_runners_follow_a_changing_sequence_and_share_cross_attention(family):
    target, _, mask = seq2seq_pair(family)
    slim = SlimVerifier(target, mask)
    context = EncoderContext.encode(target, next(iter(source_for(family, seed=3, length=7).values())))
    runners = Seq2SeqTargetRunners(target, slim, context)
    seq = DECODER[0].tolist()
    # u first: it projects the encoder output for its retained layers; q reuses those and adds its own
    u = runners.slim_logits(seq[:5], 3)
    q = runners.full_logits(seq[:6], 2)
    q_again = runners.full_logits(seq[:4] + [50, 51, 52], 3)  # rejected tail cropped, new tokens caught up
    u_again = runners.slim_logits(seq, 4)
    assert torch.allclose(u, logits(slim.model, family, DECODER[:, :5])[0, -3:], atol=1e-4)
    assert torch.allclose(q, logits(target, family, DECODER[:, :6])[0, -2:], atol=1e-4)
    assert torch.allclose(q_again, logits(target, family, torch.tensor([seq[:4] + [50, 51, 52]]))[0, -3:], atol=1e-4)
    assert torch.allclose(u_again, logits(slim.model, family)[0, -4:], atol=1e-4)
    assert runners.full_passes == 2 and runners.slim_passes == 2 and runners.resumed_full_passes == 0
    # one cross-attention cache, filled once per layer, read by both models
    full_cache, slim_cache = runners.full.cache, runners.slim.cache
    assert full_cache.cross_attention_cache is slim_cache.cross_attention_cache
    assert full_cache.is_updated is slim_cache.is_updated and all(full_cache.is_updated.values())
    source_length = context.hidden_states.shape[1]
    for layer in full_cache.cross_attention_cache.layers:
        assert layer.get_seq_length() == source_length  # never appended twice
    sizes = runners.cache_bytes()
    assert sizes["shared"] > 0 and 0 < sizes["slim"] < sizes["full"]


def test_decoder_only_runners_refuse_an_encoder_decoder_target():
    target, _, mask = seq2seq_pair("bart")
    with pytest.raises(ConfigError, match="Seq2SeqTargetRunners"):
        make_target_runners(target, SlimVerifier(target, mask))
