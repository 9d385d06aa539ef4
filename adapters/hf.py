"""Hugging Face transformers adapter: the slim tier inside ``target.generate(assistant_model=...)``.

The user's code stays::

    from viasd_adapt.adapters import hf
    with hf.tiered(target, mask="mask.json", settings=TierSettings(mode="lossy")) as session:
        out = target.generate(**inputs, assistant_model=drafter, max_new_tokens=64)
    print(session.metrics.to_dict())

Seams (verified on transformers 5.24):

* **none** runs transformers' own assisted-decoding loop, untouched: no input check, no changed
  type, no changed state. Its cycles are only *observed* (instance-level wrappers on the per-call
  candidate generator that call the originals and return their results), so the patched model
  behaves exactly like the stock one, and the session still gets the untiered metrics.
* **lenient / lossless / lossy / audit** run the tier's own loop
  (:func:`viasd_adapt.engine.loop.speculative_generate`, one :func:`viasd_adapt.core.cycle.decide_cycle`
  per cycle), registered through ``generate(custom_generate=<callable>)``. transformers 5.24 drops
  ``assistant_model`` (and the streamer) when ``custom_generate`` is a callable, so the patched
  ``generate`` takes the drafter out of the call and closes over it; transformers still prepares
  the generation config, the stopping criteria and the logits processors, and puts the prompt on
  the streamer. The prepared processors are applied to every model's logits row by row, as the
  stock loop applies them to q's. The loop drafts ``settings.gamma`` tokens per cycle and never
  touches the assistant's generation config (the heuristic draft-length schedule of stock
  assisted decoding keeps its state: a tiered call leaves nothing behind that changes later calls).

Encoder-decoder targets (T5, BART, mBART, Marian, Whisper) take the same paths; their tiered rows
reuse the target's encoder output and run the engine over the decoder ids
(:mod:`viasd_adapt.adapters.hf_seq2seq`, :mod:`viasd_adapt.engine.seq2seq`).

KV caches: the target's runners (:mod:`viasd_adapt.routing.shared`) are built per ``generate``
call. With a mask whose first skipped layer s1 > 0 the slim and full verifiers share the cache
and the residual stream of layers below s1, and q's passes over tokens u already saw start at s1.

GPU options (transformers' own speed switches) with the tier:

* attention: ``sdpa`` (transformers' default), ``eager`` and ``flash_attention_2`` only change
  the attention kernel; the routed views and the shared prefix use the model's own layers, so
  they work as the target does (sdpa and eager are tested; FA2 is not installed where we test);
* ``torch.compile``: compile the decoder layers in place (``layer.compile()``), which every view
  shares; ``model.compile()`` and ``model.forward = torch.compile(model.forward)`` leave the
  routed views uncompiled; a ``torch.compile(model)`` wrapper is refused with a clear error;
* caches: the tier keeps its own dynamic caches; another ``cache_implementation`` (static,
  offloaded, quantized, hybrid) is replaced for the call with a :class:`ViasdCacheWarning`, and a
  cache object passed to ``generate`` is refused (it would not be updated).

Thread safety: the patch sets instance attributes (``generate`` and ``_get_candidate_generator``) on
this one model object, never on its class, so other instances are untouched. The installed methods
are dispatchers that look up the session of the *calling thread*: a thread that did not open a
session on this model gets the original methods, even while another thread is inside ``tiered``.
Sessions nest; the instance attributes are removed (or the user's own instance attributes put
back) when the last session on the model closes, also when generation raised.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import os
import threading
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Iterator

import torch
from torch import nn
from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

from viasd_adapt.checks import (
    check_drafter_pair,
    check_fits_context,
    check_max_new_tokens,
    check_prompt_batch,
    check_same_tokenizer,
    eos_ids,
)
from viasd_adapt.engine.drafters import ModelDrafter
from viasd_adapt.engine.verifier import TieredVerifier
from viasd_adapt.engine.loop import speculative_generate
from viasd_adapt.engine.prompt_lookup import DEFAULT_MAX_NGRAM, PromptLookupSpec
from viasd_adapt.errors import ConfigError, ViasdError
from viasd_adapt.core.metrics import TierMetrics
from viasd_adapt.model_kind import model_kind
from viasd_adapt.routing.layers import find_decoder_stack, is_encoder_decoder, refuse_compile_wrapper
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.core.sampling import ProcessorWarper
from viasd_adapt.core.settings import Mode, TierSettings
from viasd_adapt.core.tiers import verified_cycle
from viasd_adapt.config.resolve import UNREAD
from viasd_adapt.config.tuned import PROMPT_LOOKUP_DRAFTER
from viasd_adapt.core.notices import caller_stacklevel, emit
from viasd_adapt.models.pair import LoadedPair
from viasd_adapt.engine.context import RunContext, drafter_identity, open_context
from viasd_adapt.core.verify_step import VerifyStep

FRAMEWORK = "hf"
_PATCHED_ATTRIBUTES = ("generate", "_get_candidate_generator")


class ViasdFallbackWarning(UserWarning):
    """The tier was not applied to a call; transformers' stock path ran instead."""


