"""Speculative decoding with the slim tier for encoder-decoder targets (T5, BART, mBART, Marian, Whisper).

The engine (:class:`~viasd_adapt.engine.TieredVerifier`, :func:`~viasd_adapt.cycle.decide_cycle`,
:func:`~viasd_adapt.engine.speculative_generate`) works on one growing token sequence. For an
encoder-decoder model that sequence is the **decoder's**; the source is fixed for the whole
generation. This module supplies the decoder-side pieces and nothing else:

* :class:`Seq2SeqRunner`, the counterpart of :class:`~viasd_adapt.runner.CachedRunner`: the encoder
  output is fixed (:class:`~viasd_adapt.routing.encdec.EncoderContext`, computed once per prompt),
  the decoder ids grow and are cropped to the longest prefix the cache still holds, and everything
  after it is fed in one forward (how q catches up on tokens tiers 1-2 committed).
* :class:`Seq2SeqTargetRunners`, the counterpart of :class:`~viasd_adapt.routing.shared.SeparateRunners`
  (the :class:`~viasd_adapt.routing.shared.TargetRunners` protocol): q and u over the decoder
  sequence, each with its own self-attention cache, both reading the target's one encoder output
  and one shared cross-attention cache (:mod:`viasd_adapt.routing.encdec` explains why sharing
  the cross-attention keys/values is exact).
* :class:`Seq2SeqDrafter`: :class:`~viasd_adapt.engine.ModelDrafter`'s drafting loop over a
  seq2seq runner. An encoder-decoder drafter runs its own encoder once per prompt (transformers'
  assisted generation does the same); a decoder-only drafter that reads ``encoder_outputs``
  (distil-Whisper's ``WhisperForCausalLM``) reads the target's.

**No decoder-prefix sharing.** The decoder-only runners let q resume at u's first skipped layer s1
(:class:`~viasd_adapt.routing.shared.SharedPrefixRunners`). Here the work every pass shares for
sure, the encoder, is already done once; sharing the decoder layers below s1 as well would need
family-specific capture/inject stubs (T5 blocks return tuples carrying position biases) and the
cross-attention part of the prefix cache split between roles, for a saving of s1 small decoder
layers per escalation. Until a measurement says that pays, the runners keep separate
self-attention caches (``SeparateRunners`` semantics; ``resumed_full_passes`` stays 0).
"""

from __future__ import annotations

from typing import Callable, Iterable

import pluggy
import torch
from torch import nn

from viasd_adapt.checks import (
    check_drafter_reads_source,
    check_encoder_source,
    check_fits_positions,
    check_max_new_tokens,
    check_prompt_ids,
)
from viasd_adapt.engine import GenerationOutput, ModelDrafter, TieredVerifier, speculative_generate
from viasd_adapt.errors import ConfigError
from viasd_adapt.model_kind import OWN_ENCODER, TARGET_ENCODER_OUTPUT, is_encoder_decoder, source_reader
from viasd_adapt.routing.encdec import EncoderContext, SharedCrossAttention, decoder_cache_config, seq2seq_cache
from viasd_adapt.routing.shared import SeparateRunners
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.runner import (
    accepts_logits_to_keep,
    cache_kwarg_name,
    can_truncate,
    common_prefix_length,
    layers_bytes,
    truncate_cache,
)
from viasd_adapt.sampling import SamplingConfig, Warper, as_warper
from viasd_adapt.settings import TierSettings
from viasd_adapt.verify_step import VerifyStep


def _cache_layers(cache) -> list:
    return cache.self_attention_cache.layers


