"""Encoder-decoder targets: bad input particular to them gets a clear viasd error (drafters that
cannot read the source, missing or padded sources, encoder outputs only, padded decoder prompts,
Whisper without features, feature files).

Scopes (restored after every mode and after exceptions, on T5) and the bad input every framework
refuses (empty source, budget 0, vocabularies, masks for another model) are tested on
encoder-decoder targets in tests/conformance/ (framework ``seq2seq``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import viasd_adapt
from tests.support.seq2seq import seq2seq_pair, source_for
from viasd_adapt.adapters import hf
from viasd_adapt.errors import ConfigError, ModelMismatchError, ViasdError
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.routing.encdec import EncoderContext
from viasd_adapt.config.mask import RoutingMask
from viasd_adapt.routing.seq2seq import Seq2SeqRunner
from viasd_adapt.frameworks.seq2seq import load_input_features
from viasd_adapt.engine.seq2seq import seq2seq_generate
from viasd_adapt.core.settings import TierSettings


@pytest.fixture(scope="module")
def t5():
    return seq2seq_pair("t5")


def assert_pristine(target):
    assert "generate" not in target.__dict__ and "_get_candidate_generator" not in target.__dict__
    assert target.generate.__func__ is type(target).generate
    assert not hf.is_patched(target)
    assert not target._forward_hooks and not target._forward_pre_hooks


@pytest.mark.parametrize("mode", ["lossless", "lossy"])
def test_a_decoder_only_drafter_cannot_draft_for_a_seq2seq_target(t5, mode):
    target, _, mask = t5
    llama = tiny_model("llama", 3, num_layers=1, vocab_size=96)
    with hf.tiered(target, context=viasd_adapt.context(target, mask=mask, settings=TierSettings(mode=mode))):
        with pytest.raises(ModelMismatchError, match="decoder-only model that cannot read the source"):
            target.generate(**source_for("t5", 0), assistant_model=llama, max_new_tokens=4, do_sample=False)
    with pytest.raises(ModelMismatchError, match="cannot read the source"):
        seq2seq_generate(target, llama, source_for("t5", 0)["input_ids"], 4, TierSettings(mode="none"))
    # and the other way round: an encoder-decoder drafter has no source to read for a causal target
    causal = tiny_model("llama", 0, num_layers=2, vocab_size=96)
    with hf.tiered(causal,
                   context=viasd_adapt.context(causal,
                                               mask=RoutingMask.from_skipped(2, [1]),
                                               settings=TierSettings(mode=mode))):
        with pytest.raises(ModelMismatchError, match="encoder-decoder model but the target"):
            causal.generate(torch.tensor([[1, 2, 3]]), assistant_model=target, max_new_tokens=4, do_sample=False)
    assert_pristine(target)
    assert not hf.is_patched(causal)


def test_missing_or_padded_encoder_inputs(t5):
    target, drafter, mask = t5
    decoder = torch.tensor([[94]])
    with hf.tiered(target, context=viasd_adapt.context(target, mask=mask, settings=TierSettings(mode="lossy"))):
        with pytest.raises(ConfigError, match="source is missing"):
            target.generate(decoder_input_ids=decoder, assistant_model=drafter, max_new_tokens=4)
        with pytest.raises(ConfigError, match="all padding"):
            target.generate(input_ids=torch.ones((2, 3), dtype=torch.long), attention_mask=torch.tensor([[1, 1, 1], [0, 0, 0]]),
                            assistant_model=drafter, max_new_tokens=4)
        encoded = target.get_encoder()(**source_for("t5", 0))
        with pytest.raises(ConfigError, match="has its own encoder and needs the source"):
            target.generate(encoder_outputs=encoded, decoder_input_ids=decoder, assistant_model=drafter, max_new_tokens=4)
        with pytest.raises(ConfigError, match="padded decoder prompts"):
            target.generate(**source_for("t5", 0), decoder_input_ids=torch.tensor([[94, 5]]),
                            decoder_attention_mask=torch.tensor([[0, 1]]), assistant_model=drafter, max_new_tokens=4)
    assert_pristine(target)
    with pytest.raises(ConfigError, match="source is missing"):
        seq2seq_generate(target, drafter, None, 4, TierSettings(mode="none"))


def test_whisper_without_features():
    target, drafter, mask = seq2seq_pair("whisper")
    with hf.tiered(target, context=viasd_adapt.context(target, mask=mask, settings=TierSettings(mode="lossy"))):
        with pytest.raises(ConfigError, match="source is missing"):
            target.generate(assistant_model=drafter, max_new_tokens=4)
    assert not hf.is_patched(target)


def test_a_decoder_reading_the_target_encoder_refuses_a_padded_source():
    target, drafter, _ = seq2seq_pair("whisper", decoder_only_drafter=True)
    hidden = torch.zeros(1, 5, 32)
    with pytest.raises(ConfigError, match="padded source"):
        Seq2SeqRunner(drafter, EncoderContext(hidden, torch.tensor([[1, 1, 1, 0, 0]])))
    with pytest.raises(ConfigError, match="does not fit"):
        EncoderContext(hidden, torch.tensor([[1, 1]]))


def test_input_features_files(tmp_path):
    features = np.random.default_rng(0).standard_normal((8, 32)).astype(np.float32)
    np.save(tmp_path / "f.npy", features)
    torch.save(torch.from_numpy(features).unsqueeze(0), tmp_path / "f.pt")
    assert load_input_features(tmp_path / "f.npy").shape == (1, 8, 32)
    assert torch.equal(load_input_features(tmp_path / "f.pt"), load_input_features(tmp_path / "f.npy"))
    with pytest.raises(ViasdError, match="not found"):
        load_input_features(tmp_path / "missing.npy")
    np.save(tmp_path / "ids.npy", np.arange(5))
    with pytest.raises(ConfigError, match="float array"):
        load_input_features(tmp_path / "ids.npy")
    (tmp_path / "f.txt").write_text("1 2 3")
    with pytest.raises(ConfigError, match=".npy or .pt"):
        load_input_features(tmp_path / "f.txt")