class ViasdCacheWarning(UserWarning):
    """A cache implementation the call asked for is replaced by the tier's own caches."""


# ============================================================================ sessions


@dataclass
class TierSession:
    """One ``patch``: the run context it opened (settings, slim verifier, plugins) and the metrics of
    the calls made under it.

    Attributes:
        context: the :class:`~viasd_adapt.engine.context.RunContext` the calls run (its settings, slim
            verifier, plugin manager); each call runs it for the call's drafter
            (:meth:`context_for`): for a drafter the tuned settings were not measured with, the
            defaults, for that call only.
        metrics: the sum over every tiered ``generate`` call made under this patch (one call: that call).
        history: the metrics of each call, in order.
        fallbacks: why calls ran the stock path instead (one line per such call).
    """

    target: nn.Module
    context: RunContext = field(repr=False)
    tokenizer: Any = None
    assistant_tokenizer: Any = None
    thread_id: int = field(default_factory=threading.get_ident)
    metrics: TierMetrics = field(default_factory=TierMetrics)
    history: list[TierMetrics] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)
    closed: bool = False
    share_prefix: bool = True
    _call: "_StockObserver | None" = field(default=None, repr=False)
    # the context of each drafter seen (by object for a model: fingerprinted once per session)
    _by_drafter: dict = field(default_factory=dict, repr=False)

    @property
    def tier(self) -> RunContext:
        """The session's run context, by its 0.2 name."""
        return self.context

    @property
    def settings(self) -> TierSettings:
        return self.context.settings

    @property
    def slim(self) -> SlimVerifier | None:
        return self.context.slim

    @property
    def plugins(self) -> tuple:
        return self.context.plugins

    @property
    def plugin_manager(self) -> Any:
        return self.context.plugin_manager

    def context_for(self, drafter: Any) -> RunContext:
        """The context of a call drafting with ``drafter`` (its assistant model, or prompt lookup):
        :meth:`RunContext.for_drafter`, once per drafter; its notices (tuned settings measured with
        another drafter) are given the first time."""
        key = id(drafter) if isinstance(drafter, nn.Module) else hash(drafter_identity(drafter))
        if key not in self._by_drafter:
            context = self.context.for_drafter(drafter)
            emit(context.notices)
            self._by_drafter[key] = (drafter, replace(context, notices=()))  # the drafter kept: its id stays its own
        return self._by_drafter[key][1]

    @property
    def mode(self) -> Mode:
        return self.settings.mode

    @property
    def last_metrics(self) -> TierMetrics | None:
        return self.history[-1] if self.history else None

    def _record(self, metrics: TierMetrics) -> None:
        self.history.append(metrics)
        self.metrics = self.metrics.merge(metrics)


