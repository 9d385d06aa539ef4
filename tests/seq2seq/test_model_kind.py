"""The model-kind strategy (:mod:`viasd_adapt.model_kind`): one kind per model, and each operation
doing what the branches it replaced did, for both kinds."""

from __future__ import annotations

import pytest
import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput, GenerateEncoderDecoderOutput

from tests.support.seq2seq import seq2seq_pair
from viasd_adapt.frameworks import baselines
from viasd_adapt.frameworks import registry as frameworks
from viasd_adapt.checks import check_drafter_reads_source
from viasd_adapt.errors import ConfigError, ModelMismatchError
from viasd_adapt.model_kind import (
    DECODER_ONLY,
    ENCODER_DECODER,
    OWN_ENCODER,
    TARGET_ENCODER_OUTPUT,
    model_kind,
    source_reader,
)
from viasd_adapt.models.tiny import tiny_model
from viasd_adapt.models.tiny_seq2seq import tiny_seq2seq_model


@pytest.fixture(scope="module")
def causal():
    return tiny_model("llama", seed=0, num_layers=2)


@pytest.fixture(scope="module")
def bart():
    return tiny_seq2seq_model("bart", 0, decoder_layers=2)


def test_the_kind_comes_from_the_config(causal, bart):
    assert model_kind(causal) is DECODER_ONLY and model_kind(bart) is ENCODER_DECODER
    assert (DECODER_ONLY.encoder_decoder, ENCODER_DECODER.encoder_decoder) == (False, True)
    assert (DECODER_ONLY.prompt_is_source, ENCODER_DECODER.prompt_is_source) == (False, True)
    assert model_kind(object()) is DECODER_ONLY  # no config: nothing says it has an encoder


def test_source_reader_names_how_each_model_reads_the_source(causal, bart):
    whisper_decoder = seq2seq_pair("whisper", layers=2, decoder_only_drafter=True).drafter
    assert [source_reader(m) for m in (bart, whisper_decoder, causal)] == [OWN_ENCODER, TARGET_ENCODER_OUTPUT, None]


def test_each_kind_picks_its_runner_of_a_framework():
    hf, pearl = frameworks.get("hf"), frameworks.get("pearl")
    assert DECODER_ONLY.runner_of(hf) == "viasd_adapt.adapters.hf:run"
    assert ENCODER_DECODER.runner_of(hf) == "viasd_adapt.adapters.hf_seq2seq:run"
    assert DECODER_ONLY.runner_of(pearl) == "viasd_adapt.adapters.pearl:run"
    assert ENCODER_DECODER.runner_of(pearl) is None
    engine = frameworks.get("engine")
    # the former encoder_decoder flag still selects the same runner as the kind
    assert engine.load(True) is engine.load(ENCODER_DECODER) is not engine.load(False)
    assert engine.load() is baselines.run_engine


def test_a_framework_without_a_seq2seq_runner_refuses_an_encoder_decoder_target(bart):
    from viasd_adapt.models.pair import LoadedPair
    from viasd_adapt.frameworks.requests import RunRequest
    from viasd_adapt.core.settings import TierSettings

    pair = LoadedPair(target=bart, draft=bart, tokenizer=None, mask=None, device=torch.device("cpu"))
    assert "runs decoder-only targets only" in frameworks.get("pearl").unavailable(pair)
    assert frameworks.get("engine").unavailable(pair) is None
    request = RunRequest.tiered([5, 6], 4, TierSettings(mode="none"))
    with pytest.raises(ConfigError, match="does not support encoder-decoder targets .*use one of: ar, engine, hf"):
        frameworks.run("pearl", pair, request)


def test_decoder_only_target_refuses_a_drafter_that_needs_a_source(causal, bart):
    DECODER_ONLY.check_drafter(causal, causal)
    with pytest.raises(ModelMismatchError, match="assistant .* is an encoder-decoder model .*no source for its encoder"):
        DECODER_ONLY.check_drafter(causal, bart, role="assistant")
    with pytest.raises(ModelMismatchError, match="no source for its encoder"):
        check_drafter_reads_source(causal, bart)  # the public check asks the target's kind


def test_encoder_decoder_target_needs_a_drafter_that_reads_the_source(causal, bart):
    ENCODER_DECODER.check_drafter(bart, tiny_seq2seq_model("bart", 1, decoder_layers=1))
    with pytest.raises(ModelMismatchError, match="decoder-only model that cannot read the source"):
        ENCODER_DECODER.check_drafter(bart, causal)
    pair = seq2seq_pair("whisper", layers=2, decoder_only_drafter=True)
    ENCODER_DECODER.check_drafter(pair.target, pair.drafter)  # reads the target's encoder output, same width
    pair.drafter.config.d_model = pair.target.config.d_model * 2
    with pytest.raises(ModelMismatchError, match="reads the target's encoder output .* wide"):
        check_drafter_reads_source(pair.target, pair.drafter)


def test_generate_output_class_per_kind():
    assert DECODER_ONLY.generate_output_class() is GenerateDecoderOnlyOutput
    assert ENCODER_DECODER.generate_output_class() is GenerateEncoderDecoderOutput


class _Tokenizer:
    """Splits on spaces; has a chat template (so a decoder-only prompt is framed, a source is not)."""

    chat_template = "{% for m in messages %}<{{ m['content'] }}>{% endfor %}"

    def __call__(self, text):
        return {"input_ids": [len(word) for word in text.split()]}

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=True, **kwargs):
        return [100] + [len(word) for m in messages for word in m["content"].split()] + [101]


def test_encode_text_frames_a_prompt_but_never_a_source():
    tokenizer = _Tokenizer()
    assert ENCODER_DECODER.encode_text(tokenizer, "one three", chat="on") == [3, 5]
    assert ENCODER_DECODER.encode_text(tokenizer, "") == [] == DECODER_ONLY.encode_text(tokenizer, "")
    framed = DECODER_ONLY.encode_text(tokenizer, "one three", chat="on")
    assert framed != [3, 5] and [3, 5] == [t for t in framed if t < 100]
