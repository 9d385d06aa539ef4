"""Decoder-only or encoder-decoder: what kind of model a target is, decided once, as a strategy.

Most of viasd-adapt does not care: the tiers, the rules and the engine loop work on one growing
token sequence, which for an encoder-decoder model (T5, BART, mBART, Marian, Whisper) is the
decoder's. What differs is at the edges: what a request's ``prompt_ids`` are (the prompt, or the
source the encoder reads) and how a user's text becomes them, which runner of a framework runs
the model, which drafters can serve it, and which output class ``generate`` returns. Those
differences are the operations of :class:`ModelKind`; :func:`model_kind` picks one of its two
implementations, :data:`DECODER_ONLY` or :data:`ENCODER_DECODER`, from the model's config, and
callers ask the kind instead of branching on ``config.is_encoder_decoder`` themselves.

Why this module sits at the bottom of the core (it imports only :mod:`viasd_adapt.errors` and
:mod:`viasd_adapt.prompts.chat`, which imports nothing else of the project's): the input checks
(:mod:`viasd_adapt.checks`), the routing package and the frameworks registry all ask it, so it
must not import any of them. Operations that need routing or the seq2seq runners (the
decoder caches, :class:`~viasd_adapt.routing.seq2seq.Seq2SeqTargetRunners`) stay where those live, and
pick their branch by :attr:`~viasd_adapt.routing.layers.DecoderStack.encoder_decoder`.

How a model reads the source (:func:`source_reader`) lives here too, because the drafter check
needs it: :data:`OWN_ENCODER` (an encoder-decoder model), :data:`TARGET_ENCODER_OUTPUT` (a decoder
whose forward takes ``encoder_outputs``, distil-Whisper's ``WhisperForCausalLM``), or None.
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol

from torch import nn

from viasd_adapt.prompts.chat import encode_prompt
from viasd_adapt.errors import ModelMismatchError

#: How a model reads the source: its own encoder, or the target's encoder output.
OWN_ENCODER = "own-encoder"
TARGET_ENCODER_OUTPUT = "target-encoder-output"


def is_encoder_decoder(model: nn.Module) -> bool:
    """Whether ``model`` is an encoder-decoder (seq2seq) model, by its config."""
    return bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))


def source_reader(model: nn.Module) -> str | None:
    """How ``model`` conditions on the source: :data:`OWN_ENCODER` (an encoder-decoder model),
    :data:`TARGET_ENCODER_OUTPUT` (a decoder-only model whose forward takes ``encoder_outputs``,
    e.g. ``WhisperForCausalLM``), or None (a plain causal LM, which cannot see the source)."""
    if is_encoder_decoder(model) and hasattr(model, "get_encoder"):
        return OWN_ENCODER
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return None
    return TARGET_ENCODER_OUTPUT if "encoder_outputs" in params else None


def _width(model: nn.Module) -> int | None:
    return getattr(model.config, "d_model", getattr(model.config, "hidden_size", None))


class ModelKind(Protocol):
    """What differs between a decoder-only and an encoder-decoder target (module docstring)."""

    #: ``"decoder-only"`` or ``"encoder-decoder"``, as messages name the kind.
    name: str
    #: True for encoder-decoder targets: the decoder sequence is what the tiers see.
    encoder_decoder: bool
    #: True when a request's ``prompt_ids`` are the encoder's source rather than the decoder's
    #: prompt (so the prompt checks of a decoder-only model do not apply to them).
    prompt_is_source: bool

    def runner_of(self, framework: Any) -> str | None:
        """The ``"module:function"`` that runs ``framework`` (a :class:`~viasd_adapt.frameworks.registry.Framework`)
        for a target of this kind, or None when the framework cannot run it."""

    def check_drafter(self, target: nn.Module, drafter: nn.Module, role: str = "drafter") -> None:
        """Raises :class:`~viasd_adapt.errors.ModelMismatchError` when ``drafter`` cannot draft for ``target``
        because of how it reads (or cannot read) the source."""

    def generate_output_class(self) -> type:
        """The transformers ``generate`` output class (``return_dict_in_generate=True``) for this kind."""

    def encode_text(self, tokenizer: Any, text: str, chat: str = "auto") -> list[int]:
        """A request's ``prompt_ids`` for one user ``text`` (empty text: no ids)."""


