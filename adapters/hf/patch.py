"""The patch: ``generate`` and ``_get_candidate_generator`` set on one model object, and the sessions.

The installed methods are dispatchers that look up the session of the *calling thread*
(:class:`_InstancePatch`); a thread without a session on the model gets the original methods.
Sessions nest; the instance attributes are removed (or the user's own put back) when the last
session on the model closes. What a patched call then runs is :mod:`.loop`'s.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Iterable, Iterator

from torch import nn

from viasd_adapt.checks import check_same_tokenizer
from viasd_adapt.config.mask import MaskArtifact, RoutingMask
from viasd_adapt.config.resolve import UNREAD
from viasd_adapt.core.notices import emit
from viasd_adapt.core.settings import TierSettings
from viasd_adapt.engine.context import RunContext, open_context
from viasd_adapt.adapters.hf.session import FRAMEWORK, TierSession
from viasd_adapt.errors import ConfigError
from viasd_adapt.models.pair import LoadedPair
from viasd_adapt.routing.layers import find_decoder_stack, refuse_compile_wrapper

_PATCHED_ATTRIBUTES = ("generate", "_get_candidate_generator")


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
        from viasd_adapt.adapters.hf.loop import tiered_generate

        _THREAD_STATE.inside = True
        try:
            return tiered_generate(session, self.original("generate"), args, kwargs)
        finally:
            _THREAD_STATE.inside = False

    def _dispatch_candidate_generator(self, *args, **kwargs):
        generator = self.original("_get_candidate_generator")(*args, **kwargs)
        session = self.current()
        call = session.stock_observer if session is not None else None
        if call is None:
            return generator
        return call.wrap(generator, kwargs)


_REGISTRY_LOCK = threading.Lock()
_PATCHES: dict[int, _InstancePatch] = {}
_THREAD_STATE = threading.local()


# ============================================================================ the calls


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


__all__ = ["FRAMEWORK", "TierSession", "is_patched", "patch", "tiered", "unpatch"]
