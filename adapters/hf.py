"""Hugging Face transformers adapter: the slim tier inside ``target.generate(assistant_model=...)``.

The user's code stays::

    from viasd_adapt.adapters import hf
    with hf.tiered(target, mask="mask.json", settings=TierSettings(mode="lossy")) as session:
        out = target.generate(**inputs, assistant_model=drafter, max_new_tokens=64)
    print(session.metrics.to_dict())

Seams (verified on transformers 5.24, see VIA-SD.md sections 4-5):

* **lossless / none** run transformers' own assisted-decoding loop. ``_assisted_decoding`` calls
  ``self._get_candidate_generator(...)``; the patch wraps (never subclasses: transformers turns off
  its ROC threshold tuning unless ``type(gen) is AssistedCandidateGenerator``) the stock generator
  in :class:`TieredCandidateGenerator`. The wrapper runs the slim verifier u over the last token and
  the drafts, lets u accept or correct them (:func:`viasd_adapt.tiers.cascade_candidates`) and
  returns the revised candidates with u's processed logits as candidate logits. The stock loop then
  verifies them with q, so greedy output is q's and sampling is exactly q's distribution (the
  candidates are distributed as u, and q verifies them against u). In 5.x the candidate generator
  receives the *prepared* logits processors (temperature/top-k/top-p included); the wrapper applies
  that same list to u's logits, exactly as the stock loop does to q's, so the p -> u -> q ratios
  compare like with like. ``mode="none"`` wraps too, but only to count per-tier metrics.
* **lossy / audit** need their own loop, since the stock loop always runs q. It is registered
  through ``generate(custom_generate=<callable>)``. transformers 5.24 drops ``assistant_model``
  (and the streamer) when ``custom_generate`` is a callable, so the patched ``generate`` takes the
  drafter out of the call and closes over it; transformers still prepares the generation config,
  the stopping criteria and the logits processors, and puts the prompt on the streamer. The loop
  is :func:`viasd_adapt.engine.speculative_generate`: q runs only on escalation (audit: every cycle,
  in shadow) and catches up on slim-committed tokens in its next forward.

KV caches: the slim view never touches q's cache. It gets its own :class:`SlimCache` (retained
layers only) through a :class:`CachedRunner`, created per ``generate`` call. Sharing q's cache would
save the retained layers' KV memory, but u's keys for a retained layer are computed on u's residual
stream and differ from q's, so sharing would corrupt one of the two.

Thread safety: the patch sets instance attributes (``generate`` and ``_get_candidate_generator``) on
this one model object, never on its class, so other instances are untouched. The installed methods
are dispatchers that look up the session of the *calling thread*: a thread that did not open a
session on this model gets the original methods, even while another thread is inside ``tiered``.
Sessions nest; the instance attributes are removed (or the user's own instance attributes put
back) when the last session on the model closes, also when generation raised.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import torch
from torch import nn

from viasd_adapt.engine import ModelDrafter, TieredVerifier, speculative_generate
from viasd_adapt.errors import ConfigError, ModelMismatchError
from viasd_adapt.hooks import TierObserver, make_plugin_manager
from viasd_adapt.metrics import TierMetrics
from viasd_adapt.routing.layers import find_decoder_stack
from viasd_adapt.routing.mask import MaskArtifact, RoutingMask, resolve_mask
from viasd_adapt.routing.slim import SlimVerifier
from viasd_adapt.runner import CachedRunner
from viasd_adapt.sampling import SamplingConfig
from viasd_adapt.settings import Mode, TierSettings, check_max_new_tokens
from viasd_adapt.tiers import cascade_candidates, verified_cycle

FRAMEWORK = "hf"
_PATCHED_ATTRIBUTES = ("generate", "_get_candidate_generator")
# Logits processors the lossy loop reproduces through SamplingConfig; any other one is ignored there.
_SUPPORTED_WARPERS = {"TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper"}


class ViasdFallbackWarning(UserWarning):
    """The tier was not applied to a call; transformers' stock path ran instead."""


# ============================================================================ sessions


