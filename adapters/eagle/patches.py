"""The five swapped names of ``eagle.model.ea_model``, dispatched per thread and per model.

``ea_model.py`` does ``from .utils import *``, so ``eagenerate`` looks ``initialize_tree``,
``generate_candidates``, ``tree_decoding``, ``evaluate_posterior`` and ``update_inference_inputs``
up in ``eagle.model.ea_model``'s globals on every call: that is the seam. Globals are shared by
every thread, so the names are swapped for *dispatchers*, installed while at least one scope is
open (in any thread) and restored when the last one closes. Each dispatcher asks the calling
thread's scope (a ``threading.local``):

* a thread with no open scope, or an ``eagenerate`` of another EaModel than its scope's, gets
  eagle's original function: another thread's stock ``eagenerate`` is never tiered;
* otherwise the call goes to the scope's session with the thread's :class:`~.state.Generation`
  passed explicitly.

``generate_candidates`` and ``evaluate_posterior`` do not receive the model; a generation is bound
to the thread by ``initialize_tree`` (which does) and unbound when the thread starts a generation
of another model, so they dispatch on that binding.

Each thread may hold one scope at a time, and each EaModel may be in one scope at a time (it has
one KV cache); scopes on different EaModels in different threads run side by side.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Protocol

from viasd_adapt.errors import ViasdError

if TYPE_CHECKING:  # pragma: no cover
    from viasd_adapt.adapters.eagle.state import Generation


class ScopedSession(Protocol):
    """What the dispatchers need of the session a scope is open for (an
    :class:`~viasd_adapt.adapters.eagle.session.EagleTierSession`). Declared here, so that this
    module, which the session imports, does not import the session back."""

    ea_model: Any

    def start_generation(self) -> "Generation": ...
    def initialize_tree(self, generation: "Generation", *args: Any) -> Any: ...
    def candidates_drafted(self, generation: "Generation", *args: Any) -> None: ...
    def tree_decoding(self, generation: "Generation", *args: Any) -> Any: ...
    def evaluate_posterior(self, generation: "Generation", *args: Any) -> Any: ...
    def update_inference_inputs(self, generation: "Generation", *args: Any) -> Any: ...

PATCHED_NAMES = ("initialize_tree", "generate_candidates", "tree_decoding", "evaluate_posterior", "update_inference_inputs")


def ea_module():
    from eagle.model import ea_model

    return ea_model


class _ThreadScope(threading.local):
    """The calling thread's open scope and the generation it is running (declared, per thread)."""

    def __init__(self) -> None:
        self.session: ScopedSession | None = None
        self.generation: Generation | None = None


_THREAD = _ThreadScope()
_LOCK = threading.Lock()
_ORIGINALS: dict[str, Callable] = {}  # eagle's functions while the dispatchers are installed
_OPEN: dict[int, ScopedSession] = {}  # id(EaModel) -> its open scope's session, across threads


def current_session() -> ScopedSession | None:
    """The session of the scope the calling thread holds, if any."""
    return _THREAD.session


def original(name: str) -> Callable:
    """Eagle's own function ``name`` (the installed one when no dispatcher is in place)."""
    return _ORIGINALS.get(name) or getattr(ea_module(), name)


# ----------------------------------------------------------------------------- the dispatchers


def _initialize_tree(input_ids, model, tree_attn_mask, past_key_values, logits_processor):
    session = _THREAD.session
    if session is None or model is not session.ea_model:
        _THREAD.generation = None
        return original("initialize_tree")(input_ids, model, tree_attn_mask, past_key_values, logits_processor)
    generation = session.start_generation()
    _THREAD.generation = generation
    return session.initialize_tree(generation, input_ids, model, tree_attn_mask, past_key_values, logits_processor)


def _generate_candidates(tree_logits, tree_indices, retrieve_indices, sample_token, logits_processor):
    generation = _THREAD.generation
    out = original("generate_candidates")(tree_logits, tree_indices, retrieve_indices, sample_token, logits_processor)
    if generation is not None:
        _THREAD.session.candidates_drafted(generation, tree_logits, tree_indices, logits_processor, out)
    return out


