"""The HF adapter's own loop for encoder-decoder targets (T5, BART, mBART, Marian, Whisper): the
call checks and the rows.

What transformers 5.24 hands a ``custom_generate`` callable for an encoder-decoder model (checked
on every family above): ``input_ids`` are the **decoder** ids (``[[decoder_start_token_id]]``, or
the ``decoder_input_ids`` the caller gave, e.g. Whisper's task tokens), ``model_kwargs`` holds the
target's ``encoder_outputs`` (already computed, once, for the whole batch), the source
``attention_mask`` when the caller gave one, and an ``EncoderDecoderCache``; ``inputs_tensor``
(the source ids, or Whisper's input features) comes when the callable's signature asks for it.

So the tier's loop here reuses the target's encoder output as is (row by row), runs an
encoder-decoder assistant's encoder once per row on ``inputs_tensor`` (as stock assisted generation
does), hands a ``WhisperForCausalLM``-style assistant the target's encoder output (as stock does),
and runs the engine loop over the decoder ids (:mod:`viasd_adapt.engine.seq2seq`). Mode ``none`` never
comes here: it is transformers' own loop, untouched.

Whisper: its ``generate`` wraps the generic one (language/task tokens, long-form segments,
temperature fallback); the tier sees each inner call, so short-form transcription is tiered as is.

The hf framework's runner for encoder-decoder pairs (:func:`viasd_adapt.adapters.hf_seq2seq.run`)
sits above :mod:`viasd_adapt.adapters.hf` (it opens a :func:`~viasd_adapt.adapters.hf.tiered`
scope); these pieces sit below it (the patched ``generate`` calls them), hence two modules.
"""

from __future__ import annotations

import torch
from torch import nn

from viasd_adapt.checks import check_encoder_source, check_token_ids_in_vocabulary
from viasd_adapt.errors import ConfigError, ViasdError
from viasd_adapt.model_kind import OWN_ENCODER, source_reader
from viasd_adapt.routing.encdec import EncoderContext
from viasd_adapt.engine.seq2seq import Seq2SeqDrafter, drafter_context, seq2seq_verifier
from viasd_adapt.checks import check_fits_decoder, check_fits_encoder

#: Where a ``generate`` call may carry the source, in the order transformers looks.
SOURCE_KEYS = ("inputs", "input_ids", "input_features")


def call_source(call: dict) -> torch.Tensor | None:
    """The source tensor of a normalised ``generate`` call, or None."""
    for key in SOURCE_KEYS:
        if call.get(key) is not None:
            return call[key]
    return None


def prepare_seq2seq_call(target: nn.Module, call: dict) -> None:
    """Checks a tiered ``generate`` call on an encoder-decoder target up front (the decoder-only
    path checks one prompt instead): a source, an unpadded decoder prompt; then asks Whisper for
    what stock assisted generation gets.

    Whisper's ``generate`` drops its begin-suppress tokens when ``assistant_model`` is in the call
    (so a draft may end at once). The tier takes the assistant out of the call, so without this
    Whisper would decode like its plain (unassisted) self; with it, a tiered call is token-identical
    to stock assisted generation, whose output is what the user asked for.
    """
    _check_source_and_prompt(call)
    source = call_source(call)
    if source is not None and not source.is_floating_point():
        check_token_ids_in_vocabulary(source.reshape(-1).tolist(), target, what="source")
        check_fits_encoder(target, source)
        assistant = call.get("assistant_model")
        if assistant is not None and source_reader(assistant) == OWN_ENCODER:
            check_fits_encoder(assistant, source)
    if getattr(target.config, "model_type", "") == "whisper" and "begin_suppress_tokens" not in call:
        call["begin_suppress_tokens"] = None