@dataclass
class TierSession:
    """One ``patch``: the settings, the slim verifier and the metrics of the calls made under it.

    Attributes:
        metrics: the sum over every tiered ``generate`` call of this session (one call: that call).
        history: the metrics of each call, in order.
        fallbacks: why calls ran the stock path instead (one line per such call).
    """

    target: nn.Module
    settings: TierSettings
    slim: SlimVerifier | None
    plugins: tuple = ()
    tokenizer: Any = None
    assistant_tokenizer: Any = None
    thread_id: int = field(default_factory=threading.get_ident)
    metrics: TierMetrics = field(default_factory=TierMetrics)
    history: list[TierMetrics] = field(default_factory=list)
    fallbacks: list[str] = field(default_factory=list)
    closed: bool = False
    plugin_manager: Any = field(default=None, repr=False)
    _call: "_LosslessCall | None" = field(default=None, repr=False)

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
    target: nn.Module,
    mask: RoutingMask | MaskArtifact | str | os.PathLike | None = None,
    settings: TierSettings | None = None,
    plugins: Iterable[object] = (),
    tokenizer: Any = None,
    assistant_tokenizer: Any = None,
) -> TierSession:
    """Adds the slim tier to ``target.generate(..., assistant_model=...)`` for the calling thread.

    Args:
        target: the full verifier q (a transformers causal LM).
        mask: the routing mask of the slim verifier: a :class:`RoutingMask`, a
            :class:`MaskArtifact`, or the path of a ``mask.json`` (checked against ``target``'s
            fingerprint). Not needed for ``mode="none"``.
        settings: thresholds and mode (default: :class:`TierSettings` defaults, lossy).
        plugins: pluggy plugins (rules and observers, see :mod:`viasd_adapt.hooks`).
        tokenizer, assistant_tokenizer: when given, their vocabularies must be identical.

    Returns the session handle; pass it to :func:`unpatch`.
    """
    settings = settings if settings is not None else TierSettings()
    if not isinstance(settings, TierSettings):
        raise ConfigError(f"settings must be a TierSettings, got {type(settings).__name__}")
    if not hasattr(target, "generate") or not hasattr(type(target), "_get_candidate_generator"):
        raise ConfigError(f"{type(target).__name__} is not a transformers generation model (no generate())")
    find_decoder_stack(target)  # a clear UnsupportedModelError before anything is patched
    routing = resolve_mask(target, mask, settings.mode.value)
    slim = SlimVerifier(target, routing) if routing is not None else None
    if tokenizer is not None and assistant_tokenizer is not None:
        _check_tokenizers(tokenizer, assistant_tokenizer)
    session = TierSession(target, settings, slim, tuple(plugins), tokenizer, assistant_tokenizer)
    # Built once: fails now on a malformed plugin, and entry-point discovery is not paid per call.
    session.plugin_manager = make_plugin_manager(session.plugins)
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
def tiered(
    target: nn.Module,
    mask: RoutingMask | MaskArtifact | str | os.PathLike | None = None,
    settings: TierSettings | None = None,
    plugins: Iterable[object] = (),
    tokenizer: Any = None,
    assistant_tokenizer: Any = None,
) -> Iterator[TierSession]:
    """Context-manager form of :func:`patch` / :func:`unpatch` (restored even on exceptions)."""
    session = patch(target, mask, settings, plugins, tokenizer, assistant_tokenizer)
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


def _vocab_size(model: nn.Module) -> int | None:
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return getattr(text, "vocab_size", None)


def _check_tokenizers(tokenizer, assistant_tokenizer) -> None:
    if tokenizer is assistant_tokenizer:
        return
    if tokenizer.get_vocab() != assistant_tokenizer.get_vocab():
        raise ModelMismatchError(
            "the target and assistant tokenizers have different vocabularies; the slim tier compares "
            "distributions token by token, so drafter and target must share one tokenizer"
        )


def _check_pair(session: TierSession, target: nn.Module, assistant: nn.Module, call: dict) -> None:
    v_target, v_assistant = _vocab_size(target), _vocab_size(assistant)
    if v_target != v_assistant:
        raise ModelMismatchError(
            f"vocabulary mismatch: the target has {v_target} tokens, the assistant {v_assistant}; the slim "
            "tier needs drafter and target to share one tokenizer (universal assisted decoding is not supported)"
        )
    tok = call.get("tokenizer", session.tokenizer)
    atok = call.get("assistant_tokenizer", session.assistant_tokenizer)
    if tok is not None and atok is not None:
        _check_tokenizers(tok, atok)


