"""Tiny random-initialised causal LMs of every supported family, for unit tests.

Built from configs, so they need no download and take milliseconds. Sizes are chosen to exercise
the interesting structure (several layers, grouped-query attention, Gemma2's alternating sliding
window) rather than to be good at anything.
"""

from __future__ import annotations

import torch
from transformers import (
    AutoModelForCausalLM,
    BloomConfig,
    FalconConfig,
    Gemma2Config,
    GPT2Config,
    GPTNeoXConfig,
    LlamaConfig,
    MistralConfig,
    PretrainedConfig,
    Qwen2Config,
    Qwen3Config,
)

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gpt2", "gpt_neox", "bloom", "falcon")


def tiny_config(family: str, vocab_size: int = 96, num_layers: int = 6, hidden: int = 32) -> PretrainedConfig:
    """A small config of ``family`` with eager attention (exact and deterministic on CPU)."""
    common_llama = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )
    if family == "llama":
        config = LlamaConfig(**common_llama)
    elif family == "mistral":
        config = MistralConfig(**common_llama, sliding_window=None)
    elif family == "qwen2":
        config = Qwen2Config(**common_llama)
    elif family == "qwen3":
        config = Qwen3Config(**common_llama, head_dim=hidden // 4)
    elif family == "gemma2":
        config = Gemma2Config(**common_llama, head_dim=hidden // 4, sliding_window=16, query_pre_attn_scalar=8)
    elif family == "gpt2":
        config = GPT2Config(
            vocab_size=vocab_size, n_embd=hidden, n_layer=num_layers, n_head=4, n_positions=512, bos_token_id=0, eos_token_id=0
        )
    elif family == "gpt_neox":
        config = GPTNeoXConfig(**{k: v for k, v in common_llama.items() if k != "num_key_value_heads"})
    elif family == "bloom":  # ALiBi positions; its blocks return (hidden_states, attn_weights)
        config = BloomConfig(vocab_size=vocab_size, hidden_size=hidden, n_layer=num_layers, n_head=4,
                             bos_token_id=0, eos_token_id=0, pad_token_id=0)
    elif family == "falcon":  # rotary, parallel attention; its blocks return (hidden_states, attn_weights)
        config = FalconConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=num_layers,
                              num_attention_heads=4, max_position_embeddings=512, bos_token_id=0, eos_token_id=0)
    else:
        raise ValueError(f"unknown family {family!r}; known: {', '.join(FAMILIES)}")
    config._attn_implementation = "eager"
    return config


def tiny_model(family: str, seed: int = 0, **config_kwargs) -> torch.nn.Module:
    """A random tiny model of ``family`` in eval mode, seeded."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(family, **config_kwargs), attn_implementation="eager")
    return model.eval()


__all__ = ["tiny_model"]
