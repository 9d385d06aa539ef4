"""The input checks the entry points share, in one place, each with one wording.

Bad input must fail up front with a sentence that names the problem, never with a stack trace from
deep inside torch and never with a silently wrong result. Adapters, the CLI and the search call
these rather than writing their own, so the same mistake reads the same everywhere: prompts and
batches, budgets, vocabularies and tokenizers, drafters, context and position limits.

What stays elsewhere, on purpose: reading the inputs off one framework's call (which argument of
HF's ``generate`` holds the prompt, its cache options) stays in that adapter, which hands what it
read to these checks; a mask or tuned file checked against a model lives with the artifact
(:mod:`viasd_adapt.routing.mask`); values of a settings object are checked by the object itself.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import torch
from torch import nn

from viasd_adapt.errors import ConfigError, ModelMismatchError
from viasd_adapt.model_kind import model_kind


def check_max_new_tokens(max_new_tokens: Any) -> int:
    """Rejects non-positive generation budgets with a clear message."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    return max_new_tokens


def check_prompt_ids(prompt_ids: Sequence[int]) -> list[int]:
    """A non-empty list of token ids."""
    ids = list(prompt_ids)
    if not ids:
        raise ConfigError("the prompt is empty: at least one token is needed to condition on")
    if any(isinstance(t, bool) or not isinstance(t, int) for t in ids):
        raise ConfigError("prompt token ids must be integers")
    return ids


def as_prompt_list(prompt_ids: Sequence[int] | torch.Tensor, framework: str) -> list[int]:
    """One prompt as a list of ids, from a list, a 1-D tensor or a ``(1, n)`` tensor or list."""
    if isinstance(prompt_ids, torch.Tensor):
        if prompt_ids.dim() == 2:
            if prompt_ids.shape[0] != 1:
                raise ConfigError(f"{framework} runs batch size 1; got a batch of {prompt_ids.shape[0]} prompts")
            prompt_ids = prompt_ids[0]
        elif prompt_ids.dim() != 1:
            raise ConfigError(f"prompt_ids must be 1-D or (1, n); got shape {tuple(prompt_ids.shape)}")
        if prompt_ids.is_floating_point():
            raise ConfigError("prompt token ids must be integers, got a floating-point tensor")
        return check_prompt_ids([int(t) for t in prompt_ids.tolist()])
    ids = list(prompt_ids)
    if ids and isinstance(ids[0], (list, tuple)):
        if len(ids) != 1:
            raise ConfigError(f"{framework} runs batch size 1; got a batch of {len(ids)} prompts")
        ids = list(ids[0])
    return check_prompt_ids(ids)


def check_prompt_batch(ids: Any, attention_mask: torch.Tensor | None = None, streaming: bool = False) -> None:
    """A batch of prompts that a loop decodes row by row: a 2-D ``(batch, length)`` tensor of ids with
    at least one token, no row that is all padding, left padding only (``attention_mask`` is
    0...0 1...1 on every row), and a single row when the output is streamed."""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        raise ConfigError(f"input_ids must be a 2-D tensor (batch, length), got {getattr(ids, 'shape', type(ids))}")
    if ids.shape[1] == 0:
        raise ConfigError("the prompt is empty: at least one token is needed to condition on")
    if attention_mask is not None and bool((attention_mask == 0).any()):
        if bool((attention_mask.sum(dim=-1) == 0).any()):
            raise ConfigError("the prompt is empty: a row of the batch is all padding")
        if attention_mask.shape != ids.shape or bool((attention_mask.diff(dim=-1) < 0).any()):
            raise ConfigError("only left padding is supported: attention_mask must be 0...0 1...1 on every row")
    if ids.shape[0] != 1 and streaming:
        raise ConfigError("streamers support a single sequence; pass one prompt when streaming")


def vocab_size_of(model: nn.Module) -> int | None:
    """Rows of the output head: the size of the distribution the tiers compare."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return getattr(text, "vocab_size", None)


def check_token_ids_in_vocabulary(ids: Sequence[int], model: nn.Module, what: str = "prompt") -> None:
    """Every id must index the model's embedding table (else torch fails with an IndexError)."""
    vocab = vocab_size_of(model)
    if vocab is None or not ids:
        return
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise ModelMismatchError(
            f"{what} token id {bad[0]} is outside the model's vocabulary of {vocab} tokens "
            "(a tokenizer for another model?)"
        )


#: Why a drafter with another tokenizer is refused, named as transformers names what it would be.
UNIVERSAL_ASSISTED = ("universal assisted generation (a drafter with another tokenizer, transformers' "
                      "assistant_tokenizer= with a different vocabulary) is not supported: its drafts are re-tokenized "
                      "as text and carry no distribution over the target's tokens for the slim tier to judge")