class _Kind:
    """What both kinds share: the framework runner and the output class, each looked up by the name
    the kind declares, and a repr naming the constant."""

    _runner_field: str  # the Framework attribute holding this kind's "module:function"
    _output_class: str  # the name of the class in transformers.generation.utils
    _constant: str

    def runner_of(self, framework: Any) -> str | None:
        return getattr(framework, self._runner_field)

    def generate_output_class(self) -> type:
        from transformers.generation import utils

        return getattr(utils, self._output_class)

    def __repr__(self) -> str:
        return self._constant


class DecoderOnly(_Kind):
    """A causal LM target: ``prompt_ids`` are its prompt; every framework runs it."""

    name = "decoder-only"
    encoder_decoder = False
    prompt_is_source = False
    _runner_field, _output_class, _constant = "runner", "GenerateDecoderOnlyOutput", "DECODER_ONLY"

    def check_drafter(self, target: nn.Module, drafter: nn.Module, role: str = "drafter") -> None:
        """The drafter must not need a source: there is none."""
        if is_encoder_decoder(drafter):
            raise ModelMismatchError(
                f"the {role} {type(drafter).__name__} is an encoder-decoder model but the target {type(target).__name__} "
                "is decoder-only: there is no source for its encoder"
            )

    def encode_text(self, tokenizer: Any, text: str, chat: str = "auto") -> list[int]:
        """The prompt, in the target's chat template when ``chat`` asks for it (:mod:`viasd_adapt.prompts.chat`)."""
        return encode_prompt(tokenizer, text, chat)


class EncoderDecoder(_Kind):
    """A seq2seq target: ``prompt_ids`` are the source; only frameworks with a seq2seq runner run it."""

    name = "encoder-decoder"
    encoder_decoder = True
    prompt_is_source = True
    _runner_field, _output_class, _constant = "seq2seq_runner", "GenerateEncoderDecoderOutput", "ENCODER_DECODER"

    def check_drafter(self, target: nn.Module, drafter: nn.Module, role: str = "drafter") -> None:
        """The drafter must see the source too: an encoder-decoder drafter (its own encoder), or a
        decoder whose forward reads ``encoder_outputs`` (distil-Whisper's ``WhisperForCausalLM``),
        which then reads the target's encoder output and must have the target's hidden size."""
        reader = source_reader(drafter)
        if reader is None:
            raise ModelMismatchError(
                f"the {role} {type(drafter).__name__} is a decoder-only model that cannot read the source of the "
                f"encoder-decoder target {type(target).__name__}; use an encoder-decoder {role}, or a decoder that reads "
                "encoder_outputs (e.g. WhisperForCausalLM)"
            )
        if reader == TARGET_ENCODER_OUTPUT:
            width, own = _width(target), _width(drafter)
            if width is not None and own is not None and width != own:
                raise ModelMismatchError(
                    f"the {role} {type(drafter).__name__} reads the target's encoder output ({width} wide) but its own "
                    f"width is {own}"
                )

    def encode_text(self, tokenizer: Any, text: str, chat: str = "auto") -> list[int]:
        """The source as the encoder reads it: plain tokenised text, never a chat template (``chat``
        is ignored: a template frames a conversation for a decoder that continues it)."""
        return list(tokenizer(text)["input_ids"]) if text else []


DECODER_ONLY: ModelKind = DecoderOnly()
ENCODER_DECODER: ModelKind = EncoderDecoder()


def model_kind(model: nn.Module) -> ModelKind:
    """The kind of ``model`` (by ``config.is_encoder_decoder``): :data:`ENCODER_DECODER` or :data:`DECODER_ONLY`."""
    return ENCODER_DECODER if is_encoder_decoder(model) else DECODER_ONLY


__all__ = [
    "DECODER_ONLY",
    "ENCODER_DECODER",
    "OWN_ENCODER",
    "TARGET_ENCODER_OUTPUT",
    "DecoderOnly",
    "EncoderDecoder",
    "ModelKind",
    "is_encoder_decoder",
    "model_kind",
    "source_reader",
]