def _tree_decoding(model, tree_candidates, past_key_values, tree_position_ids, input_ids, retrieve_indices):
    generation, session = _THREAD.generation, _THREAD.session
    if generation is None or model is not session.ea_model:
        return original("tree_decoding")(model, tree_candidates, past_key_values, tree_position_ids, input_ids, retrieve_indices)
    return session.tree_decoding(generation, model, tree_candidates, past_key_values, tree_position_ids, input_ids,
                                 retrieve_indices)


def _evaluate_posterior(logits, candidates, logits_processor, cart_candidates_prob, op, p_indices, tree_candidates, b_indices):
    generation = _THREAD.generation
    if generation is None:
        return original("evaluate_posterior")(logits, candidates, logits_processor, cart_candidates_prob, op, p_indices,
                                              tree_candidates, b_indices)
    return _THREAD.session.evaluate_posterior(generation, logits, candidates, logits_processor, cart_candidates_prob, op,
                                              p_indices, tree_candidates, b_indices)


def _update_inference_inputs(input_ids, candidates, best_candidate, accept_length, retrieve_indices, logits_processor,
                             logits, tree_logits, new_token, past_key_values_data_list, current_length_data, model,
                             hidden_state, hidden_state_new, sample_p):
    generation, session = _THREAD.generation, _THREAD.session
    args = (input_ids, candidates, best_candidate, accept_length, retrieve_indices, logits_processor, logits, tree_logits,
            new_token, past_key_values_data_list, current_length_data, model, hidden_state, hidden_state_new, sample_p)
    if generation is None or model is not session.ea_model:
        return original("update_inference_inputs")(*args)
    return session.update_inference_inputs(generation, *args)


DISPATCHERS: dict[str, Callable[..., Any]] = {
    "initialize_tree": _initialize_tree,
    "generate_candidates": _generate_candidates,
    "tree_decoding": _tree_decoding,
    "evaluate_posterior": _evaluate_posterior,
    "update_inference_inputs": _update_inference_inputs,
}


# ----------------------------------------------------------------------------- opening and closing scopes


def open_scope(session: ScopedSession) -> None:
    """Binds ``session`` to the calling thread; installs the dispatchers if none are in place."""
    key = id(session.ea_model)
    with _LOCK:
        if _THREAD.session is not None:
            raise ViasdError("an eagle.tiered scope is already active in this thread: scopes cannot nest")
        if key in _OPEN:
            raise ViasdError(
                "this EaModel is already inside an eagle.tiered scope in another thread; an EaModel has one KV "
                "cache, so it can run one generation at a time (load a second EaModel for a second thread)"
            )
        if not _OPEN:
            module = ea_module()
            for name in PATCHED_NAMES:
                _ORIGINALS[name] = getattr(module, name)
            for name in PATCHED_NAMES:
                setattr(module, name, DISPATCHERS[name])
        _OPEN[key] = session
    _THREAD.session, _THREAD.generation = session, None


def close_scope(session: ScopedSession) -> None:
    """Unbinds ``session``; the last scope to close restores eagle's functions."""
    if _THREAD.session is session:
        _THREAD.session, _THREAD.generation = None, None
    with _LOCK:
        if _OPEN.get(id(session.ea_model)) is session:
            del _OPEN[id(session.ea_model)]
        if not _OPEN and _ORIGINALS:
            module = ea_module()
            for name in PATCHED_NAMES:
                setattr(module, name, _ORIGINALS[name])
            _ORIGINALS.clear()


def is_patched() -> bool:
    """Whether any eagle name is currently swapped (for tests and diagnostics)."""
    from eagle.model import utils

    module = ea_module()
    return any(getattr(module, name) is not getattr(utils, name) for name in PATCHED_NAMES)


__all__ = ["DISPATCHERS", "PATCHED_NAMES", "close_scope", "current_session", "ea_module", "is_patched", "open_scope",
           "original"]