def check_same_vocabulary(target: nn.Module, drafter: nn.Module, role: str = "drafter") -> None:
    """Drafter and target must score the same vocabulary, token by token (:data:`UNIVERSAL_ASSISTED`)."""
    v_target, v_draft = vocab_size_of(target), vocab_size_of(drafter)
    if v_target is not None and v_draft is not None and v_target != v_draft:
        raise ModelMismatchError(
            f"vocabulary mismatch: the target has {v_target} tokens, the {role} {v_draft}; the tiers compare "
            f"their distributions token by token, so they must share one tokenizer; {UNIVERSAL_ASSISTED}"
        )


def check_same_tokenizer(tokenizer, other, role: str = "drafter") -> None:
    """Same size is not enough: the two tokenizers must map every string to the same id."""
    if tokenizer is None or other is None or tokenizer is other:
        return
    if tokenizer.get_vocab() != other.get_vocab():
        raise ModelMismatchError(
            f"the target and {role} tokenizers have different vocabularies; the tiers compare distributions "
            f"token by token, so the {role} must use the target's tokenizer; {UNIVERSAL_ASSISTED}"
        )


def check_drafter_pair(target: nn.Module, drafter: nn.Module, tokenizer: Any = None, drafter_tokenizer: Any = None,
                       role: str = "drafter") -> None:
    """A drafter fit to draft for ``target``: the same vocabulary, the source when the target reads
    one (:func:`check_drafter_reads_source`), and, when both tokenizers are given, the same
    token ids for every string."""
    check_same_vocabulary(target, drafter, role=role)
    check_drafter_reads_source(target, drafter, role=role)
    check_same_tokenizer(tokenizer, drafter_tokenizer, role=role)


def max_positions(model: nn.Module) -> int | None:
    """The longest sequence the model's position scheme covers, when its config says."""
    config = getattr(model, "config", None)
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_fits_context(model: nn.Module, prompt_length: int, max_new_tokens: int, extra: int = 0,
                       role: str = "model") -> None:
    """Prompt + budget (+ ``extra`` speculative positions) must fit the model's positions.

    Past that, rotary models degenerate silently and learned-position models (GPT-2) fail with an
    IndexError deep inside torch.
    """
    check_fits_positions(max_positions(model), prompt_length, max_new_tokens, extra, f"the {role}'s", "prompt")


def check_fits_positions(limit: int | None, prompt_length: int, max_new_tokens: int, extra: int = 0,
                         whose: str = "the model's", what: str = "prompt") -> None:
    """``prompt_length + max_new_tokens + extra`` must not exceed ``limit`` positions (None: no limit)."""
    if limit is not None and prompt_length + max_new_tokens + extra > limit:
        raise ConfigError(
            f"{what} ({prompt_length} tokens) + max_new_tokens ({max_new_tokens})"
            + (f" + {extra} speculative positions" if extra else "")
            + f" exceeds {whose} {limit} positions; shorten the prompt or the budget"
        )


def check_drafter_reads_source(target: nn.Module, drafter: nn.Module, role: str = "drafter") -> None:
    """An encoder-decoder target's drafter must see the source too, and a decoder-only target's
    drafter must not need one (:meth:`viasd_adapt.model_kind.ModelKind.check_drafter` of the
    target's kind).

    Accepted for an encoder-decoder target: an encoder-decoder drafter (its own encoder), or a
    decoder whose forward reads ``encoder_outputs`` (distil-Whisper's ``WhisperForCausalLM``),
    which then reads the target's encoder output and must have the target's hidden size.
    """
    model_kind(target).check_drafter(target, drafter, role)


def check_encoder_source(source: Any, what: str = "source") -> torch.Tensor:
    """The encoder input of an encoder-decoder model: present, a tensor, and not empty."""
    if source is None:
        raise ConfigError(
            f"the {what} is missing: an encoder-decoder model needs encoder inputs (input_ids for text models, "
            "input_features for Whisper, or encoder_outputs)"
        )
    if not isinstance(source, torch.Tensor):
        raise ConfigError(f"the {what} must be a tensor, got {type(source).__name__}")
    if source.dim() < 2 or source.shape[0] < 1 or source.shape[-1] == 0:
        raise ConfigError(f"the {what} is empty (shape {tuple(source.shape)}): at least one position is needed")
    return source


def eos_ids(value: int | Iterable[int] | torch.Tensor | None) -> list[int]:
    """EOS ids from an int, a list, a tensor or None (a string is refused: "12" is not [1, 2])."""
    if value is None:
        return []
    if isinstance(value, torch.Tensor):
        return [int(x) for x in value.reshape(-1).tolist()]
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ConfigError(f"eos token ids must be an int or a list of ints, got {value!r}")
    ids = list(value)
    if any(isinstance(x, bool) or not isinstance(x, int) for x in ids):
        raise ConfigError(f"eos token ids must be integers, got {ids!r}")
    return ids


