"""Tiny random-initialised encoder-decoder models of every supported family, for unit tests.

Built from configs (no download, milliseconds). Encoder and decoder depths differ on purpose
(except T5, below), so that code sizing a decoder cache from the encoder's depth (Whisper's and
BART's ``num_hidden_layers`` is the encoder's) fails loudly. T5 gets equal depths by default:
transformers 5.24's own ``generate`` sizes a T5 cache from ``num_layers`` (the encoder's) and fails
on an asymmetric T5, so no stock reference would exist (``encoder_layers`` still overrides it). Whisper reads log-mel input features of shape
``(1, WHISPER_MEL_BINS, WHISPER_FRAMES)``; :func:`synthetic_features` makes some.
"""

from __future__ import annotations

import torch
from transformers import (
    AutoModelForSeq2SeqLM,
    BartConfig,
    MarianConfig,
    MBartConfig,
    PretrainedConfig,
    T5Config,
    WhisperConfig,
    WhisperForConditionalGeneration,
)

SEQ2SEQ_FAMILIES = ("t5", "bart", "mbart", "marian", "whisper")
WHISPER_MEL_BINS = 8
WHISPER_SOURCE_POSITIONS = 16
WHISPER_FRAMES = 2 * WHISPER_SOURCE_POSITIONS  # Whisper's two convolutions halve the frames once


def tiny_seq2seq_config(family: str, vocab_size: int = 96, decoder_layers: int = 4, encoder_layers: int | None = None,
                        hidden: int = 32) -> PretrainedConfig:
    """A small encoder-decoder config of ``family`` with eager attention.

    Special ids sit at the top of the vocabulary (decoder start ``V-2``, EOS/pad ``V-1``), except
    where the family fixes them, so tests can draw source ids from ``range(3, V-3)``.
    """
    if encoder_layers is None:
        encoder_layers = decoder_layers if family == "t5" else 2
    bart_like = dict(
        vocab_size=vocab_size, d_model=hidden, encoder_layers=encoder_layers, decoder_layers=decoder_layers,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=hidden * 2, decoder_ffn_dim=hidden * 2,
        max_position_embeddings=256, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        pad_token_id=vocab_size - 1, eos_token_id=vocab_size - 1, bos_token_id=vocab_size - 2,
        decoder_start_token_id=vocab_size - 2, forced_eos_token_id=None, tie_word_embeddings=False,
    )
    if family == "t5":
        config = T5Config(vocab_size=vocab_size, d_model=hidden, d_kv=hidden // 4, d_ff=hidden * 2, num_layers=encoder_layers,
                          num_decoder_layers=decoder_layers, num_heads=4, dropout_rate=0.0, pad_token_id=vocab_size - 1,
                          eos_token_id=vocab_size - 1, decoder_start_token_id=vocab_size - 2, tie_word_embeddings=False,
                          relative_attention_num_buckets=8, relative_attention_max_distance=32)
    elif family == "bart":
        config = BartConfig(**bart_like)
    elif family == "mbart":
        config = MBartConfig(**bart_like)
    elif family == "marian":
        config = MarianConfig(**bart_like)
    elif family == "whisper":
        config = WhisperConfig(
            vocab_size=vocab_size, d_model=hidden, encoder_layers=encoder_layers, decoder_layers=decoder_layers,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=hidden * 2, decoder_ffn_dim=hidden * 2,
            num_mel_bins=WHISPER_MEL_BINS, max_source_positions=WHISPER_SOURCE_POSITIONS, max_target_positions=128,
            pad_token_id=vocab_size - 1, eos_token_id=vocab_size - 1, bos_token_id=vocab_size - 2,
            decoder_start_token_id=vocab_size - 2, begin_suppress_tokens=None, suppress_tokens=None,
            tie_word_embeddings=False, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        )
    else:
        raise ValueError(f"unknown encoder-decoder family {family!r}; known: {', '.join(SEQ2SEQ_FAMILIES)}")
    config._attn_implementation = "eager"
    return config


def tiny_seq2seq_model(family: str, seed: int = 0, **config_kwargs) -> torch.nn.Module:
    """A random tiny encoder-decoder model of ``family`` in eval mode, seeded."""
    torch.manual_seed(seed)
    config = tiny_seq2seq_config(family, **config_kwargs)
    if family == "whisper":
        model = WhisperForConditionalGeneration(config)
    else:
        model = AutoModelForSeq2SeqLM.from_config(config, attn_implementation="eager")
    generation = model.generation_config
    generation.forced_eos_token_id = None  # BART-style configs force EOS at max_length: not what tests want
    return model.eval()


def synthetic_features(seed: int = 0, batch: int = 1) -> torch.Tensor:
    """Random log-mel-like input features for the tiny Whisper, ``(batch, mel, frames)``."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(batch, WHISPER_MEL_BINS, WHISPER_FRAMES, generator=generator)


__all__ = ["SEQ2SEQ_FAMILIES", "WHISPER_FRAMES", "WHISPER_MEL_BINS", "synthetic_features", "tiny_seq2seq_config",
           "tiny_seq2seq_model"]
