"""What a patched ``generate`` call may ask for: the checks that refuse it, the reasons it runs the
stock path instead (:class:`~viasd_adapt.adapters.hf.ViasdFallbackWarning`), and the cache options
the tier's loop replaces (:class:`~viasd_adapt.adapters.hf.ViasdCacheWarning`)."""

from __future__ import annotations

import inspect
import warnings

from torch import nn

from viasd_adapt.checks import check_max_new_tokens, check_prompt_batch
from viasd_adapt.core.notices import caller_stacklevel
from viasd_adapt.errors import ConfigError
from viasd_adapt.routing.layers import is_encoder_decoder


class ViasdFallbackWarning(UserWarning):
    """The tier was not applied to a call; transformers' stock path ran instead."""


class ViasdCacheWarning(UserWarning):
    """A cache implementation the call asked for is replaced by the tier's own caches."""


def check_prompt(call: dict) -> None:
    """The prompt of a ``generate`` call (``inputs`` or ``input_ids``); the tier's loop decodes a
    batch row by row, so a left-padded batch is fine (:func:`~viasd_adapt.checks.check_prompt_batch`)."""
    ids = call.get("inputs")
    if ids is None:
        ids = call.get("input_ids")
    if ids is None:
        if call.get("inputs_embeds") is not None:
            raise ConfigError("the slim tier needs input_ids; inputs_embeds-only generation is not supported")
        raise ConfigError("the prompt is empty: pass input_ids with at least one token")
    check_prompt_batch(ids, call.get("attention_mask"), streaming=call.get("streamer") is not None)


def check_budget(call: dict) -> None:
    """The call's ``max_new_tokens``, given directly or in its generation config."""
    config = call.get("generation_config")
    explicit = call.get("max_new_tokens")
    if explicit is None and config is not None:
        explicit = getattr(config, "max_new_tokens", None)
    if explicit is not None:
        check_max_new_tokens(explicit)


def fallback_reason(target: nn.Module, call: dict) -> str | None:
    """Why this call cannot be tiered (the stock path runs instead), or None when it can."""
    config = call.get("generation_config") or target.generation_config

    def setting(name):
        value = call.get(name)
        return value if value is not None else getattr(config, name, None)

    lookup = setting("prompt_lookup_num_tokens") is not None
    if lookup and call.get("assistant_model") is not None:
        return "both prompt_lookup_num_tokens and assistant_model were passed; stock decides which drafter runs"
    if lookup and is_encoder_decoder(target):
        return "prompt lookup on an encoder-decoder target (the tier's lookup drafter reads decoder-only prompts)"
    if setting("assistant_early_exit") is not None:
        return "early-exit drafting uses the target itself as the drafter"
    if call.get("assistant_model") is None and not lookup:
        return "no assistant_model was passed"
    if (setting("num_beams") or 1) > 1:
        return "beam search is not speculative decoding"
    if setting("assistant_ensemble_weight") is not None:
        return "assistant_ensemble_weight changes what the target verifies against (static ensemble verification)"
    if call.get("custom_generate") is not None:
        return "custom_generate was passed; the tier's loop is itself a custom_generate"
    per_step = [name for name in _PER_STEP_OUTPUTS if setting(name)]
    if per_step and setting("return_dict_in_generate"):
        return f"{', '.join(per_step)} asked for: per-step outputs that only the stock loop produces"
    return None


#: Model inputs the tier's loop carries into every forward it runs (decoder-only: the prompt and
#: its padding mask; encoder-decoder: the source, its mask, the decoder prompt and the encoder
#: output). ``past_key_values``/``cache`` and ``inputs_embeds`` are refused by name elsewhere.
_CARRIED_INPUTS = frozenset({
    "inputs", "input_ids", "attention_mask", "input_features", "decoder_input_ids", "decoder_attention_mask",
    "encoder_outputs", "past_key_values", "cache", "inputs_embeds", "tokenizer", "assistant_tokenizer",
})