class _InstancePatch:
    """The attributes installed on one model object, and the sessions (per thread) using them."""

    def __init__(self, model: nn.Module):
        self.model = model
        # The user's own instance attributes (rare), put back when the last session closes.
        self.saved = {name: model.__dict__[name] for name in _PATCHED_ATTRIBUTES if name in model.__dict__}
        self.sessions: dict[int, list[TierSession]] = {}
        object.__setattr__(model, "generate", self._dispatch_generate)
        object.__setattr__(model, "_get_candidate_generator", self._dispatch_candidate_generator)

    def original(self, name: str):
        """The method the model would have without the patch."""
        if name in self.saved:
            return self.saved[name]
        return getattr(type(self.model), name).__get__(self.model, type(self.model))

    def current(self) -> TierSession | None:
        stack = self.sessions.get(threading.get_ident())
        return stack[-1] if stack else None

    def restore(self) -> None:
        for name in _PATCHED_ATTRIBUTES:
            self.model.__dict__.pop(name, None)
            if name in self.saved:
                object.__setattr__(self.model, name, self.saved[name])

    # -------------------------------------------------------------- dispatchers
    def _dispatch_generate(self, *args, **kwargs):
        session = self.current()
        if session is None or getattr(_THREAD_STATE, "inside", False):
            return self.original("generate")(*args, **kwargs)
        _THREAD_STATE.inside = True
        try:
            return _tiered_generate(session, self.original("generate"), args, kwargs)
        finally:
            _THREAD_STATE.inside = False

    def _dispatch_candidate_generator(self, *args, **kwargs):
        generator = self.original("_get_candidate_generator")(*args, **kwargs)
        session = self.current()
        call = session._call if session is not None else None
        if call is None:
            return generator
        return call.wrap(generator, kwargs)


_REGISTRY_LOCK = threading.Lock()
_PATCHES: dict[int, _InstancePatch] = {}
_THREAD_STATE = threading.local()


# ============================================================================ public API


def patch(
    target: nn.Module | LoadedPair,
    mask: RoutingMask | MaskArtifact | str | os.PathLike | None = None,
    settings: TierSettings | None = None,
    plugins: Iterable[object] = (),
    tokenizer: Any = None,
    assistant_tokenizer: Any = None,
    share_prefix: bool = True,
    tuned: Any = UNREAD,
    context: RunContext | None = None,
) -> TierSession:
    """Adds the slim tier to ``target.generate(..., assistant_model=...)`` for the calling thread.

    Args:
        target: the full verifier q (a transformers causal LM, or an encoder-decoder model: T5, BART,
            mBART, Marian, Whisper), or a pair from :func:`viasd_adapt.load_pair`: its target, and
            its mask unless ``mask`` is given.
        mask: the routing mask of the slim verifier: a :class:`RoutingMask`, a
            :class:`MaskArtifact`, or the path of a ``mask.json`` (checked against ``target``'s
            fingerprint). Not needed for ``mode="none"``.
        settings: thresholds and mode; None runs ``viasd tune``'s choice beside a mask path when it
            was measured with that mask, else :class:`TierSettings` defaults (lossy). The choice is
            checked against each call's drafter: a call whose ``assistant_model`` (or prompt lookup)
            is not the drafter it was measured with runs the defaults, with a
            ``TunedForAnotherDrafterWarning`` (once per drafter).
        plugins: pluggy plugins (rules and observers, see :mod:`viasd_adapt.core.hooks`).
        tokenizer, assistant_tokenizer: when given, their vocabularies must be identical.
        share_prefix: let q resume from the slim verifier's hidden states at its first skipped
            layer (:mod:`viasd_adapt.routing.shared`); False gives each verifier its own cache.
        tuned: the tuned file the adaptive tier's prices and priors come from (None: none); by
            default the ``tuned.json`` beside a mask path (:func:`~viasd_adapt.engine.context.open_context`).
        context: the run's context, when the caller built it (:mod:`viasd_adapt.frameworks`' requests);
            ``mask``, ``settings``, ``plugins`` and ``tuned`` are then its own.

    Returns the session handle; pass it to :func:`unpatch`.
    """
    if isinstance(target, LoadedPair):
        pair, target = target, target.target
        if context is None and mask is None:  # what the pair read when it loaded: nothing is read again
            context = pair.run_context(settings, plugins)
    refuse_compile_wrapper(target)  # it has a generate() of sorts, but patching it would reach nothing
    if not hasattr(target, "generate") or not hasattr(type(target), "_get_candidate_generator"):
        raise ConfigError(f"{type(target).__name__} is not a transformers generation model (no generate())")
    find_decoder_stack(target)  # a clear UnsupportedModelError before anything is patched
    if context is None:
        context = open_context(target, mask, settings, plugins, tuned=tuned)
    else:
        emit(context.notices)
    check_same_tokenizer(tokenizer, assistant_tokenizer, role="assistant")
    session = TierSession(target, context, tokenizer, assistant_tokenizer, share_prefix=share_prefix)
    with _REGISTRY_LOCK:
        record = _PATCHES.get(id(target))
        if record is None or record.model is not target:
            record = _PATCHES[id(target)] = _InstancePatch(target)
        record.sessions.setdefault(session.thread_id, []).append(session)
    return session


