"""Speculative decoding with the slim tier for encoder-decoder targets (T5, BART, mBART, Marian, Whisper).

The engine (:class:`~viasd_adapt.engine.verifier.TieredVerifier`, :func:`~viasd_adapt.core.cycle.decide_cycle`,
:func:`~viasd_adapt.engine.loop.speculative_generate`) works on one growing token sequence. For an
encoder-decoder model that sequence is the **decoder's**; the source is fixed for the whole
generation. The decoder-side runners live with the decoder-only ones in routing
(:mod:`viasd_adapt.routing.seq2seq`); this module adds the drafter and the generation entry:

* :class:`Seq2SeqDrafter`: :class:`~viasd_adapt.engine.drafters.ModelDrafter`'s drafting loop over a
  seq2seq runner. An encoder-decoder drafter runs its own encoder once per prompt (transformers'
  assisted generation does the same); a decoder-only drafter that reads ``encoder_outputs``
  (distil-Whisper's ``WhisperForCausalLM``) reads the target's.
* :func:`seq2seq_verifier` and :func:`seq2seq_generate`: the tiered loop over a source.
"""

from __future__ import annotations

from typing import Iterable

import pluggy
import torch
from torch import nn

from viasd_adapt.checks import (
    check_drafter_reads_source,
    check_encoder_source,
    check_fits_decoder,
    check_fits_encoder,
    check_max_new_tokens,
    check_prompt_ids,
)
from viasd_adapt.core.sampling import SamplingConfig, Warper, as_warper
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.core.verify_step import VerifyStep
from viasd_adapt.engine.drafters import ModelDrafter
from viasd_adapt.engine.loop import GenerationOutput, speculative_generate
from viasd_adapt.engine.verifier import TieredVerifier, step_for_fields
from viasd_adapt.errors import ConfigError
from viasd_adapt.model_kind import (
    OWN_ENCODER,
    TARGET_ENCODER_OUTPUT,
    source_reader,
)
from viasd_adapt.routing.encdec import (
    EncoderContext,
)
from viasd_adapt.routing.seq2seq import Seq2SeqRunner, Seq2SeqTargetRunners
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.routing.seq2seq import default_decoder_prompt


class Seq2SeqDrafter(ModelDrafter):
    """:class:`~viasd_adapt.engine.drafters.ModelDrafter`'s loop (``propose``) over a :class:`Seq2SeqRunner`.

    ``encoder`` is what the drafter reads: its own encoder's output for an encoder-decoder drafter
    (:func:`drafter_context`), the target's for one that reads ``encoder_outputs``.
    """

    def __init__(self, model: nn.Module, sampling: SamplingConfig | Warper, encoder: EncoderContext):
        # ModelDrafter.__init__ would build a decoder-only CachedRunner; only the runner differs.
        self.runner = Seq2SeqRunner(model, encoder)
        self.warper = as_warper(sampling)


def drafter_context(drafter: nn.Module, target_context: EncoderContext, source: torch.Tensor | None,
                    source_mask: torch.Tensor | None = None) -> EncoderContext:
    """The encoder output ``drafter`` drafts against: its own encoder run once on ``source``
    (``(1, S)`` ids or ``(1, mel, frames)`` features), or the target's output."""
    reader = source_reader(drafter)
    if reader == OWN_ENCODER:
        if source is None:
            raise ConfigError(
                f"the drafter {type(drafter).__name__} has its own encoder and needs the source itself "
                "(input_ids / input_features), not only the target's encoder_outputs"
            )
        return EncoderContext.encode(drafter, source, source_mask)
    if reader == TARGET_ENCODER_OUTPUT:
        return target_context
    raise ConfigError(f"the drafter {type(drafter).__name__} cannot read a source")


def seq2seq_verifier(target: nn.Module, settings: TierSettings | None, sampling: SamplingConfig | Warper,
                     encoder: EncoderContext, slim: SlimVerifier | None = None,
                     plugin_manager: pluggy.PluginManager | None = None, framework: str = "engine",
                     step: VerifyStep | None = None) -> TieredVerifier:
    """A :class:`~viasd_adapt.engine.verifier.TieredVerifier` whose runners are :class:`Seq2SeqTargetRunners`
    (``step``: the run's verify step, when the run already has one: the rows of an HF call)."""
    mode = (step.settings if step is not None else settings).mode
    runners = Seq2SeqTargetRunners(target, slim if mode.uses_slim else None, encoder)
    if step is None:  # a run without a context: its step from the fields, as every run's is built
        step = step_for_fields(target, settings, sampling, slim, plugin_manager, framework)
    return TieredVerifier(target, None, sampling, slim, runners=runners, step=step)


def seq2seq_generate(
    target: nn.Module,
    drafter: nn.Module,
    source: torch.Tensor,
    max_new_tokens: int,
    settings: TierSettings,
    sampling: SamplingConfig | Warper = SamplingConfig(),
    slim: SlimVerifier | None = None,
    source_mask: torch.Tensor | None = None,
    decoder_prompt: list[int] | None = None,
    eos_token_ids: Iterable[int] = (),
    generator: torch.Generator | None = None,
    plugin_manager: pluggy.PluginManager | None = None,
    framework: str = "engine",
    q_prefill: bool = True,
) -> GenerationOutput:
    """One source -> decoder tokens with the tiered loop (the library entry the CLI and bench use).

    Args:
        source: ``(1, S)`` token ids (text models) or ``(1, mel, frames)`` input features (Whisper).
        source_mask: ``(1, S)`` attention mask of a padded text source, or None.
        decoder_prompt: the decoder's starting ids (default ``[decoder_start_token_id]``; Whisper
            checkpoints want their task/language tokens here).
    """
    check_max_new_tokens(max_new_tokens)
    check_encoder_source(source)
    check_fits_encoder(target, source)
    check_drafter_reads_source(target, drafter)
    prompt = check_prompt_ids(decoder_prompt if decoder_prompt is not None else default_decoder_prompt(target))
    check_fits_decoder(target, len(prompt), max_new_tokens)  # blocks end at the budget: no margin
    context = EncoderContext.encode(target, source, source_mask)
    verifier = seq2seq_verifier(target, settings, sampling, context, slim, plugin_manager, framework)
    draft = Seq2SeqDrafter(drafter, sampling, drafter_context(drafter, context, source, source_mask))
    return speculative_generate(draft, verifier, prompt, max_new_tokens, eos_token_ids, generator, q_prefill=q_prefill)


# ----------------------------------------------------------------------------- framework runners


__all__ = ["OWN_ENCODER", "Seq2SeqDrafter", "TARGET_ENCODER_OUTPUT", "drafter_context", "seq2seq_generate", "seq2seq_verifier", "source_reader"]