def _check_prompt(call: dict, rows_supported: bool) -> None:
    """``rows_supported``: the lossy/audit loop decodes a batch row by row (left padding allowed)."""
    ids = call.get("inputs")
    if ids is None:
        ids = call.get("input_ids")
    if ids is None:
        if call.get("inputs_embeds") is not None:
            raise ConfigError("the slim tier needs input_ids; inputs_embeds-only generation is not supported")
        raise ConfigError("the prompt is empty: pass input_ids with at least one token")
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        raise ConfigError(f"input_ids must be a 2-D tensor (batch, length), got {getattr(ids, 'shape', type(ids))}")
    if ids.shape[1] == 0:
        raise ConfigError("the prompt is empty: at least one token is needed to condition on")
    if ids.shape[0] != 1 and not rows_supported:
        raise ConfigError(
            f"batch size {ids.shape[0]} is not supported in this mode (transformers' assisted loop is "
            "single-sequence); generate one prompt at a time, or use mode lossy/audit, which decode a batch row by row"
        )
    mask = call.get("attention_mask")
    if mask is not None and bool((mask == 0).any()):
        if not rows_supported:
            raise ConfigError("padded prompts (attention_mask with zeros) are not supported in this mode")
        if bool((mask.sum(dim=-1) == 0).any()):
            raise ConfigError("the prompt is empty: a row of the batch is all padding")
        if mask.shape != ids.shape or bool((mask[:, -1] == 0).any()) or bool((mask.diff(dim=-1) < 0).any()):
            raise ConfigError("only left padding is supported: attention_mask must be 0...0 1...1 on every row")
    if ids.shape[0] != 1 and call.get("streamer") is not None:
        raise ConfigError("streamers support a single sequence; pass one prompt when streaming")


def _check_budget(target: nn.Module, call: dict) -> None:
    config = call.get("generation_config")
    explicit = call.get("max_new_tokens")
    if explicit is None and config is not None:
        explicit = getattr(config, "max_new_tokens", None)
    if explicit is not None:
        check_max_new_tokens(explicit)


def _fallback_reason(target: nn.Module, call: dict) -> str | None:
    """Why the drafter is not a separate model we can tier, or None when it is."""
    config = call.get("generation_config") or target.generation_config

    def setting(name):
        value = call.get(name)
        return value if value is not None else getattr(config, name, None)

    if setting("prompt_lookup_num_tokens") is not None:
        return "prompt lookup decoding has no drafter distribution"
    if setting("assistant_early_exit") is not None:
        return "early-exit drafting uses the target itself as the drafter"
    assistant = call.get("assistant_model")
    if assistant is None:
        return "no assistant_model was passed"
    if assistant is target:
        return "the assistant is the target itself"
    if (setting("num_beams") or 1) > 1:
        return "beam search is not speculative decoding"
    return None


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


def _tiered_generate(session: TierSession, original, args: tuple, kwargs: dict):
    target = session.target
    if getattr(original, "__func__", None) is not getattr(type(target), "generate", None):
        reason = "generate() was replaced on this instance before patching; calling that replacement"
        warnings.warn(f"viasd-adapt: the slim tier is off for this call ({reason})", ViasdFallbackWarning, stacklevel=3)
        session.fallbacks.append(reason)
        return original(*args, **kwargs)
    call = _normalise_call(original, args, kwargs)
    reason = _fallback_reason(target, call)
    if reason is not None:
        warnings.warn(f"viasd-adapt: the slim tier is off for this call ({reason}); running transformers' stock path",
                      ViasdFallbackWarning, stacklevel=3)
        session.fallbacks.append(reason)
        return original(**call)
    _check_prompt(call, rows_supported=session.mode in (Mode.LOSSY, Mode.AUDIT))
    _check_budget(target, call)
    _check_pair(session, target, call["assistant_model"], call)
    call.pop("assistant_tokenizer", None)  # same vocabulary established above; stock would refuse it
    if session.mode in (Mode.NONE, Mode.LOSSLESS):
        return _generate_cascade(session, original, call)
    return _generate_own_loop(session, original, call)