def unpatch(handle: TierSession) -> None:
    """Closes a session; the model's original methods return when its last session closes.

    Idempotent, and callable from any thread.
    """
    if handle.closed:
        return
    with _REGISTRY_LOCK:
        handle.closed = True
        record = _PATCHES.get(id(handle.target))
        if record is None:
            return
        stack = record.sessions.get(handle.thread_id, [])
        if handle in stack:
            stack.remove(handle)
        if not stack:
            record.sessions.pop(handle.thread_id, None)
        if not record.sessions:
            record.restore()
            del _PATCHES[id(handle.target)]


@contextlib.contextmanager
def tiered(target: nn.Module | LoadedPair, *args: Any, **kwargs: Any) -> Iterator[TierSession]:
    """Context-manager form of :func:`patch` / :func:`unpatch`: the same arguments, and the patch
    is restored even when the block raises."""
    session = patch(target, *args, **kwargs)
    try:
        yield session
    finally:
        unpatch(session)


def is_patched(model: nn.Module) -> bool:
    """Whether any session (in any thread) is open on ``model``."""
    with _REGISTRY_LOCK:
        record = _PATCHES.get(id(model))
        return record is not None and record.model is model


# ============================================================================ validation


def _check_prompt(call: dict) -> None:
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


def _check_budget(call: dict) -> None:
    """The call's ``max_new_tokens``, given directly or in its generation config."""
    config = call.get("generation_config")
    explicit = call.get("max_new_tokens")
    if explicit is None and config is not None:
        explicit = getattr(config, "max_new_tokens", None)
    if explicit is not None:
        check_max_new_tokens(explicit)


def _fallback_reason(target: nn.Module, call: dict) -> str | None:
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


def _uncarried_inputs_reason(target: nn.Module, original, call: dict) -> str | None:
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


def _check_cache_options(target: nn.Module, call: dict) -> None:
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


# ============================================================================ generate


def _normalise_call(original, args: tuple, kwargs: dict) -> dict:
    """All arguments of a ``generate`` call by name (positional ones included)."""
    try:
        bound = inspect.signature(original).bind(*args, **kwargs)
    except TypeError as err:
        raise ConfigError(f"bad arguments to generate(): {err}") from None
    call = dict(bound.arguments)
    call.update(call.pop("kwargs", {}))
    return call


def _fall_back(session: TierSession, reason: str, run):
    warnings.warn(f"viasd-adapt: the slim tier is off for this call ({reason}); running transformers' stock path",
                  ViasdFallbackWarning, stacklevel=caller_stacklevel())
    session.fallbacks.append(reason)
    return run()