def check_draft_block(drafts: Any, p: Any, vocab_size: int | None, ids: list[int] | None = None) -> None:
    """What a drafter's ``propose`` returned: ``(g,)`` integer ids inside the vocabulary and ``(g, V)``
    finite probabilities over the target's vocabulary. A custom drafter that breaks this would
    otherwise fail with an IndexError inside torch, or (NaN) run on silently. With the drafts' host
    ``ids`` at hand, the range check reads nothing back from the device."""
    if not isinstance(drafts, torch.Tensor) or drafts.dim() != 1 or drafts.is_floating_point():
        raise ConfigError(f"the drafter must return draft ids as a 1-D integer tensor, got {getattr(drafts, 'shape', drafts)!r}")
    if not isinstance(p, torch.Tensor) or p.dim() != 2 or p.shape[0] != drafts.shape[0]:
        raise ConfigError(f"the drafter returned {drafts.shape[0]} drafts but probabilities of shape "
                          f"{tuple(getattr(p, 'shape', ()))}; expected ({drafts.shape[0]}, vocabulary)")
    if vocab_size is not None and p.shape[1] != vocab_size:
        raise ModelMismatchError(f"the drafter's distributions cover {p.shape[1]} tokens, the target's {vocab_size}; "
                                 "they must share one vocabulary")
    outside = [t for t in (ids if ids is not None else drafts.tolist()) if not 0 <= t < p.shape[1]]
    if outside:
        raise ConfigError(f"the drafter proposed token id {outside[0]}, outside the vocabulary of {p.shape[1]} tokens")
    if not bool(torch.isfinite(p).all()):
        raise ConfigError("the drafter returned NaN or infinite probabilities")


def decoder_position_limit(model: nn.Module) -> int | None:
    """How many decoder positions ``model`` has (learned positions), or None (T5's relative ones)."""
    config = model.config
    for name in ("max_target_positions", "max_position_embeddings"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0 and getattr(config, "model_type", "") not in ("t5", "mt5"):
            return value
    return None


_RELATIVE_POSITIONS = ("t5", "mt5", "umt5", "longt5")


def encoder_position_limit(model: nn.Module) -> int | None:
    """How many source tokens ``model``'s encoder has positions for (learned or fixed-table
    positions: BART, mBART, Marian), or None (T5's relative positions; feature encoders)."""
    config = model.config
    if getattr(config, "model_type", "") in _RELATIVE_POSITIONS:
        return None
    for name in ("max_source_positions", "max_encoder_position_embeddings", "max_position_embeddings"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_fits_encoder(model: nn.Module, source: torch.Tensor) -> None:
    """A source of token ids must fit the encoder's positions: past them, BART's position
    embedding fails with an IndexError deep inside torch. (Feature sources are Whisper's, which
    checks its own frame count.)"""
    if not isinstance(source, torch.Tensor) or source.is_floating_point() or source.dim() != 2:
        return
    limit = encoder_position_limit(model)
    if limit is not None and source.shape[-1] > limit:
        raise ConfigError(f"the source ({source.shape[-1]} tokens) exceeds the encoder's {limit} positions "
                          f"({type(model).__name__}); shorten the source")


def check_decoder_cache_layers(model: nn.Module) -> None:
    """transformers' ``generate`` sizes an encoder-decoder model's self-attention cache by the
    *encoder's* layer count (transformers 5.24, T5 family): a T5 with more decoder than encoder
    layers then fails with an IndexError inside the cache on its first decoding step. Refused up
    front, naming the cause, wherever ``generate`` itself decodes (``ar``, ``hf``); the tier's own
    loop keeps its own caches and runs such models."""
    config = model.config
    encoder, decoder = getattr(config, "num_layers", None), getattr(config, "num_decoder_layers", None)
    if getattr(config, "model_type", "") in _RELATIVE_POSITIONS and isinstance(encoder, int) and isinstance(decoder, int) \
            and decoder > encoder:
        raise ConfigError(
            f"{type(model).__name__} has {encoder} encoder and {decoder} decoder layers: transformers' generate() sizes "
            "its cache by the encoder's layer count and fails on such a model (a transformers limitation). Use "
            "--framework engine (the tier's own loop), or a model with at least as many encoder as decoder layers"
        )


def check_fits_decoder(model: nn.Module, prompt_length: int, max_new_tokens: int, extra: int = 0) -> None:
    """Decoder prompt + budget (+ speculative positions) must fit the decoder's learned positions."""
    check_fits_positions(decoder_position_limit(model), prompt_length, max_new_tokens, extra, "the decoder's",
                         "decoder prompt")


__all__ = ["UNIVERSAL_ASSISTED", "as_prompt_list", "check_decoder_cache_layers", "check_draft_block", "check_drafter_pair", "check_drafter_reads_source", "check_encoder_source", "check_fits_context", "check_fits_decoder", "check_fits_encoder", "check_fits_positions", "check_max_new_tokens", "check_prompt_batch", "check_prompt_ids", "check_same_tokenizer", "check_same_vocabulary", "check_token_ids_in_vocabulary", "decoder_position_limit", "encoder_position_limit", "eos_ids", "max_positions", "vocab_size_of"]