def _attach(output, metrics: TierMetrics):
    if not isinstance(output, torch.Tensor):
        setattr(output, "viasd_metrics", metrics)
    return output


# ---------------------------------------------------------------------------- lossless / none


class _LosslessCall:
    """State of one stock assisted-decoding call: wraps the candidate generator it builds."""

    def __init__(self, session: TierSession):
        self.session = session
        self.metrics = TierMetrics()
        self.observer = TierObserver(session.plugin_manager, FRAMEWORK, session.mode.value)
        self.wrapper: TieredCandidateGenerator | None = None

    def wrap(self, generator, kwargs: dict):
        from transformers.generation.candidate_generator import AssistedCandidateGenerator

        if type(generator) is not AssistedCandidateGenerator:
            reason = f"transformers chose {type(generator).__name__}, not a separate assistant model"
            warnings.warn(f"viasd-adapt: the slim tier is off for this call ({reason})", ViasdFallbackWarning, stacklevel=2)
            self.session.fallbacks.append(reason)
            return generator
        slim = self.session.slim
        runner = CachedRunner(slim.model, slim.new_cache) if (slim is not None and self.session.mode is Mode.LOSSLESS) else None
        config = kwargs.get("generation_config")
        self.wrapper = TieredCandidateGenerator(
            inner=generator,
            slim_runner=runner,
            logits_processor=kwargs.get("logits_processor"),
            greedy=not bool(getattr(config, "do_sample", False)),
            metrics=self.metrics,
            observer=self.observer,
        )
        return self.wrapper


@dataclass
class _PendingCycle:
    start: int  # length of the committed sequence when the cycle began
    candidates: list[int]
    n_kept: int  # leading candidates that are drafts (u kept them)
    drafted: int


class TieredCandidateGenerator:
    """Wraps transformers' ``AssistedCandidateGenerator`` with the slim verifier (cascade p -> u -> q).

    Not a subclass on purpose (see the module docstring). Everything the stock loop reads that is
    not defined here is forwarded to the wrapped generator.
    """

    requires_model_outputs = False

    def __init__(self, inner, slim_runner: CachedRunner | None, logits_processor, greedy: bool,
                 metrics: TierMetrics, observer: TierObserver):
        self.inner = inner
        self.slim_runner = slim_runner
        self.logits_processor = logits_processor
        self.greedy = greedy
        self.metrics = metrics
        self.observer = observer
        self._pending: _PendingCycle | None = None

    def __getattr__(self, name: str):
        if name == "inner":  # not set yet (copy/pickle): avoid infinite recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def get_candidates(self, input_ids: torch.LongTensor, **kwargs) -> tuple[torch.LongTensor, torch.Tensor | None]:
        candidate_ids, candidate_logits = self.inner.get_candidates(input_ids, **kwargs)
        start = input_ids.shape[1]
        drafts = candidate_ids[0, start:]
        g = int(drafts.shape[0])
        if candidate_logits is None or g == 0 or self.slim_runner is None:
            self._pending = _PendingCycle(start, drafts.tolist(), g, g)
            return candidate_ids, candidate_logits
        p = candidate_logits[0].float().softmax(dim=-1)
        u_logits = self._slim_logits(candidate_ids, start, g)
        candidates, _, n_kept = cascade_candidates(drafts.to(u_logits.device), p.to(u_logits.device),
                                                   u_logits.softmax(dim=-1), self.greedy, None)
        self._pending = _PendingCycle(start, candidates.tolist(), n_kept, g)
        revised = torch.cat([input_ids, candidates.to(input_ids.device)[None]], dim=-1)
        return revised, u_logits[: n_kept + 1][None].to(candidate_logits.device)

    def _slim_logits(self, candidate_ids: torch.LongTensor, start: int, g: int) -> torch.Tensor:
        """u's logits at the last committed token and every draft, processed like q's in the stock loop."""
        logits = self.slim_runner.logits_for(candidate_ids[0].tolist(), g + 1)
        self.metrics.slim_passes += 1
        if self.logits_processor is not None and len(self.logits_processor) > 0:
            ids = candidate_ids.to(logits.device)
            rows = [self.logits_processor(ids[:, : start + i], logits[i : i + 1].clone())[0] for i in range(g + 1)]
            logits = torch.stack(rows)
        return logits.float()

    def update_candidate_strategy(self, input_ids: torch.LongTensor, scores: torch.Tensor, num_matches: int) -> None:
        pending, self._pending = self._pending, None
        drafts_kept = 0
        if pending is not None:
            drafts_kept = self._record(pending, input_ids[0, pending.start :].tolist())
            # The wrapped generator tunes its draft length / confidence threshold on *its* drafts'
            # fate; it only reads the row count of ``scores`` (= its drafts + 1).
            scores = scores[:, :1].expand(-1, pending.drafted + 1, -1)
        self.inner.update_candidate_strategy(input_ids, scores, drafts_kept if pending is not None else num_matches)

    def _record(self, pending: _PendingCycle, new_tokens: list[int]) -> int:
        """Attributes each committed token to a tier; returns how many drafts survived."""
        cands = pending.candidates
        n_accepted = 0
        for i, token in enumerate(new_tokens):
            # A token q resamples after a rejection never equals the rejected candidate (the
            # residual max(0, q - u) is zero there; greedy: q's argmax differs by definition).
            if i < len(cands) and token == cands[i]:
                n_accepted += 1
            else:
                break
        g = pending.drafted
        result = verified_cycle(new_tokens, n_accepted, pending.n_kept, g)
        first_index = len(self.metrics.token_tiers)
        self.metrics.record_cycle(result, drafted=g)
        self.metrics.full_passes += 1
        self.metrics.draft_passes += g  # the stock assistant runs one forward per drafted token
        self.observer.cycle(result, self.metrics, first_index)
        return result.drafts_kept