def _call_drafter(session: TierSession, original, args: tuple, kwargs: dict):
    """What this call drafts with (its assistant model, or prompt lookup); None when it names neither
    or its arguments cannot be read (the call itself then says what is wrong)."""
    try:
        call = _normalise_call(original, args, kwargs)
    except ConfigError:
        return None
    if call.get("assistant_model") is not None:
        return call["assistant_model"]
    config = call.get("generation_config") or session.target.generation_config
    lookup = call.get("prompt_lookup_num_tokens") or getattr(config, "prompt_lookup_num_tokens", None)
    return PROMPT_LOOKUP_DRAFTER if lookup is not None else None


def _tiered_generate(session: TierSession, original, args: tuple, kwargs: dict):
    target = session.target
    # the call's context: for its drafter (settings=None ran the tuned choice: was it measured with it?)
    drafter = _call_drafter(session, original, args, kwargs)
    context = session.context_for(drafter) if drafter is not None else session.context
    if getattr(original, "__func__", None) is not getattr(type(target), "generate", None):
        return _fall_back(session, "generate() was replaced on this instance before patching; calling that replacement",
                          lambda: original(*args, **kwargs))
    if context.mode is Mode.NONE:
        return _generate_observed(session, context, original, args, kwargs)
    call = _normalise_call(original, args, kwargs)
    reason = _fallback_reason(target, call) or _uncarried_inputs_reason(target, original, call)
    if reason is not None:
        return _fall_back(session, reason, lambda: original(**call))
    if model_kind(target).encoder_decoder:  # a source and a decoder prompt instead of one prompt
        from viasd_adapt.adapters.hf_seq2seq_loop import prepare_seq2seq_call

        prepare_seq2seq_call(target, call)
    else:
        _check_prompt(call)
    _check_budget(call)
    _check_cache_options(target, call)
    if call.get("assistant_model") is not None:  # prompt lookup drafts from the prompt's own tokens
        check_drafter_pair(target, call["assistant_model"], call.get("tokenizer", session.tokenizer),
                           call.get("assistant_tokenizer", session.assistant_tokenizer), role="assistant")
    call.pop("assistant_tokenizer", None)  # same vocabulary established above; stock would refuse it
    return _generate_own_loop(session, context, original, call)


def _attach(output, metrics: TierMetrics):
    if not isinstance(output, torch.Tensor):
        setattr(output, "viasd_metrics", metrics)
    return output


# ---------------------------------------------------------------------------- none: stock, observed


class _StockObserver:
    """Mode ``none``: transformers' own loop runs untouched; this only watches its cycles.

    The candidate generator transformers builds keeps its type and every behaviour: two of its
    methods get instance-level wrappers (on that one, per-call object) that call the originals with
    the same arguments, return their results unchanged, and note the drafts and what was kept.
    Observation never raises into the stock loop: a generator it cannot read is simply not counted.
    """

    def __init__(self, context: RunContext):
        self.step = context.verify_step(FRAMEWORK, make=VerifyStep)
        self.pending: tuple[int, int] | None = None  # (committed length, drafts) of the open cycle

    def wrap(self, generator, kwargs: dict):
        get_candidates, update = generator.get_candidates, generator.update_candidate_strategy

        def observed_get_candidates(input_ids, *args, **kw):
            out = get_candidates(input_ids, *args, **kw)
            with contextlib.suppress(Exception):
                self.pending = (int(input_ids.shape[1]), int(out[0].shape[1] - input_ids.shape[1]))
            return out

        def observed_update(input_ids, scores, num_matches, *args, **kw):
            cycle = None
            with contextlib.suppress(Exception):  # reading transformers' state may fail: then not counted
                cycle = self._read(input_ids, int(num_matches))
            if cycle is not None:  # recording runs the user's observers: their errors are theirs to see
                # the stock assistant runs one forward per draft; prompt lookup runs no model
                draft_passes = 0 if isinstance(generator, PromptLookupCandidateGenerator) else cycle[1]
                self.step.observe(cycle[0], drafted=cycle[1], draft_passes=draft_passes)
            return update(input_ids, scores, num_matches, *args, **kw)

        generator.get_candidates = observed_get_candidates
        generator.update_candidate_strategy = observed_update
        return generator

    def _read(self, input_ids: torch.Tensor, num_matches: int):
        """The cycle transformers just verified, as ``(CycleResult, drafted)``; None if none is open."""
        if self.pending is None:
            return None
        start, drafted = self.pending
        self.pending = None
        tokens = input_ids[0, start:].tolist()
        return verified_cycle(tokens, min(num_matches, len(tokens) - 1), drafted, drafted), drafted


