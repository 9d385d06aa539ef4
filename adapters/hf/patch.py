"""The patch: ``generate`` and ``_get_candidate_generator`` set on one model object, and the sessions.

The installed methods are dispatchers that look up the session of the *calling thread*
(:class:`_InstancePatch`); a thread without a session on the model gets the original methods.
Sessions nest; the instance attributes are removed (or the user's own put back) when the last
session on the model closes. What a patched call then runs is :mod:`.loop`'s.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

from torch import nn

from viasd_adapt.checks import check_same_tokenizer
from viasd_adapt.core.notices import emit
from viasd_adapt.engine.context import RunContext, build_context, loose_run_options
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
    context: RunContext | None = None,
    *,
    tokenizer: Any = None,
    assistant_tokenizer: Any = None,
    share_prefix: bool = True,
    **run_options: Any,
) -> TierSession:
    """Adds the slim tier to ``target.generate(..., assistant_model=...)`` for the calling thread.

    Args:
        target: the full verifier q (a transformers causal LM, or an encoder-decoder model: T5, BART,
            mBART, Marian, Whisper), or a pair from :func:`viasd_adapt.load_pair` (its target).
        context: the run's context, from :func:`viasd_adapt.context` (its settings, mask, plugins
            and tuned evidence); None: ``viasd_adapt.context(target)``, a pair's own settings and
            mask. Tuned settings are checked against each call's drafter: a call whose
            ``assistant_model`` (or prompt lookup) is not the drafter they were measured with runs
            the defaults, with a ``TunedForAnotherDrafterWarning`` (once per drafter).
        tokenizer, assistant_tokenizer: when given, their vocabularies must be identical.
        share_prefix: let q resume from the slim verifier's hidden states at its first skipped
            layer (:mod:`viasd_adapt.routing.shared`); False gives each verifier its own cache.
        run_options: 0.2's ``mask``, ``settings``, ``plugins`` and ``tuned``: deprecated (until
            0.4.0), given to :func:`viasd_adapt.context` instead; refused beside ``context``.

    Returns the session handle; pass it to :func:`unpatch`.
    """
    context, loose = loose_run_options("hf.patch", context, run_options, accepted=_LOOSE, stacklevel=3)
    return _open_session(target, context, loose, tokenizer, assistant_tokenizer, share_prefix)


#: the run options hf.patch and hf.tiered took in 0.2
_LOOSE = ("mask", "settings", "plugins", "tuned")


def _open_session(target: nn.Module | LoadedPair, context: RunContext | None, loose: dict[str, Any], tokenizer: Any,
                  assistant_tokenizer: Any, share_prefix: bool) -> TierSession:
    """:func:`patch` once its arguments are sorted: ``loose`` (0.2's run options) when there is no context."""
    given = target
    target = target.target if isinstance(target, LoadedPair) else target
    refuse_compile_wrapper(target)  # it has a generate() of sorts, but patching it would reach nothing
    if not hasattr(target, "generate") or not hasattr(type(target), "_get_candidate_generator"):
        raise ConfigError(f"{type(target).__name__} is not a transformers generation model (no generate())")
    find_decoder_stack(target)  # a clear UnsupportedModelError before anything is patched
    if context is None:  # a pair's: what it read when it loaded, nothing is read again
        context = build_context(given, **loose)
    elif context.target is not target:
        raise ConfigError("hf.patch: the context was built for another model; build it for this target "
                          "(viasd_adapt.context(target, ...))")
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
def tiered(
    target: nn.Module | LoadedPair,
    context: RunContext | None = None,
    *,
    tokenizer: Any = None,
    assistant_tokenizer: Any = None,
    share_prefix: bool = True,
    **run_options: Any,
) -> Iterator[TierSession]:
    """Context-manager form of :func:`patch` / :func:`unpatch`: the same arguments, and the patch
    is restored even when the block raises::

        with hf.tiered(target, context=viasd_adapt.context(target, mask="mask.json")) as session:
            target.generate(**inputs, assistant_model=drafter)
    """
    # the warning names the user's `with` line: this generator <- contextlib's __enter__ <- user
    context, loose = loose_run_options("hf.tiered", context, run_options, accepted=_LOOSE, stacklevel=4)
    session = _open_session(target, context, loose, tokenizer, assistant_tokenizer, share_prefix)
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