def _check_source_and_prompt(call: dict) -> None:
    source = call_source(call)
    assistant = call.get("assistant_model")
    if source is None:
        if call.get("inputs_embeds") is not None:
            raise ConfigError("the slim tier needs the source as input_ids (or input_features); inputs_embeds-only "
                              "generation is not supported")
        if call.get("encoder_outputs") is None:
            check_encoder_source(None)
        if assistant is not None and source_reader(assistant) == OWN_ENCODER:
            raise ConfigError(
                f"the assistant {type(assistant).__name__} has its own encoder and needs the source itself "
                "(input_ids / input_features), not only the target's encoder_outputs"
            )
    else:
        check_encoder_source(source)
        mask = call.get("attention_mask")
        if source.dim() == 2 and mask is not None:
            if mask.shape != source.shape:
                raise ConfigError(f"attention_mask {tuple(mask.shape)} does not fit the source {tuple(source.shape)}")
            if bool((mask.sum(dim=-1) == 0).any()):
                raise ConfigError("the source is empty: a row of the batch is all padding")
    decoder = call.get("decoder_input_ids")
    if decoder is not None:
        if not isinstance(decoder, torch.Tensor) or decoder.dim() != 2 or decoder.shape[1] == 0:
            raise ConfigError(f"decoder_input_ids must be a non-empty 2-D tensor, got {getattr(decoder, 'shape', type(decoder))}")
    decoder_mask = call.get("decoder_attention_mask")
    if decoder_mask is not None and bool((decoder_mask == 0).any()):
        raise ConfigError("padded decoder prompts are not supported by the slim tier: give every row the same "
                          "decoder_input_ids without padding")
    batch = source.shape[0] if source is not None else None
    if batch is not None and batch != 1 and call.get("streamer") is not None:
        raise ConfigError("streamers support a single sequence; pass one prompt when streaming")


class Seq2SeqRows:
    """Generates row ``b`` of a tiered encoder-decoder call: ``rows(b) -> GenerationOutput``.

    Built by the HF adapter's ``_OwnLoop`` from what transformers passed it; each row gets the
    target's encoder output for that row, the assistant's source view, and one engine loop
    (``loop.run_row``) with the call's stopping criteria, EOS ids and streamer.
    """

    def __init__(self, loop, model: nn.Module, input_ids: torch.Tensor, inputs_tensor: torch.Tensor | None,
                 model_kwargs: dict, max_new: int, warper, stopping_criteria, config):
        self.loop, self.model, self.input_ids, self.inputs_tensor = loop, model, input_ids, inputs_tensor
        self.max_new, self.warper, self.stopping_criteria, self.config = max_new, warper, stopping_criteria, config
        self.encoder_outputs = model_kwargs.get("encoder_outputs")
        if self.encoder_outputs is None:
            raise ViasdError("transformers passed no encoder_outputs to the tier's loop (a changed generate()?)")
        hidden = self.encoder_outputs[0] if not isinstance(self.encoder_outputs, torch.Tensor) else self.encoder_outputs
        mask = model_kwargs.get("attention_mask")
        # The cross-attention mask covers encoder positions; Whisper's feature-frame mask does not
        # (its decoder ignores it too), so only a mask of the encoder output's length is used.
        self.source_mask = mask if mask is not None and mask.shape[-1] == hidden.shape[1] else None
        decoder_mask = model_kwargs.get("decoder_attention_mask")
        if decoder_mask is not None and bool((decoder_mask == 0).any()):
            raise ConfigError("padded decoder prompts are not supported by the slim tier")

    def __call__(self, b: int):
        loop = self.loop
        prompt = self.input_ids[b]
        check_fits_decoder(self.model, prompt.shape[0], self.max_new)  # blocks end at the budget: no margin
        target_context = EncoderContext.from_outputs(self.encoder_outputs, b, self.source_mask)
        source = self.inputs_tensor[b : b + 1] if self.inputs_tensor is not None else None
        row_mask = self.source_mask[b : b + 1] if self.source_mask is not None else None
        if source is not None and source_reader(loop.assistant) == OWN_ENCODER:
            source = source.to(loop.assistant.device)
        assistant_context = drafter_context(loop.assistant, target_context, source, row_mask)
        verifier = seq2seq_verifier(self.model, None, self.warper, target_context, loop.context.slim, step=loop.step)
        drafter = Seq2SeqDrafter(loop.assistant, self.warper, assistant_context)
        return loop.run_row(verifier, drafter, prompt, self.max_new, self.stopping_criteria, self.config)


__all__ = ["SOURCE_KEYS", "Seq2SeqRows", "call_source", "prepare_seq2seq_call"]