def _generate_observed(session: TierSession, context: RunContext, original, args: tuple, kwargs: dict):
    observer = _StockObserver(context)
    session._call = observer
    try:
        output = original(*args, **kwargs)
    finally:
        session._call = None
    session._record(observer.step.metrics)
    return _attach(output, observer.step.metrics)


# ---------------------------------------------------------------------------- tiered modes: own loop


class _OwnLoop:
    """The decoding method handed to ``generate(custom_generate=...)`` for every tiered mode.

    transformers calls it as ``method(model, input_ids, logits_processor=, stopping_criteria=,
    generation_config=, **model_kwargs)`` after preparing all of those; the drafter and streamer,
    which 5.24 does not forward to a callable, are closed over. The prepared logits processors are
    applied to p, u and q row by row with each row's prefix (:class:`ProcessorWarper`), as the stock
    loop applies them to q. For an encoder-decoder target ``input_ids`` are the decoder ids and
    ``inputs_tensor`` the source; its rows are built by :class:`viasd_adapt.adapters.hf_seq2seq.Seq2SeqRows`.
    """

    def __init__(self, session: TierSession, context: RunContext, assistant: nn.Module | None, streamer,
                 lookup: tuple[int, PromptLookupSpec] | None = None):
        self.session, self.assistant, self.streamer = session, assistant, streamer
        # the call's context: with prompt lookup, the call's prompt_lookup_num_tokens is the block length, as in stock
        self.context = context if lookup is None else context.with_block_length(lookup[0])
        self.lookup = lookup  # (block length, spec) when the call asked for prompt lookup instead of an assistant
        self.metrics: TierMetrics | None = None

    def __call__(self, model, input_ids, logits_processor=None, stopping_criteria=None, generation_config=None,
                 inputs_tensor=None, **model_kwargs):
        config = generation_config
        max_new = check_max_new_tokens(int(config.max_length) - input_ids.shape[1])
        warper = ProcessorWarper(logits_processor, greedy=not bool(getattr(config, "do_sample", False)))
        # One verify step for the call, every row's cycles through it; the adaptive tier (when the
        # settings adapt) prices this call's drafter: the assistant, or none (lookup).
        self.step = self.context.verify_step(FRAMEWORK, make=VerifyStep, greedy=warper.greedy)
        kind = model_kind(model)
        if kind.encoder_decoder:  # input_ids are decoder ids; each row also reads its source
            from viasd_adapt.adapters.hf_seq2seq_loop import Seq2SeqRows

            generate_row = Seq2SeqRows(self, model, input_ids, inputs_tensor, model_kwargs, max_new, warper,
                                       stopping_criteria, config)
        else:
            attention = model_kwargs.get("attention_mask")

            def generate_row(b: int):
                row = input_ids[b] if attention is None else input_ids[b][attention[b].bool()]
                return self._generate_row(model, row, max_new, stopping_criteria, config, warper)

        rows = []
        try:
            for b in range(input_ids.shape[0]):
                rows.append(generate_row(b))
        finally:
            if self.streamer is not None:
                self.streamer.end()
        metrics = rows[0].metrics
        for extra in rows[1:]:
            metrics = metrics.merge(extra.metrics)
        self.metrics = metrics
        sequences = _pad_right(input_ids, [r.tokens for r in rows], _pad_id(config))
        if config.return_dict_in_generate:
            output = kind.generate_output_class()(sequences=sequences)
            output.viasd_row_metrics = [r.metrics for r in rows]
            return output
        return sequences

    def _generate_row(self, model, prompt_ids: torch.Tensor, max_new: int, stopping_criteria, config, warper):
        """One sequence (padding already stripped, so positions start at 0 as HF's mask-derived ones do)."""
        session = self.session
        # No speculative margin: the engine shortens every block to the budget left, so no forward
        # (draft, verify or bonus) reaches past prompt + max_new positions.
        check_fits_context(model, prompt_ids.shape[0], max_new)
        verifier = TieredVerifier.of(self.context, self.step, warper, share_prefix=session.share_prefix)
        if self.lookup is None:
            drafter = ModelDrafter(self.assistant, warper)
        else:
            drafter = self.lookup[1].drafter(verifier.vocab_size, eos_ids(_config_eos(config)), prompt_ids.device)
        return self.run_row(verifier, drafter, prompt_ids, max_new, stopping_criteria, config)

    def run_row(self, verifier, drafter, prompt_ids: torch.Tensor, max_new: int, stopping_criteria, config):
        """The engine loop for one row, with the call's stopping criteria, EOS ids and streamer."""
        device = prompt_ids.device

        def should_stop(ids: list[int]) -> bool:
            if not stopping_criteria:
                return False
            return bool(stopping_criteria(torch.tensor([ids], device=device), None).all())

        def on_tokens(new: list[int]) -> None:
            if self.streamer is not None and new:
                self.streamer.put(torch.tensor([new]))

        # No q prefill: like the stock loop, draft straight after the prompt (q sees the prompt at
        # its first pass), so cost is compared with assisted generation cycle for cycle.
        return speculative_generate(drafter, verifier, prompt_ids.tolist(), max_new, eos_ids(_config_eos(config)),
                                    None, on_tokens=on_tokens, should_stop=should_stop, q_prefill=False)