def uncarried_inputs_reason(target: nn.Module, original, call: dict) -> str | None:
    """Why a call holds model inputs the tier's loop would drop (``token_type_ids``,
    ``position_ids``, ``pixel_values``, ...), or None.

    The loop feeds each model only token ids (and the encoder output): any other input the
    forward would have read is lost, and the output differs from stock with no error (GPT-2's
    ``token_type_ids`` add an embedding to every position). Such calls run the stock path.
    What counts as a model input is what transformers itself passes on to the forward: the
    keyword arguments that are neither ``generate()`` parameters nor generation-config fields.
    """
    from transformers import GenerationConfig
    from transformers.generation.utils import GenerationMixin

    # A model's own generate (Whisper's) takes the generic one's parameters through **kwargs.
    parameters = set(inspect.signature(original).parameters) | set(inspect.signature(GenerationMixin.generate).parameters)
    configs = (GenerationConfig(), call.get("generation_config") or target.generation_config)
    dropped = sorted(
        key for key, value in call.items()
        if value is not None and key not in _CARRIED_INPUTS and key not in parameters
        and not any(hasattr(config, key) for config in configs)
    )
    if dropped:
        return (f"model input{'s' if len(dropped) > 1 else ''} {', '.join(dropped)} given: the tier's loop feeds the "
                "models token ids only and would drop them")
    return None


def check_cache_options(target: nn.Module, call: dict) -> None:
    """The tier's loop keeps its own caches (:mod:`viasd_adapt.routing.shared`): DynamicCache-based,
    cropped when drafts are rejected, with per-layer objects shared between the slim and the full
    verifier. So:

    * a cache *object* passed to ``generate`` would be neither read nor updated, and code that
      reuses it afterwards (multi-turn prompt caching) would continue from a stale cache: refused;
    * ``cache_implementation`` other than dynamic (``"static"``, ``"offloaded"``, ``"quantized"``,
      Gemma2's ``"hybrid"`` in its shipped generation config, ...) is replaced by a dynamic one for
      this call, with a :class:`ViasdCacheWarning`, so transformers does not allocate a cache the
      loop would not use. The output is unchanged; what the option was for (a fixed-shape cache
      for ``torch.compile``, KV memory offloaded to the CPU) does not apply to the tiered call.
    """
    for key in ("past_key_values", "cache"):
        if call.get(key) is not None:
            raise ConfigError(
                f"generate({key}=...) with the slim tier: the tier's loop keeps its own KV caches and would neither use "
                "nor update the one passed; pass none (mode='none' runs transformers' own loop, which does)"
            )
    config = call.get("generation_config") or target.generation_config
    implementation = call.get("cache_implementation")
    if implementation is None:
        implementation = getattr(config, "cache_implementation", None)
    if implementation not in (None, "dynamic"):
        warnings.warn(
            f"viasd-adapt: cache_implementation={implementation!r} is not used by the slim tier's loop, which keeps "
            "dynamic KV caches it can crop and share between its verifiers; this call runs with those (same output)",
            ViasdCacheWarning, stacklevel=caller_stacklevel())
        call["cache_implementation"] = "dynamic"


# Fields of stock's dict output that the tier's loop does not produce (it returns sequences only).
_PER_STEP_OUTPUTS = ("output_scores", "output_logits", "output_attentions", "output_hidden_states")


def normalise_call(original, args: tuple, kwargs: dict) -> dict:
    """All arguments of a ``generate`` call by name (positional ones included)."""
    try:
        bound = inspect.signature(original).bind(*args, **kwargs)
    except TypeError as err:
        raise ConfigError(f"bad arguments to generate(): {err}") from None
    call = dict(bound.arguments)
    call.update(call.pop("kwargs", {}))
    return call

__all__ = ["ViasdCacheWarning", "ViasdFallbackWarning", "check_budget", "check_cache_options", "check_prompt", "fallback_reason", "normalise_call",
           "uncarried_inputs_reason"]