class Seq2SeqRunner:
    """Runs one model's decoder over a changing decoder sequence, against a fixed encoder output.

    Attributes:
        passes: decoder forward passes made (the metric "forward passes"; the encoder's one run per
            prompt is not a verification pass and is not counted).
        fed: decoder token ids whose keys/values the self-attention cache holds.
    """

    def __init__(self, model: nn.Module, encoder: EncoderContext, cache_factory: Callable[[], object] | None = None):
        self.model = model
        self.encoder = encoder
        self.reader = source_reader(model)
        if self.reader is None:
            raise ConfigError(f"{type(model).__name__} cannot read a source (neither an encoder nor encoder_outputs)")
        if self.reader == TARGET_ENCODER_OUTPUT and encoder.padded:
            raise ConfigError(
                f"{type(model).__name__} reads the target's encoder output without a source mask; a padded source "
                "would leak padding into its cross-attention (pass an unpadded source)"
            )
        if cache_factory is None:
            config = decoder_cache_config(model)
            cache_factory = lambda: seq2seq_cache(config)  # noqa: E731 - its own cross-attention part
        self._cache_factory = cache_factory
        self._cache_kwarg = cache_kwarg_name(model)
        self._trim_head = accepts_logits_to_keep(model)
        self.cache = cache_factory()
        self.fed: list[int] = []
        self.passes = 0

    def reset(self) -> None:
        self.cache = self._cache_factory()
        self.fed = []

    def _forward(self, tokens: list[int], n_tail: int) -> torch.Tensor:
        device = self.encoder.hidden_states.device
        ids = torch.tensor([tokens], dtype=torch.long, device=device)
        kwargs = {self._cache_kwarg: self.cache, "use_cache": True}
        if self.reader == OWN_ENCODER:
            kwargs.update(encoder_outputs=self.encoder.outputs(), decoder_input_ids=ids)
            if self.encoder.attention_mask is not None:
                kwargs["attention_mask"] = self.encoder.attention_mask
        else:
            kwargs.update(input_ids=ids, encoder_outputs=(self.encoder.hidden_states,))
        if self._trim_head:
            kwargs["logits_to_keep"] = n_tail
        return self.model(**kwargs).logits[0, -n_tail:].float()

    @torch.no_grad()
    def logits_for(self, sequence: list[int], n_tail: int) -> torch.Tensor:
        """Logits predicting the token after each of the last ``n_tail`` decoder tokens, ``(n_tail, V)``."""
        if not sequence:
            raise ConfigError("cannot run a decoder on an empty sequence (no decoder start token?)")
        if not 1 <= n_tail <= len(sequence):
            raise ValueError(f"n_tail={n_tail} must be in [1, {len(sequence)}]")
        keep = min(common_prefix_length(self.fed, sequence), len(sequence) - n_tail)
        if not can_truncate(_cache_layers(self.cache), keep):
            self.reset()
            keep = 0
        truncate_cache(_cache_layers(self.cache), keep)
        logits = self._forward(sequence[keep:], n_tail)
        self.passes += 1
        self.fed = list(sequence)
        return logits

    def cache_bytes(self) -> int:
        """Bytes of the self-attention keys/values (the cross-attention part may be shared)."""
        return layers_bytes(_cache_layers(self.cache))


class Seq2SeqTargetRunners(SeparateRunners):
    """q and u of an encoder-decoder target over one decoder sequence (module docstring).

    Implements :class:`~viasd_adapt.routing.shared.TargetRunners` like
    :class:`~viasd_adapt.routing.shared.SeparateRunners`, with encoder-decoder runners. Both read
    ``encoder`` (the target's encoder output for this prompt) and one :class:`SharedCrossAttention`.
    """

    def __init__(self, target: nn.Module, slim: SlimVerifier | None, encoder: EncoderContext):
        if not is_encoder_decoder(target):
            raise ConfigError(f"{type(target).__name__} is not an encoder-decoder model; use make_target_runners")
        if slim is not None and slim.target is not target:
            raise ConfigError("the slim verifier was built on another model than this target")
        config = decoder_cache_config(target)
        self.cross = SharedCrossAttention(config)
        super().__init__(
            Seq2SeqRunner(target, encoder, lambda: seq2seq_cache(config, None, self.cross)),
            Seq2SeqRunner(slim.model, encoder, lambda: seq2seq_cache(config, slim.mask.retained, self.cross))
            if slim is not None else None,
        )

    def cache_bytes(self) -> dict[str, int]:
        """Key/value bytes: q's and u's self-attention caches, and the cross-attention cache they share."""
        return super().cache_bytes() | {"shared": self.cross.bytes()}


class Seq2SeqDrafter(ModelDrafter):
    """:class:`~viasd_adapt.engine.ModelDrafter`'s loop (``propose``) over a :class:`Seq2SeqRunner`.

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


def default_decoder_prompt(target: nn.Module) -> list[int]:
    """``[decoder_start_token_id]`` from the generation config (or the model config)."""
    for config in (getattr(target, "generation_config", None), target.config):
        start = getattr(config, "decoder_start_token_id", None)
        if isinstance(start, int):
            return [start]
    raise ConfigError(f"{type(target).__name__} has no decoder_start_token_id; pass decoder_prompt=[...]")


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


def seq2seq_verifier(target: nn.Module, settings: TierSettings, sampling: SamplingConfig | Warper,
                     encoder: EncoderContext, slim: SlimVerifier | None = None,
                     plugin_manager: pluggy.PluginManager | None = None, framework: str = "engine",
                     step: VerifyStep | None = None) -> TieredVerifier:
    """A :class:`~viasd_adapt.engine.TieredVerifier` whose runners are :class:`Seq2SeqTargetRunners`
    (``step``: the run's verify step, when the run already has one: the rows of an HF call)."""
    runners = Seq2SeqTargetRunners(target, slim if settings.mode.uses_slim else None, encoder)
    return TieredVerifier(target, settings, sampling, slim, plugin_manager, framework=framework, runners=runners, step=step)


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


def load_input_features(path) -> torch.Tensor:
    """Encoder input features (Whisper's log-mel) from ``.npy`` (NumPy) or ``.pt``/``.pth`` (a torch
    tensor), as float32 ``(1, mel, frames)``."""
    from pathlib import Path

    from viasd_adapt.errors import ViasdError

    path = Path(path).expanduser()
    if not path.is_file():
        raise ViasdError(f"input features file not found: {path}")
    if path.suffix not in (".npy", ".pt", ".pth"):
        raise ConfigError(f"input features must be a .npy or .pt file, got {path.name}")
    try:
        if path.suffix == ".npy":
            import numpy as np

            features = torch.from_numpy(np.load(path, allow_pickle=False))
        else:
            features = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, ValueError, RuntimeError) as err:
        raise ViasdError(f"cannot read input features from {path}: {str(err).splitlines()[0]}") from None
    if not isinstance(features, torch.Tensor) or features.dim() not in (2, 3) or not features.is_floating_point():
        raise ConfigError(f"input features in {path} must be a float array of shape (mel, frames) or (1, mel, frames)")
    features = features.float()
    return features.unsqueeze(0) if features.dim() == 2 else features