def _generate_cascade(session: TierSession, original, call: dict):
    state = _LosslessCall(session)
    session._call = state
    try:
        output = original(**call)
    finally:
        session._call = None
    wrapper = state.wrapper
    if wrapper is None:  # transformers took a path we do not tier (warned already)
        return output
    inner = wrapper.inner
    # The stock loop persists the heuristic draft length only for an AssistedCandidateGenerator
    # instance, which the wrapper is not: do it here so behaviour matches the unpatched call.
    assistant_config = inner.assistant_model.generation_config
    if assistant_config.num_assistant_tokens_schedule == "heuristic":
        assistant_config.num_assistant_tokens = inner.num_assistant_tokens
    session._record(state.metrics)
    return _attach(output, state.metrics)


# ---------------------------------------------------------------------------- lossy / audit


def sampling_from_generation_config(config) -> SamplingConfig:
    """The temperature/top-k/top-p a prepared GenerationConfig asks for, as a SamplingConfig."""
    do_sample = bool(getattr(config, "do_sample", False))
    temperature = getattr(config, "temperature", None)
    top_k = getattr(config, "top_k", None)
    top_p = getattr(config, "top_p", None)
    return SamplingConfig(
        do_sample=do_sample,
        temperature=1.0 if temperature is None else float(temperature),
        top_k=0 if top_k is None else int(top_k),
        top_p=1.0 if top_p is None else float(top_p),
    )


def _eos_ids(config) -> list[int]:
    tensor = getattr(config, "_eos_token_tensor", None)
    if tensor is not None:
        return [int(x) for x in torch.as_tensor(tensor).reshape(-1).tolist()]
    eos = getattr(config, "eos_token_id", None)
    if eos is None:
        return []
    return [int(eos)] if isinstance(eos, int) else [int(x) for x in eos]