def _config_eos(config):
    """The EOS ids transformers prepared for this call (its tensor), else the config's own."""
    prepared = getattr(config, "_eos_token_tensor", None)
    return prepared if prepared is not None else config.eos_token_id


def _pad_id(config) -> int:
    for value in (getattr(config, "_pad_token_tensor", None), getattr(config, "pad_token_id", None)):
        if value is not None:
            return int(torch.as_tensor(value).reshape(-1)[0])
    eos = eos_ids(config.eos_token_id)
    return eos[0] if eos else 0


def _pad_right(input_ids: torch.Tensor, generated: list[list[int]], pad_id: int) -> torch.Tensor:
    """The (left-padded) prompts followed by each row's tokens, right-padded like HF's batched output."""
    width = max(len(tokens) for tokens in generated)
    tail = torch.full((input_ids.shape[0], width), pad_id, dtype=input_ids.dtype, device=input_ids.device)
    for b, tokens in enumerate(generated):
        tail[b, : len(tokens)] = torch.tensor(tokens, dtype=input_ids.dtype)
    return torch.cat([input_ids, tail], dim=-1)


def _lookup_request(target: nn.Module, call: dict) -> tuple[int, PromptLookupSpec] | None:
    """``(block length, spec)`` when the call asks for prompt lookup; takes the lookup options out of
    the call, since the tier's loop, not transformers', does the lookup."""
    config = call.get("generation_config") or target.generation_config
    num_tokens = call.pop("prompt_lookup_num_tokens", None) or getattr(config, "prompt_lookup_num_tokens", None)
    max_ngram = call.pop("max_matching_ngram_size", None) or getattr(config, "max_matching_ngram_size", None)
    if num_tokens is None:
        return None
    if getattr(config, "prompt_lookup_num_tokens", None) is not None:
        config = call["generation_config"] = copy.deepcopy(config)
        config.prompt_lookup_num_tokens = None
    return int(num_tokens), PromptLookupSpec(int(max_ngram or DEFAULT_MAX_NGRAM))