def request_source(pair, request) -> torch.Tensor:
    """The encoder input of a :class:`~viasd_adapt.pair.RunRequest` for an encoder-decoder pair:
    ``prompt_ids`` as source ids, or ``input_features`` for a target that reads features."""
    from viasd_adapt.checks import check_encoder_source, check_token_ids_in_vocabulary

    target = pair.target
    features = getattr(request, "input_features", None)
    if getattr(target, "main_input_name", "input_ids") == "input_ids":
        if features is not None:
            raise ConfigError(f"{type(target).__name__} reads source token ids; input_features are for targets like Whisper")
        ids = check_prompt_ids(request.prompt_ids)
        check_token_ids_in_vocabulary(ids, target, what="source")
        source = torch.tensor([ids], dtype=torch.long, device=pair.device)
        for model in (target, pair.draft):
            if model is not None and is_encoder_decoder(model):
                check_fits_encoder(model, source)
        return source
    features = check_encoder_source(features, what=f"input features of {type(target).__name__}")
    if features.dim() == 2:
        features = features.unsqueeze(0)
    dtype = next(target.parameters()).dtype
    return features.to(device=pair.device, dtype=dtype)


def generated_tokens(target: nn.Module, sequences: torch.Tensor) -> list[int]:
    """The new tokens of row 0 of a ``generate`` output: after the decoder start token (Whisper's
    ``generate`` already strips its decoder prompt)."""
    skip = 0 if getattr(target.config, "model_type", "") == "whisper" else len(default_decoder_prompt(target))
    return sequences[0, skip:].tolist()


def run_ar(pair, request):
    """The ``ar`` row for an encoder-decoder pair: ``target.generate`` on the source, no assistant."""
    from viasd_adapt.frameworks import generation_config_for
    from viasd_adapt.ledger import plain_decoding_metrics
    from viasd_adapt.pair import RunOutput

    check_decoder_cache_layers(pair.target)
    source = request_source(pair, request)
    torch.manual_seed(request.seed)
    with torch.no_grad():
        out = pair.target.generate(**{pair.target.main_input_name: source}, generation_config=generation_config_for(pair, request))
    tokens = generated_tokens(pair.target, out)
    return RunOutput(tokens, plain_decoding_metrics(tokens))


def run_engine(pair, request):
    """The ``engine`` row for an encoder-decoder pair: :func:`seq2seq_generate` (mode none: untiered SD)."""
    from viasd_adapt.pair import RunOutput

    settings = request.settings
    slim = SlimVerifier(pair.target, pair.routing) if settings.mode.uses_slim else None
    generator = torch.Generator(device="cpu").manual_seed(request.seed)
    eos = pair.eos_token_ids if request.stop_at_eos else ()
    out = seq2seq_generate(pair.target, pair.draft, request_source(pair, request), request.max_new_tokens, settings,
                           request.sampling, slim=slim, eos_token_ids=eos, generator=generator, framework="engine")
    return RunOutput(out.tokens, out.metrics)


__all__ = [
    "OWN_ENCODER",
    "TARGET_ENCODER_OUTPUT",
    "Seq2SeqDrafter",
    "Seq2SeqRunner",
    "Seq2SeqTargetRunners",
    "check_decoder_cache_layers",
    "check_fits_decoder",
    "check_fits_encoder",
    "decoder_position_limit",
    "default_decoder_prompt",
    "drafter_context",
    "generated_tokens",
    "load_input_features",
    "request_source",
    "run_ar",
    "run_engine",
    "seq2seq_generate",
    "seq2seq_verifier",
    "source_reader",
]