class _OwnLoop:
    """The decoding method handed to ``generate(custom_generate=...)`` for lossy and audit modes.

    transformers calls it as ``method(model, input_ids, logits_processor=, stopping_criteria=,
    generation_config=, **model_kwargs)`` after preparing all of those; the drafter and streamer,
    which 5.24 does not forward to a callable, are closed over.
    """

    def __init__(self, session: TierSession, assistant: nn.Module, streamer):
        self.session, self.assistant, self.streamer = session, assistant, streamer
        self.metrics: TierMetrics | None = None

    def __call__(self, model, input_ids, logits_processor=None, stopping_criteria=None, generation_config=None, **model_kwargs):
        session = self.session
        config = generation_config
        ignored = sorted({type(p).__name__ for p in (logits_processor or [])} - _SUPPORTED_WARPERS)
        if ignored:
            warnings.warn(f"viasd-adapt {session.mode.value} loop ignores these logits processors: {', '.join(ignored)}",
                          ViasdFallbackWarning, stacklevel=2)
        max_new = check_max_new_tokens(int(config.max_length) - input_ids.shape[1])
        attention = model_kwargs.get("attention_mask")
        rows = []
        try:
            for b in range(input_ids.shape[0]):
                row = input_ids[b] if attention is None else input_ids[b][attention[b].bool()]
                rows.append(self._generate_row(model, row, max_new, stopping_criteria, config))
        finally:
            if self.streamer is not None:
                self.streamer.end()
        metrics = rows[0].metrics
        for extra in rows[1:]:
            metrics = metrics.merge(extra.metrics)
        self.metrics = metrics
        sequences = _pad_right(input_ids, [r.tokens for r in rows], _pad_id(config))
        if config.return_dict_in_generate:
            from transformers.generation.utils import GenerateDecoderOnlyOutput

            output = GenerateDecoderOnlyOutput(sequences=sequences)
            output.viasd_row_metrics = [r.metrics for r in rows]
            return output
        return sequences

    def _generate_row(self, model, prompt_ids: torch.Tensor, max_new: int, stopping_criteria, config):
        """One sequence (padding already stripped, so positions start at 0 as HF's mask-derived ones do)."""
        session = self.session
        sampling = sampling_from_generation_config(config)
        verifier = TieredVerifier(model, session.settings, sampling, session.slim,
                                  session.plugin_manager, framework=FRAMEWORK)
        drafter = ModelDrafter(self.assistant, sampling)
        device = prompt_ids.device

        def should_stop(ids: list[int]) -> bool:
            if not stopping_criteria:
                return False
            return bool(stopping_criteria(torch.tensor([ids], device=device), None).all())

        def on_tokens(new: list[int]) -> None:
            if self.streamer is not None and new:
                self.streamer.put(torch.tensor([new]))

        # No q prefill: like the stock loop, draft straight after the prompt (q sees the prompt at
        # its first escalation), so cost is compared with assisted generation cycle for cycle.
        return speculative_generate(drafter, verifier, prompt_ids.tolist(), max_new, _eos_ids(config), None,
                                    on_tokens=on_tokens, should_stop=should_stop, q_prefill=False)


def _pad_id(config) -> int:
    for value in (getattr(config, "_pad_token_tensor", None), getattr(config, "pad_token_id", None)):
        if value is not None:
            return int(torch.as_tensor(value).reshape(-1)[0])
    eos = _eos_ids(config)
    return eos[0] if eos else 0


def _pad_right(input_ids: torch.Tensor, generated: list[list[int]], pad_id: int) -> torch.Tensor:
    """The (left-padded) prompts followed by each row's tokens, right-padded like HF's batched output."""
    width = max(len(tokens) for tokens in generated)
    tail = torch.full((input_ids.shape[0], width), pad_id, dtype=input_ids.dtype, device=input_ids.device)
    for b, tokens in enumerate(generated):
        tail[b, : len(tokens)] = torch.tensor(tokens, dtype=input_ids.dtype)
    return torch.cat([input_ids, tail], dim=-1)


def _generate_own_loop(session: TierSession, original, call: dict):
    if call.get("custom_generate") is not None:
        raise ConfigError("custom_generate cannot be combined with the slim tier's lossy/audit loop")
    assistant = call.pop("assistant_model")
    loop = _OwnLoop(session, assistant, call.get("streamer"))
    call["custom_generate"] = loop
    output = original(**call)
    if loop.metrics is not None:
        session._record(loop.metrics)
        _attach(output, loop.metrics)
    return output


__all__ = [
    "TierSession",
    "TierSettings",
    "TieredCandidateGenerator",
    "ViasdFallbackWarning",
    "is_patched",
    "patch",
    "sampling_from_generation_config",
    "tiered",
    "unpatch",
]