def _generate_own_loop(session: TierSession, context: RunContext, original, call: dict):
    lookup = _lookup_request(session.target, call)
    assistant = call.pop("assistant_model", None)
    loop = _OwnLoop(session, context, assistant, call.get("streamer"), lookup)
    call["custom_generate"] = loop
    output = original(**call)
    if loop.metrics is not None:
        session._record(loop.metrics)
        _attach(output, loop.metrics)
    return output


# ---------------------------------------------------------------------------- the framework runner


def fix_draft_length(draft: nn.Module, gamma: int) -> None:
    """Classic SD on the assistant: a constant block of ``gamma`` drafts, no early stop, so stock
    assisted generation drafts exactly like the tier's loop (like-for-like rows). Changes ``draft``'s
    generation config; :func:`drafting_blocks_of` leaves the drafter as it is."""
    _constant_blocks(draft.generation_config, gamma)


def _constant_blocks(config, gamma: int) -> None:
    config.num_assistant_tokens = gamma
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0


def drafting_blocks_of(draft: nn.Module, gamma: int) -> nn.Module:
    """``draft`` as an assistant that drafts constant blocks of ``gamma`` (:func:`fix_draft_length`),
    without changing it: a shallow copy that shares its weights and has its own generation config
    (stock assisted generation reads the block length from the assistant's config), so that runs
    with other block lengths on the same pair, in other threads too, do not see each other's."""
    view = copy.copy(draft)
    config = copy.deepcopy(draft.generation_config)
    _constant_blocks(config, gamma)
    view.generation_config = config
    return view


def run(pair, request):
    """The ``hf`` entry of :mod:`viasd_adapt.frameworks`: ``target.generate(assistant_model=draft)``,
    with no viasd-adapt at all (``plain``) or inside :func:`tiered` in the requested mode (the
    session is opened per call, as a user would, so its set-up is part of the measured time)."""
    from viasd_adapt.frameworks.registry import PLAIN
    from viasd_adapt.frameworks.baselines import assistant_config_notice_dropped, generation_config_for
    from viasd_adapt.frameworks.requests import RunOutput

    ids = torch.tensor([request.prompt_ids], dtype=torch.long, device=pair.device)
    if pair.lookup is None:
        drafter = dict(assistant_model=drafting_blocks_of(pair.draft, request.settings.gamma))
    else:  # stock prompt lookup (plain), or the tier's loop with the lookup drafter
        drafter = dict(prompt_lookup_num_tokens=request.settings.gamma, max_matching_ngram_size=pair.lookup.max_ngram)
    config = generation_config_for(pair, request, **{k: v for k, v in drafter.items() if k != "assistant_model"})

    def generate():
        torch.manual_seed(request.seed)
        with torch.no_grad(), assistant_config_notice_dropped():
            return pair.target.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config,
                                        assistant_model=drafter.get("assistant_model"))

    if request.mode == PLAIN:
        return RunOutput(generate()[0, ids.shape[1]:].tolist())
    with tiered(pair.target, context=request.context_on(pair)) as session:
        out = generate()
    if session.fallbacks:
        raise ViasdError(f"the hf adapter fell back to the stock path: {session.fallbacks[-1]}")
    return RunOutput(out[0, ids.shape[1]:].tolist(), session.last_metrics)


__all__ = [
    "TierSession",
    "TierSettings",
    "ViasdFallbackWarning",
    "is_patched",
    "drafting_blocks_of",
    "fix_draft_length",
    "patch",
    "run",
    "tiered",
    "unpatch",
]
