"""Encoder-decoder targets through ``generate(assistant_model=...)``: what is particular to them: a
decoder-only Whisper drafter that reads the target's encoder output, and padded batches of sources.

Greedy identity on every family (decoder prefixes, unit-gain targets), sampling, the mode
invariants (lossy against stock, audit), errors, scopes and the registry's runners are tested on
encoder-decoder targets in tests/conformance/ (framework ``seq2seq``)."""

from __future__ import annotations

import torch

import viasd_adapt
from tests.support.seq2seq import VOCAB, seq2seq_pair, source_for, unit_gain_init
from viasd_adapt.adapters import hf
from viasd_adapt.core.settings import TierSettings


def test_lossless_with_a_decoder_only_whisper_drafter_reading_the_target_encoder():
    """distil-Whisper's set-up: a WhisperForCausalLM assistant reads the target's encoder output."""
    target, drafter, mask = seq2seq_pair("whisper", decoder_only_drafter=True)
    assert not drafter.config.is_encoder_decoder
    hf.fix_draft_length(drafter, 5)
    for seed in range(3):
        kwargs = source_for("whisper", seed)
        stock = target.generate(**kwargs, assistant_model=drafter, max_new_tokens=16, do_sample=False)
        with hf.tiered(target,
                       context=viasd_adapt.context(target,
                                                   mask=mask, settings=TierSettings(mode="lossless"))) as session:
            out = target.generate(**kwargs, assistant_model=drafter, max_new_tokens=16, do_sample=False)
        assert out.tolist() == stock.tolist()
        assert session.last_metrics.draft_tokens > 0  # the drafter really drafted from the source


def test_a_padded_batch_decodes_each_row_like_plain_batched_generate():
    target, drafter, mask = seq2seq_pair("bart")
    unit_gain_init(target, seed=0)  # the output must depend on which source positions are masked
    ids = torch.randint(3, VOCAB - 3, (2, 7), generator=torch.Generator().manual_seed(5))
    attention = torch.tensor([[1] * 7, [1] * 4 + [0] * 3])
    plain = target.generate(input_ids=ids, attention_mask=attention, max_new_tokens=12, do_sample=False)
    unmasked = target.generate(input_ids=ids, max_new_tokens=12, do_sample=False)
    assert plain[1].tolist() != unmasked[1].tolist()  # the mask matters for this model and source
    with hf.tiered(target, context=viasd_adapt.context(target, mask=mask, settings=TierSettings(mode="lossless"))):
        out = target.generate(input_ids=ids, attention_mask=attention, assistant_model=drafter, max_new_tokens=12,
                              do_sample=False, return_dict_in_generate=True)
    assert out.sequences.tolist() == plain.tolist()
    assert len(out.viasd_row_metrics) == 2
